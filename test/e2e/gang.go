package e2e

import (
	"context"
	"slices"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// GangInput configures GangSpec.
type GangInput struct {
	Env *Env
	// Spoke is where the journey adds a Machine of its own named Group, with
	// Units units (at least 3) of Type on a node of its own named Node.
	Spoke, Group, Type, Node string
	Units                    int32
	// Namespace is created for the journey and deleted after it.
	Namespace string
}

// GangSpec is journey 10: a 2-pod training job waits whole and runs whole.
// Single guests take all but one unit of the type; the job's two workers
// (one gang, imperator.tenzen-y.io/gang with gang-size 2) both stay at the
// slot gate, told "2 of 2 needed, 1 free", and neither takes the free unit.
// Two single guests leave: both workers are let through together and run.
// Everything is deleted at the end, and every unit is free again; then the
// journey's Machine and node go.
func GangSpec(ctx context.Context, in GangInput) {
	spoke := in.Env.Spoke(in.Spoke)
	addOwnXlarge(ctx, in.Env, in.Spoke, in.Node, in.Group, in.Type, in.Units)
	// usage takes its context: the cleanup's outlives the spec's.
	usage := func(ctx context.Context, g Gomega) *queryv1.TypeUsage {
		resp, err := in.Env.Ctl.Usage(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		u := UsageOf(resp, in.Spoke, in.Group, in.Type)
		g.Expect(u).NotTo(BeNil(), "no usage of %s/%s on %s", in.Group, in.Type, in.Spoke)
		return u
	}
	var units int32
	Eventually(ctx, func(g Gomega) {
		u := usage(ctx, g)
		g.Expect(u.GetFree()).To(Equal(u.GetMaximum()), "the journey starts with every %s unit of %s free", in.Type, in.Spoke)
		units = u.GetMaximum()
		g.Expect(units).To(BeNumerically(">=", 3))
	}).WithTimeout(joinTimeout).WithPolling(poll).Should(Succeed())

	ns := wrappers.MakeNamespace(in.Namespace).InjectionEnabled().Obj()
	Expect(client.IgnoreAlreadyExists(spoke.Client.Create(ctx, ns))).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		By("deleting the journey's guests: every unit is free again")
		Expect(client.IgnoreNotFound(spoke.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(in.Namespace), client.GracePeriodSeconds(0)))).To(Succeed())
		Expect(client.IgnoreNotFound(spoke.Client.Delete(ctx, ns))).To(Succeed())
		Eventually(ctx, func(g Gomega) {
			u := usage(ctx, g)
			g.Expect(u.GetFree()).To(Equal(u.GetMaximum()), "every %s unit of %s is free again", in.Type, in.Spoke)
		}).WithTimeout(joinTimeout).WithPolling(poll).Should(Succeed())
	})

	guest := func(name string) *corev1.Pod {
		return wrappers.MakePod(in.Namespace, name).Guest(in.Group, in.Type).ContainerName("train").TerminationGracePeriod(0).Obj()
	}
	pods := func(g Gomega) map[string]corev1.Pod {
		list := &corev1.PodList{}
		g.Expect(spoke.Client.List(ctx, list, client.InNamespace(in.Namespace))).To(Succeed())
		out := map[string]corev1.Pod{}
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil {
				out[p.Name] = p
			}
		}
		return out
	}
	gated := func(p corev1.Pod) bool {
		return slices.ContainsFunc(p.Spec.SchedulingGates, func(gate corev1.PodSchedulingGate) bool {
			return gate.Name == imperatorv1alpha1.SlotSchedulingGate
		})
	}

	singles := int(units) - 1
	By("single guests take " + strconv.Itoa(singles) + " of the " + strconv.Itoa(int(units)) + " " + in.Type + " units")
	for i := range singles {
		Expect(spoke.Client.Create(ctx, guest("single-"+strconv.Itoa(i)))).To(Succeed())
	}
	Eventually(ctx, func(g Gomega) {
		for name, p := range pods(g) {
			g.Expect(p.Spec.NodeName).NotTo(BeEmpty(), "guest %s is bound", name)
		}
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By("a 2-pod gang: both workers wait at the slot gate, told why, and neither takes the free unit")
	workers := []string{"train-0", "train-1"}
	for _, name := range workers {
		worker := guest(name)
		worker.Labels[imperatorv1alpha1.GangKey] = "train"
		worker.Annotations = map[string]string{imperatorv1alpha1.GangSizeAnnotation: "2"}
		Expect(spoke.Client.Create(ctx, worker)).To(Succeed())
	}
	note := "gang " + in.Namespace + "/train: 2 of 2 needed, 1 free; Pending (NotEnoughResources): waiting whole for " + in.Type
	waitingWhole := func(g Gomega) {
		all := pods(g)
		for _, name := range workers {
			p := all[name]
			g.Expect(gated(p)).To(BeTrue(), "worker %s is at the slot gate", name)
			g.Expect(p.Annotations[imperatorv1alpha1.QueueAnnotation]).To(HavePrefix(note), "worker %s is told why", name)
		}
	}
	Eventually(ctx, waitingWhole).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
	Consistently(ctx, waitingWhole).WithTimeout(3 * time.Second).WithPolling(poll).Should(Succeed())
	Eventually(ctx, func(g Gomega) {
		m := &imperatorv1alpha1.Machine{}
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.Group}, m)).To(Succeed())
		u := StatusUsage(m, in.Type)
		g.Expect(u).NotTo(BeNil())
		g.Expect(u.Queued).To(BeEquivalentTo(2), "the Machine counts the workers as queued")
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By("two single guests leave: both workers are let through together and run")
	for _, name := range []string{"single-0", "single-1"} {
		Expect(spoke.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: in.Namespace, Name: name}},
			client.GracePeriodSeconds(0))).To(Succeed())
	}
	Eventually(ctx, func(g Gomega) {
		all := pods(g)
		for _, name := range workers {
			p := all[name]
			g.Expect(gated(p)).To(BeFalse(), "worker %s passed the gate", name)
			g.Expect(p.Spec.NodeName).NotTo(BeEmpty(), "worker %s is bound", name)
		}
		events := &corev1.EventList{}
		g.Expect(spoke.Client.List(ctx, events, client.InNamespace(in.Namespace))).To(Succeed())
		for _, name := range workers {
			g.Expect(events.Items).To(ContainElement(And(
				HaveField("InvolvedObject.Name", name), HaveField("Reason", "SlotGranted"),
				HaveField("Message", ContainSubstring("2 of 2 let through together")))), "worker %s is told its gang went together", name)
		}
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
}
