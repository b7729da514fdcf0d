package podinjector_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/admissionpolicy"
	"github.com/imperator-federation/imperator/test/util/framework"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// BenchmarkPodCreateByPath measures, in one run, the latency of creating a
// guest pod and a plain pod on two API servers: one injecting guests with
// the agent's webhook, one with the MutatingAdmissionPolicy of
// deploy/spoke/policy/injection and no agent at all. Both enforce the
// ValidatingAdmissionPolicies of deploy/spoke/policy, as a cluster with
// deploy/spoke does. Each iteration creates the four pods in turn; every
// case reports its p50 and p99, and each path its guest p50 divided by its
// plain pod's p50 (the goal for the policy path is at most 1.1).
// Run with `go test -run '^$' -bench PodCreateByPath`.
func BenchmarkPodCreateByPath(b *testing.B) {
	ctx := context.Background()
	webhookEnv := startWithGeneralMachine(b)
	policyEnv := startPolicyEnvironment(b)
	servers := []struct {
		name   string
		client client.Client
	}{
		{"webhook", webhookEnv.Client},
		{"policy", policyEnv.Client},
	}
	for _, s := range servers {
		for name, labels := range map[string]map[string]string{
			"bench-injected": {imperatorv1alpha1.InjectResourceKey: imperatorv1alpha1.InjectResourceEnabled},
			"bench-plain":    nil,
		} {
			if err := s.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	installPoliciesForBenchmark(b, webhookEnv)
	installPoliciesForBenchmark(b, policyEnv)

	// One loop creates the four pods in turn, so that every case sees the
	// same load of this (shared) machine.
	type series struct {
		client    client.Client
		namespace string
		guest     bool
		latencies []time.Duration
	}
	cases := map[string]*series{}
	var order []string
	for _, s := range servers {
		for _, guest := range []bool{false, true} {
			namespace, kind := "bench-plain", "plain"
			if guest {
				namespace, kind = "bench-injected", "guest"
			}
			name := s.name + "/" + kind
			cases[name] = &series{client: s.client, namespace: namespace, guest: guest}
			order = append(order, name)
		}
	}
	templates := map[string]*corev1.Pod{}
	for name, c := range cases {
		template := wrappers.MakePod(c.namespace, "").Guest("general-machine", "compute-xlarge").Obj()
		template.GenerateName = "pod-"
		templates[name] = template
	}
	for b.Loop() {
		for _, name := range order {
			c := cases[name]
			pod := templates[name].DeepCopy()
			start := time.Now()
			if err := c.client.Create(ctx, pod); err != nil {
				b.Fatal(err)
			}
			c.latencies = append(c.latencies, time.Since(start))
			if _, injected := pod.Annotations[imperatorv1alpha1.InjectedAnnotation]; injected != c.guest {
				b.Fatalf("%s: pod injected = %v, want %v: the benchmark does not measure what it says", name, injected, c.guest)
			}
		}
	}
	b.StopTimer()
	p50 := map[string]time.Duration{}
	for _, name := range order {
		latencies := cases[name].latencies
		slices.Sort(latencies)
		n := len(latencies)
		p50[name] = latencies[n/2]
		b.ReportMetric(float64(latencies[n/2].Microseconds()), name+"-p50-µs")
		b.ReportMetric(float64(latencies[n*99/100].Microseconds()), name+"-p99-µs")
	}
	for _, s := range servers {
		b.ReportMetric(float64(p50[s.name+"/guest"])/float64(p50[s.name+"/plain"]), s.name+"-guest-p50-x-plain")
	}
}

// startPolicyEnvironment starts an API server without the agent whose
// guests are injected by deploy/spoke/policy/injection, with the sample
// general-machine and the unknown-group binding the agent would write, and
// waits until a guest is injected.
func startPolicyEnvironment(b *testing.B) *framework.Environment {
	b.Helper()
	ctx := context.Background()
	e, err := framework.Start(ctx, framework.Options{CRDs: framework.SpokeCRDs})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := e.Stop(); err != nil {
			b.Error(err)
		}
	})
	if err := e.Client.Create(ctx, wrappers.GeneralMachine().Obj()); err != nil {
		b.Fatal(err)
	}
	if err := installInjectionPolicies(ctx, e.Client); err != nil {
		b.Fatal(err)
	}
	if _, err := (&admissionpolicy.Reconciler{Client: e.Client, Enabled: true}).Reconcile(ctx, reconcile.Request{}); err != nil {
		b.Fatal(err)
	}
	if err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench-probe",
		Labels: map[string]string{imperatorv1alpha1.InjectResourceKey: imperatorv1alpha1.InjectResourceEnabled}}}); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		probe := wrappers.MakePod("bench-probe", "probe").Guest("general-machine", "compute-xlarge").Obj()
		err := e.Client.Create(ctx, probe, client.DryRunAll)
		if _, injected := probe.Annotations[imperatorv1alpha1.InjectedAnnotation]; err == nil && injected {
			return e
		}
		if time.Now().After(deadline) {
			b.Fatal(fmt.Errorf("the injection policies were not in force 30 s after their creation: %v", err))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
