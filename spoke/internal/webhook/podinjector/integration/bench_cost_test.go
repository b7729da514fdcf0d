package podinjector_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/admissionpolicy"
	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// bigMachine is a Machine of group name with types GPU machine types
// (t00, t01, ...; every GPU selector set) and nodes pool nodes.
func bigMachine(name string, types, nodes int) *imperatorv1alpha1.Machine {
	w := wrappers.MakeMachine(name, name)
	for i := range types {
		w.Type(fmt.Sprintf("t%02d", i), "40", "128Gi", 4).GPU("nvidia.com/gpu", 2, "NVIDIA-H100-80GB-HBM3", "hopper").GPUMachine("DGX-H100")
	}
	for i := range nodes {
		w.Node(fmt.Sprintf("%s-node-%04d", name, i), fmt.Sprintf("t%02d", i%types))
	}
	return w.Obj()
}

// BenchmarkInjectionPolicyCost admits guests of the last machine type of a
// Machine with 50 types and 100 nodes, and of one at the CRD's limits (64
// types, 1000 nodes), through the injection policies of
// deploy/spoke/policy/injection beside the sample Machine: every admission
// must stay within the API server's CEL budgets (a policy that ran out
// would refuse the guest: failurePolicy Fail), and the benchmark reports
// the creation's p50 and p99 and logs the mean time the API server spent
// in a mutating policy check and how many it ran
// (apiserver_mutating_admission_policy_check_duration_seconds).
// The guest is a heavy one: three containers, three required node selector
// terms of three expressions each, tolerations and requests of its own.
// Run with `go test -run '^$' -bench InjectionPolicyCost`.
func BenchmarkInjectionPolicyCost(b *testing.B) {
	ctx := context.Background()
	e := startPolicyEnvironment(b)
	for _, m := range []*imperatorv1alpha1.Machine{bigMachine("big", 50, 100), bigMachine("max", 64, 1000)} {
		if err := e.Client.Create(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := (&admissionpolicy.Reconciler{Client: e.Client, Enabled: true}).Reconcile(ctx, reconcile.Request{}); err != nil {
		b.Fatal(err)
	}
	if err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench-cost",
		Labels: map[string]string{imperatorv1alpha1.InjectResourceKey: imperatorv1alpha1.InjectResourceEnabled}}}); err != nil {
		b.Fatal(err)
	}
	// The API server takes the new binding (groups big and max) from its
	// informer.
	deadline := time.Now().Add(30 * time.Second)
	for {
		probe := wrappers.MakePod("bench-cost", "probe").Guest("max", "t63").Obj()
		err := e.Client.Create(ctx, probe, client.DryRunAll)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("a guest of max t63 still refused 30 s after the Machines' creation: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stages := []harness.Stage{
		// The API server times its mutating policies per check; its
		// validating policies' histogram only sees denials and errors.
		{Label: "mutating admission policy check", Family: "apiserver_mutating_admission_policy_check_duration_seconds"},
	}
	for _, bc := range []struct{ name, group, machineType string }{
		{"50-types-100-nodes", "big", "t49"},
		{"64-types-1000-nodes", "max", "t63"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			zone := func(value string) corev1.NodeSelectorTerm {
				return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{value}},
					{Key: imperatorv1alpha1.NodePoolKey, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"maintenance"}},
					{Key: imperatorv1alpha1.GPUProductLabel, Operator: corev1.NodeSelectorOpExists},
				}}
			}
			template := wrappers.MakePod("bench-cost", "").Guest(bc.group, bc.machineType).
				Label(imperatorv1alpha1.InjectingContainerKey, "main").
				RequiredNodeAffinity(zone("a"), zone("b"), zone("c")).
				Toleration(imperatorv1alpha1.NodePoolKey, "ready").Obj()
			template.GenerateName = "guest-"
			template.Spec.Containers = []corev1.Container{
				{Name: "logs", Image: "pause"},
				{Name: "main", Image: "pause", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("10Gi")}}},
				{Name: "metrics", Image: "pause"},
			}
			before, err := harness.ReadStages(ctx, e.Config, stages)
			if err != nil {
				b.Fatal(err)
			}
			latencies := make([]time.Duration, 0, b.N)
			var pod *corev1.Pod
			for b.Loop() {
				pod = template.DeepCopy()
				start := time.Now()
				if err := e.Client.Create(ctx, pod); err != nil {
					b.Fatalf("a guest of %s %s was refused: %v", bc.group, bc.machineType, err)
				}
				latencies = append(latencies, time.Since(start))
			}
			b.StopTimer()
			if _, injected := pod.Annotations[imperatorv1alpha1.InjectedAnnotation]; !injected || len(pod.Spec.Containers[1].Resources.Limits) != 3 {
				b.Fatalf("the guest was not injected: %+v", pod)
			}
			after, err := harness.ReadStages(ctx, e.Config, stages)
			if err != nil {
				b.Fatal(err)
			}
			for _, line := range harness.StageMeans(stages, before, after) {
				b.Logf("%s: mean per policy check (samples over %d creations)", line, len(latencies))
			}
			slices.Sort(latencies)
			n := len(latencies)
			b.ReportMetric(float64(latencies[n/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(latencies[n*99/100].Microseconds()), "p99-µs")
		})
	}
}
