package podinjector_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// BenchmarkPodCreate measures the latency of creating a guest pod through the
// API server with the injector in the path (an enabled namespace) and without
// it (a namespace without the label), side by side on one API server. Run with
// `go test -run '^$' -bench PodCreate`.
func BenchmarkPodCreate(b *testing.B) {
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
	}{
		{"with-webhook", "bench-injected", true},
		{"without-webhook", "bench-plain", false},
	} {
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
			// Unscheduled pods are deleted at once: keep etcd small between runs.
			if err := e.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(bc.namespace)); err != nil {
				b.Fatal(err)
			}
		})
	}
}
