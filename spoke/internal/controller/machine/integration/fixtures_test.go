package machine_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// shape is a machine type as a guest gets it from the injector.
type shape struct {
	cpu, memory string
	gpus        string
	gpuSelector map[string]string
}

// shapes are the machine types the specs use: GeneralMachine's and
// compute-small.
var shapes = map[string]shape{
	"compute-medium": {cpu: "6000m", memory: "48Gi", gpus: "1", gpuSelector: map[string]string{imperatorv1alpha1.GPUMachineLabel: "DGX-1"}},
	"compute-xlarge": {cpu: "40000m", memory: "128Gi", gpus: "2", gpuSelector: map[string]string{imperatorv1alpha1.GPUProductLabel: "NVIDIA-GeForce-RTX-3090"}},
	"compute-small":  {cpu: "2", memory: "8Gi"},
}

// placementTerm is the required node selector term of a machine type:
// the type's own key, the node pool, then the GPU selector (docs/contract.md).
func placementTerm(machineType string) corev1.NodeSelectorTerm {
	term := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: imperatorv1alpha1.MachineTypeKeyFor(machineType), Operator: corev1.NodeSelectorOpIn, Values: []string{group}},
		{Key: imperatorv1alpha1.NodePoolKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"ready"}},
	}}
	for k, v := range shapes[machineType].gpuSelector {
		term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpIn, Values: []string{v}})
	}
	return term
}

// guest is a guest pod of machineType as the injector would have admitted
// it: labels, the injector's record, requests = limits, tolerations and
// node affinity of the type, held at the slot scheduling gate and stamped
// with the time of its admission. It stops at once when deleted.
func guest(namespace, name, machineType string) *corev1.Pod {
	pod := ungatedGuest(namespace, name, machineType)
	pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: imperatorv1alpha1.SlotSchedulingGate}}
	pod.Annotations[imperatorv1alpha1.AdmittedAtAnnotation] = time.Now().UTC().Format(time.RFC3339Nano)
	return pod
}

// ungatedGuest is a guest admitted before the agent gated guests (an
// upgrade): everything the injector sets but the slot gate, its record
// included.
func ungatedGuest(namespace, name, machineType string) *corev1.Pod {
	s := shapes[machineType]
	w := wrappers.MakePod(namespace, name).InjectedGuest(group, machineType).
		Request(0, corev1.ResourceCPU, s.cpu).Request(0, corev1.ResourceMemory, s.memory).
		Toleration(imperatorv1alpha1.MachineTypeKeyFor(machineType), group).
		Toleration(imperatorv1alpha1.NodePoolKey, "ready").
		RequiredNodeAffinity(placementTerm(machineType))
	if s.gpus != "" {
		w.Request(0, "nvidia.com/gpu", s.gpus)
	}
	pod := w.Obj()
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	return pod
}

// createGuestNamespace creates a namespace for one spec's guests, labelled
// with labels, and removes it (and its pods) after the spec.
func createGuestNamespace(ctx context.Context, labels map[string]string) string {
	name := "guests-" + rand.String(5)
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		Expect(k8s.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(name), client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(func(g Gomega) {
			pods := &corev1.PodList{}
			g.Expect(k8s.List(ctx, pods, client.InNamespace(name))).To(Succeed())
			g.Expect(pods.Items).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))).To(Succeed())
	})
	return name
}

var injectionEnabled = map[string]string{imperatorv1alpha1.InjectResourceKey: imperatorv1alpha1.InjectResourceEnabled}

// createMachine creates m and, after the spec, deletes it and waits until
// the garbage collector has removed its reservations and their pods.
func createMachine(ctx context.Context, m *imperatorv1alpha1.Machine) {
	Expect(k8s.Create(ctx, m)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, m))).To(Succeed())
		Eventually(func() bool {
			return isNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(m), &imperatorv1alpha1.Machine{}))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(BeTrue())
		expectNoReservations(ctx)
	})
}

// expectNoReservations waits until the agent's namespace holds no
// reservation StatefulSet, Service or pod.
func expectNoReservations(ctx context.Context) {
	reservation := client.MatchingLabels{imperatorv1alpha1.PodRoleKey: string(imperatorv1alpha1.PodRoleReservation)}
	Eventually(func(g Gomega) {
		for _, list := range []client.ObjectList{&appsv1.StatefulSetList{}, &corev1.ServiceList{}, &corev1.PodList{}} {
			g.Expect(k8s.List(ctx, list, client.InNamespace(agentNamespace), reservation)).To(Succeed())
			g.Expect(meta.LenList(list)).To(BeZero(), "%T", list)
		}
	}).WithContext(ctx).WithTimeout(60 * time.Second).Should(Succeed())
}

// usage returns the Machine's status usage by machine type.
func usage(ctx context.Context, name string) func(Gomega) map[string]imperatorv1alpha1.Usage {
	return func(g Gomega) map[string]imperatorv1alpha1.Usage {
		m := &imperatorv1alpha1.Machine{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, m)).To(Succeed())
		out := map[string]imperatorv1alpha1.Usage{}
		for _, a := range m.Status.AvailableMachines {
			out[a.Name] = a.Usage
		}
		return out
	}
}

// condition returns a condition of the Machine, failing when it is missing
// or describes an older generation.
func condition(ctx context.Context, name, conditionType string) func(Gomega) metav1.Condition {
	return func(g Gomega) metav1.Condition {
		m := &imperatorv1alpha1.Machine{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, m)).To(Succeed())
		c := meta.FindStatusCondition(m.Status.Conditions, conditionType)
		g.Expect(c).NotTo(BeNil(), "condition %s", conditionType)
		g.Expect(c.ObservedGeneration).To(Equal(m.Generation), "condition %s describes generation %d", conditionType, c.ObservedGeneration)
		return *c
	}
}

// podsOf lists the pods of a namespace matching labels.
func podsOf(ctx context.Context, g Gomega, namespace string, labels map[string]string) []corev1.Pod {
	pods := &corev1.PodList{}
	g.Expect(k8s.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels(labels))).To(Succeed())
	return pods.Items
}

// reservationPods lists the reservation pods of a machine type.
func reservationPods(ctx context.Context, g Gomega, machineType string) []corev1.Pod {
	return podsOf(ctx, g, agentNamespace, map[string]string{
		imperatorv1alpha1.MachineGroupKey: group,
		imperatorv1alpha1.MachineTypeKey:  machineType,
		imperatorv1alpha1.PodRoleKey:      string(imperatorv1alpha1.PodRoleReservation),
	})
}

// runningReservations counts the Running reservation pods of a machine type.
func runningReservations(ctx context.Context, g Gomega, machineType string) int {
	n := 0
	for _, p := range reservationPods(ctx, g, machineType) {
		if running(&p) {
			n++
		}
	}
	return n
}

// statefulSet reads the reservation StatefulSet of a machine type.
func statefulSet(ctx context.Context, g Gomega, machineType string) *appsv1.StatefulSet {
	sts := &appsv1.StatefulSet{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: imperatorv1alpha1.ReservationName(machineType, group)}, sts)).To(Succeed())
	return sts
}

// running is a pod kwok runs.
func running(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil
}

// eventsAbout lists the events.k8s.io Events whose regarding object is the
// Machine name, with the given reason.
func eventsAbout(ctx context.Context, g Gomega, name, reason string) []string {
	list := &eventsv1.EventList{}
	g.Expect(k8s.List(ctx, list)).To(Succeed())
	var notes []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Machine" && e.Regarding.Name == name && e.Reason == reason {
			notes = append(notes, e.Note)
		}
	}
	return notes
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// podEvents lists the events of every pod (scheduling, preemption), oldest
// first, for failure reports.
func podEvents() string {
	list := &eventsv1.EventList{}
	if err := k8s.List(context.Background(), list); err != nil {
		return err.Error()
	}
	slices.SortFunc(list.Items, func(a, b eventsv1.Event) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	var out strings.Builder
	for _, e := range list.Items {
		if e.Regarding.Kind == "Pod" {
			fmt.Fprintf(&out, "%s %s/%s %s: %s %s\n", e.CreationTimestamp.Format(time.StampMilli), e.Regarding.Namespace, e.Regarding.Name,
				e.ReportingController, e.Reason, e.Note)
		}
	}
	return out.String()
}

// setNodePool labels a node with a node-pool state, as the node-pool
// controller would (the suite runs no node-pool controller).
func setNodePool(ctx context.Context, name string, state imperatorv1alpha1.NodePoolState) {
	GinkgoHelper()
	node := &corev1.Node{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
	patch := client.MergeFrom(node.DeepCopy())
	node.Labels[imperatorv1alpha1.NodePoolKey] = string(state)
	Expect(k8s.Patch(ctx, node, patch)).To(Succeed())
}
