package podinjector_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/podinjector"
	"github.com/imperator-federation/imperator/test/util/framework"
	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// BenchmarkPodCreate measures the latency of creating a guest pod through the
// API server with the injector in the path (an enabled namespace) and without
// it (a namespace without the label), side by side on one API server; then
// the same with the admission policies of deploy/spoke/policy in force,
// which every pod creation of the cluster pays (the guest-one-unit policy
// once per Machine, for guests only). Run with
// `go test -run '^$' -bench PodCreate`; with IMPERATOR_BENCH_PROFILE_DIR set,
// each case then creates pods for another profileWindow while the API
// server and the webhook server are profiled.
func BenchmarkPodCreate(b *testing.B) {
	e := startWithGeneralMachine(b)
	ctx := context.Background()
	for name, labels := range map[string]map[string]string{
		"bench-injected": {imperatorv1alpha1.InjectResourceKey: imperatorv1alpha1.InjectResourceEnabled},
		"bench-plain":    nil,
	} {
		if err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}); err != nil {
			b.Fatal(err)
		}
	}

	for _, bc := range []struct {
		name, namespace string
		injected        bool
		// policies installs deploy/spoke/policy before the case (and
		// every case after it runs with them).
		policies bool
	}{
		{name: "with-webhook", namespace: "bench-injected", injected: true},
		{name: "without-webhook", namespace: "bench-plain"},
		{name: "with-webhook-and-policies", namespace: "bench-injected", injected: true, policies: true},
		{name: "without-webhook-with-policies", namespace: "bench-plain"},
	} {
		if bc.policies {
			installPoliciesForBenchmark(b, e)
		}
		b.Run(bc.name, func(b *testing.B) {
			template := wrappers.MakePod(bc.namespace, "").Guest("general-machine", "compute-xlarge").Obj()
			template.GenerateName = "guest-"
			latencies := make([]time.Duration, 0, b.N)
			var pod *corev1.Pod
			b.ReportAllocs()
			for b.Loop() {
				pod = template.DeepCopy()
				start := time.Now()
				if err := e.Client.Create(ctx, pod); err != nil {
					b.Fatal(err)
				}
				latencies = append(latencies, time.Since(start))
			}
			b.StopTimer()
			if _, injected := pod.Annotations[imperatorv1alpha1.InjectedAnnotation]; injected != bc.injected {
				b.Fatalf("pod injected = %v, want %v: the benchmark does not measure what it says", injected, bc.injected)
			}
			slices.Sort(latencies)
			if n := len(latencies); n > 0 {
				b.ReportMetric(float64(latencies[n/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(latencies[n*99/100].Microseconds()), "p99-µs")
			}
			if dir := os.Getenv(harness.ProfileDirEnv); dir != "" {
				profilePodCreate(b, e, dir, "podcreate-"+bc.name, template)
			}
			// Unscheduled pods are deleted at once: keep etcd small between runs.
			if err := e.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(bc.namespace)); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// profilePodCreate creates pods from template for profileWindow while the
// API server and this process (the webhook server) are profiled
// (harness.ProfileWindow), and logs where a creation's time goes: the mean
// of each stage the API server and the webhook server measure, over the
// window.
func profilePodCreate(b *testing.B, e *framework.Environment, dir, name string, template *corev1.Pod) {
	b.Helper()
	ctx := context.Background()
	before, err := harness.ReadStages(ctx, e.Config, creationStages)
	if err != nil {
		b.Fatal(err)
	}
	created := 0
	var elapsed time.Duration
	err = harness.ProfileWindow(ctx, e.Config, dir, name, profileWindow, func(ctx context.Context) error {
		for ctx.Err() == nil {
			start := time.Now()
			if err := e.Client.Create(ctx, template.DeepCopy()); err != nil {
				return ctxErrOrNil(ctx, err)
			}
			elapsed += time.Since(start)
			created++
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	after, err := harness.ReadStages(ctx, e.Config, creationStages)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("profiled %d pod creations over %s into %s/%s.*.pprof; mean per creation:", created, profileWindow, dir, name)
	b.Logf("  %-72s %8.0f µs", "client: Create round trip", float64(elapsed.Microseconds())/float64(max(created, 1)))
	for _, line := range harness.StageMeans(creationStages, before, after) {
		b.Logf("  %s", line)
	}
}

// creationStages are the histograms that time the stages of a pod
// creation, in the API server and in the webhook server.
var creationStages = []harness.Stage{
	{Label: "apiserver: POST pods (apiserver_request_duration_seconds)", Family: "apiserver_request_duration_seconds",
		Match: map[string]string{"verb": "POST", "resource": "pods"}},
	{Label: "apiserver: mutating admission (apiserver_admission_step_admission_duration_seconds)", Family: "apiserver_admission_step_admission_duration_seconds",
		Match: map[string]string{"type": "admit", "operation": "CREATE"}},
	{Label: "apiserver: validating admission (same, type=validate)", Family: "apiserver_admission_step_admission_duration_seconds",
		Match: map[string]string{"type": "validate", "operation": "CREATE"}},
	{Label: "apiserver: injector webhook call (apiserver_admission_webhook_admission_duration_seconds)", Family: "apiserver_admission_webhook_admission_duration_seconds",
		Match: map[string]string{"name": podinjector.WebhookName}},
	{Label: "apiserver: etcd create (etcd_request_duration_seconds)", Family: "etcd_request_duration_seconds",
		Match: map[string]string{"operation": "create"}},
	{Label: "webhook server: request (controller_runtime_webhook_latency_seconds)", Family: "controller_runtime_webhook_latency_seconds",
		Match: map[string]string{"webhook": podinjector.WebhookPath}, InProcess: true},
}

// ctxErrOrNil is nil when err is the end of ctx's window, else err.
func ctxErrOrNil(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// installPoliciesForBenchmark creates every policy of deploy/spoke/policy
// and its binding, and waits until the API server enforces them: until a
// pod tolerating a pool taint outside any opted-in namespace is refused.
func installPoliciesForBenchmark(b *testing.B, e *framework.Environment) {
	b.Helper()
	ctx := context.Background()
	for _, file := range []string{"pool-guests-only.yaml", "guest-one-unit.yaml", "pool-nodes-by-scheduler.yaml"} {
		policy, binding, err := loadPolicy(file)
		if err != nil {
			b.Fatal(err)
		}
		if err := e.Client.Create(ctx, policy); err != nil {
			b.Fatal(err)
		}
		if err := e.Client.Create(ctx, binding); err != nil {
			b.Fatal(err)
		}
	}
	probe := wrappers.MakePod("bench-plain", "probe").Toleration(imperatorv1alpha1.NodePoolKey, "ready").Obj()
	deadline := time.Now().Add(30 * time.Second)
	for e.Client.Create(ctx, probe.DeepCopy(), client.DryRunAll) == nil {
		if time.Now().After(deadline) {
			b.Fatal("the admission policies were not in force 30 s after their creation")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// profileWindow is how long a profiled phase of a benchmark runs.
const profileWindow = 10 * time.Second

// BenchmarkHandleFromCache measures the injector's handler as the agent runs
// it: one CREATE admission of a guest pod (a named container, a request of
// its own, two required node selector terms) with the Machine read from the
// manager's informer cache of a real API server. BenchmarkHandle in the
// package measures the same with the fake client, whose List costs a JSON
// round trip of every Machine the cache does not pay.
func BenchmarkHandleFromCache(b *testing.B) {
	e := startWithGeneralMachine(b)
	ctx := context.Background()
	zone := func(value string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{value}},
		}}
	}
	pod := wrappers.MakePod("team-a", "guest").Guest("general-machine", "compute-xlarge").
		Label(imperatorv1alpha1.InjectingContainerKey, "main").Request(0, corev1.ResourceEphemeralStorage, "10Gi").
		RequiredNodeAffinity(zone("a"), zone("b")).Obj()
	raw, err := json.Marshal(pod)
	if err != nil {
		b.Fatal(err)
	}
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "bench", Operation: admissionv1.Create, Namespace: "team-a", Object: runtime.RawExtension{Raw: raw},
	}}
	h := podinjector.NewHandler(e.Manager.Cache, e.Scheme)

	b.ReportAllocs()
	for b.Loop() {
		if resp := h.Handle(ctx, req); !resp.Allowed || len(resp.Patches) == 0 {
			b.Fatalf("guest pod not injected: %+v", resp.Result)
		}
	}
}

// startWithGeneralMachine starts the injector's environment until the
// benchmark ends, with the sample general-machine created and in the
// webhook's cache.
func startWithGeneralMachine(b *testing.B) *framework.Environment {
	b.Helper()
	e, err := startEnvironment()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := e.Stop(); err != nil {
			b.Error(err)
		}
	})
	ctx := context.Background()
	if err := e.Client.Create(ctx, wrappers.GeneralMachine().Obj()); err != nil {
		b.Fatal(err)
	}
	if err := e.WaitForCache(ctx, 10*time.Second, func(ctx context.Context, cache client.Reader) (bool, error) {
		return cache.Get(ctx, client.ObjectKey{Name: "general-machine"}, &imperatorv1alpha1.Machine{}) == nil, nil
	}); err != nil {
		b.Fatalf("the webhook's cache never saw the Machine: %v", err)
	}
	return e
}
