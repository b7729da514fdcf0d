package uninstall_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/uninstall"
	"github.com/imperator-federation/imperator/test/util/framework"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

const (
	agentNS  = framework.AgentNamespace
	tenantNS = "team-a"
	typeKey  = imperatorv1alpha1.Prefix + "compute-xlarge"
)

// TestRunLeavesNoTrap is an agent's cluster as the agent leaves it when it is
// uninstalled with its Machines in place: a pool node labelled, tainted and
// annotated, a MachineNodePool holding its finalizer, a reservation
// StatefulSet and Service, a waiting and a running guest. Run refuses while
// an agent pod is left, then removes exactly what is ours, and a second run
// changes nothing.
func TestRunLeavesNoTrap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env, err := framework.Start(ctx, framework.Options{CRDs: framework.SpokeCRDs, Namespaces: []string{agentNS, tenantNS}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the API server: %v", err)
		}
	})
	c := env.Client
	create := func(obj client.Object) {
		t.Helper()
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
	}

	create(wrappers.MakeNode("pool-node").
		Label(imperatorv1alpha1.NodePoolKey, string(imperatorv1alpha1.NodePoolReady)).
		Label(typeKey, "general").
		Label("team", "ml").
		Annotation(imperatorv1alpha1.MachineGroupKey, "general").
		Annotation("owner", "infra").
		Taint(imperatorv1alpha1.NodePoolKey, string(imperatorv1alpha1.NodePoolReady), corev1.TaintEffectNoSchedule).
		Taint(typeKey, "general", corev1.TaintEffectNoSchedule).
		Taint("dedicated", "gpu", corev1.TaintEffectNoSchedule).Obj())
	create(wrappers.MakeNode("other-node").Label("team", "web").Obj())
	create(&imperatorv1alpha1.MachineNodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "general-machine-node-pool", Finalizers: []string{imperatorv1alpha1.NodePoolFinalizer}},
		Spec:       imperatorv1alpha1.MachineNodePoolSpec{MachineGroup: "general"},
	})
	reservationLabels := map[string]string{imperatorv1alpha1.PodRoleKey: string(imperatorv1alpha1.PodRoleReservation)}
	create(statefulSet("compute-xlarge-general", reservationLabels))
	create(statefulSet("someone-elses", map[string]string{"app": "db"}))
	create(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: agentNS, Name: "compute-xlarge-general", Labels: reservationLabels},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: reservationLabels},
	})
	waiting := wrappers.MakePod(tenantNS, "waiting").InjectedGuest("general", "compute-xlarge").
		Annotation(imperatorv1alpha1.QueueAnnotation, "waiting for compute-xlarge: 1st in line, 1 of 1 in use").Obj()
	waiting.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: imperatorv1alpha1.SlotSchedulingGate}}
	create(waiting)
	create(wrappers.MakePod(tenantNS, "running").InjectedGuest("general", "compute-xlarge").NodeName("pool-node").Obj())
	otherGate := wrappers.MakePod(tenantNS, "kueue-gated").Obj()
	otherGate.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/admission"}}
	create(otherGate)
	agent := wrappers.MakePod(agentNS, "imperator-spoke-7d9f").Label(uninstall.AgentNameLabel, uninstall.AgentName).Obj()
	create(agent)

	// An agent still running would put back what the step removes.
	short, cancelShort := context.WithTimeout(ctx, 5*time.Second)
	_, err = uninstall.Run(short, c, uninstall.Options{Namespace: agentNS, PollInterval: 200 * time.Millisecond}, &bytes.Buffer{})
	cancelShort()
	if err == nil || !strings.Contains(err.Error(), "the agent still runs") || !strings.Contains(err.Error(), agent.Name) {
		t.Fatalf("Run with the agent's pod left: err = %v, want one naming the agent's pod %s", err, agent.Name)
	}
	var node corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: "pool-node"}, &node); err != nil {
		t.Fatal(err)
	}
	if _, ok := node.Labels[imperatorv1alpha1.NodePoolKey]; !ok {
		t.Fatal("Run changed a node while the agent's pod was left")
	}

	if err := c.Delete(ctx, agent, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	res, err := uninstall.Run(ctx, c, uninstall.Options{Namespace: agentNS}, &log)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, log.String())
	}
	want := uninstall.Result{
		Nodes:         []string{"pool-node"},
		Finalizers:    []string{"general-machine-node-pool"},
		Reservations:  []string{"StatefulSet compute-xlarge-general", "Service compute-xlarge-general"},
		WaitingGuests: []string{tenantNS + "/waiting"},
	}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("Run's result (-want +got):\n%s", diff)
	}

	if err := c.Get(ctx, client.ObjectKey{Name: "pool-node"}, &node); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"team": "ml"}, withoutKubernetesLabels(node.Labels)); diff != "" {
		t.Errorf("pool-node's labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"owner": "infra"}, node.Annotations); diff != "" {
		t.Errorf("pool-node's annotations (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}, withoutKubernetesTaints(node.Spec.Taints)); diff != "" {
		t.Errorf("pool-node's taints (-want +got):\n%s", diff)
	}

	var pool imperatorv1alpha1.MachineNodePool
	if err := c.Get(ctx, client.ObjectKey{Name: "general-machine-node-pool"}, &pool); err != nil {
		t.Fatal(err)
	}
	if len(pool.Finalizers) != 0 {
		t.Errorf("MachineNodePool finalizers = %v, want none", pool.Finalizers)
	}
	if err := c.Delete(ctx, &pool); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: pool.Name}, &pool); err == nil {
		t.Errorf("MachineNodePool %s still exists after its deletion (finalizers %v)", pool.Name, pool.Finalizers)
	}

	var sets appsv1.StatefulSetList
	if err := c.List(ctx, &sets, client.InNamespace(agentNS)); err != nil {
		t.Fatal(err)
	}
	var setNames []string
	for _, s := range sets.Items {
		if s.DeletionTimestamp == nil {
			setNames = append(setNames, s.Name)
		}
	}
	if diff := cmp.Diff([]string{"someone-elses"}, setNames); diff != "" {
		t.Errorf("StatefulSets left in %s (-want +got):\n%s", agentNS, diff)
	}

	var got corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(waiting), &got); err != nil {
		t.Fatal(err)
	}
	if got.Annotations[imperatorv1alpha1.QueueAnnotation] != uninstall.WaitingGuestMessage {
		t.Errorf("waiting guest's %s = %q, want the uninstall message", imperatorv1alpha1.QueueAnnotation, got.Annotations[imperatorv1alpha1.QueueAnnotation])
	}
	if len(got.Spec.SchedulingGates) != 1 {
		t.Errorf("waiting guest's gates = %v, want it left at %s", got.Spec.SchedulingGates, imperatorv1alpha1.SlotSchedulingGate)
	}
	var events corev1.EventList
	if err := c.List(ctx, &events, client.InNamespace(tenantNS)); err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range events.Items {
		reasons = append(reasons, e.InvolvedObject.Name+" "+e.Type+" "+e.Reason)
	}
	if diff := cmp.Diff([]string{"waiting Warning " + uninstall.EventReason}, reasons); diff != "" {
		t.Errorf("events in %s (-want +got):\n%s", tenantNS, diff)
	}
	for _, name := range []string{"running", "kueue-gated"} {
		if err := c.Get(ctx, client.ObjectKey{Namespace: tenantNS, Name: name}, &got); err != nil {
			t.Fatal(err)
		}
		if _, ok := got.Annotations[imperatorv1alpha1.QueueAnnotation]; ok {
			t.Errorf("pod %s, not waiting at our gate, was annotated", name)
		}
	}

	// Idempotent: a second run (a hook retried) changes nothing.
	res, err = uninstall.Run(ctx, c, uninstall.Options{Namespace: agentNS}, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("second Run: %v", err)
	}
	if diff := cmp.Diff(uninstall.Result{}, res); diff != "" {
		t.Errorf("second Run changed something (-want +got):\n%s", diff)
	}
}

func statefulSet(name string, labels map[string]string) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: agentNS, Name: name, Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
}

// withoutKubernetesLabels drops the labels MakeNode sets for every node.
func withoutKubernetesLabels(labels map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range labels {
		if !strings.HasPrefix(k, "kubernetes.io/") && !strings.Contains(k, "nvidia.com/") {
			out[k] = v
		}
	}
	return out
}

// withoutKubernetesTaints drops the not-ready taint the API server puts on
// a new node.
func withoutKubernetesTaints(taints []corev1.Taint) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range taints {
		if !strings.HasPrefix(t.Key, "node.kubernetes.io/") {
			out = append(out, t)
		}
	}
	return out
}

// TestMainRefusesBadFlags: usage errors exit 2 naming the flag, before any
// API server is asked.
func TestMainRefusesBadFlags(t *testing.T) {
	cases := map[string]struct {
		args     []string
		wantCode int
		wantErr  string
	}{
		"negative timeout":   {args: []string{"--timeout=-1s"}, wantCode: 2, wantErr: "--timeout=-1s: must be positive"},
		"empty namespace":    {args: []string{"--namespace="}, wantCode: 2, wantErr: "--namespace: must not be empty"},
		"a stray argument":   {args: []string{"now"}, wantCode: 2, wantErr: `unexpected argument "now"`},
		"an unknown flag":    {args: []string{"--force"}, wantCode: 2, wantErr: "flag provided but not defined: -force"},
		"help is no failure": {args: []string{"--help"}, wantCode: 0, wantErr: "Usage: spoke uninstall"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := uninstall.Main(tc.args, &stdout, &stderr)
			if code != tc.wantCode || !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("Main(%q) = %d, stderr %q; want %d with %q", tc.args, code, stderr.String(), tc.wantCode, tc.wantErr)
			}
		})
	}
}
