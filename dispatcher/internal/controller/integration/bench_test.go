package integration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/dispatcher/internal/controller"
	"github.com/imperator-federation/imperator/test/util/benchstat"
)

// BenchmarkDispatchLatency measures, per Workload, the time from Kueue's
// quota reservation (the status write that makes it pending the MultiKueue
// check) to status.nominatedClusterNames written by the dispatcher, seen by
// a watch; each iteration creates a burst of workloads one unit each, as
// fast as one client creates them, against two spokes with room for all.
// Reported: p50/p99/max in ms over every workload of every iteration.
// The smallest size is bench-smoke's.
func BenchmarkDispatchLatency(b *testing.B) {
	for _, n := range []int{20, 200} {
		b.Run(fmt.Sprintf("workloads=%d", n), func(b *testing.B) {
			e := startEnv(b, map[string]int32{"spoke-a": 5000, "spoke-b": 5000})
			ctx := context.Background()
			wc, err := client.NewWithWatch(e.cfg, client.Options{Scheme: e.c.Scheme()})
			must(b, err)
			var latencies []time.Duration
			b.ResetTimer()
			for i := range b.N {
				ns := fmt.Sprintf("burst-%d", i)
				b.StopTimer()
				createNamespace(ctx, b, e.c, ns)
				b.StartTimer()
				latencies = append(latencies, dispatchBurst(ctx, b, e.c, wc, ns, n)...)
			}
			b.StopTimer()
			slices.Sort(latencies)
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			b.ReportMetric(ms(benchstat.RoundedRank(latencies, 0.50)), "p50-ms")
			b.ReportMetric(ms(benchstat.RoundedRank(latencies, 0.99)), "p99-ms")
			b.ReportMetric(ms(latencies[len(latencies)-1]), "max-ms")
			b.ReportMetric(float64(n), "workloads/op")
		})
	}
}

// dispatchBurst creates n pending Workloads in namespace ns and returns,
// for each, the time from its quota reservation to its nomination.
func dispatchBurst(ctx context.Context, b *testing.B, c client.Client, wc client.WithWatch, ns string, n int) []time.Duration {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(controller.WorkloadGVK.GroupVersion().WithKind("WorkloadList"))
	w, err := wc.Watch(ctx, list, client.InNamespace(ns))
	must(b, err)
	defer w.Stop()

	var mu sync.Mutex
	reserved := map[string]time.Time{}
	nominatedAt := map[string]time.Time{}
	seen := make(chan struct{})
	go func() {
		defer close(seen)
		for ev := range w.ResultChan() {
			if ev.Type != watch.Modified && ev.Type != watch.Added {
				continue
			}
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			names, _, _ := unstructured.NestedStringSlice(u.Object, "status", "nominatedClusterNames")
			if len(names) == 0 {
				continue
			}
			now := time.Now()
			mu.Lock()
			if _, done := nominatedAt[u.GetName()]; !done {
				nominatedAt[u.GetName()] = now
			}
			all := len(nominatedAt) == n
			mu.Unlock()
			if all {
				return
			}
		}
	}()
	for i := range n {
		wl := workload(ns, fmt.Sprintf("job-%d", i), 1)
		must(b, c.Create(ctx, wl))
		must(b, reserveQuota(ctx, c, wl))
		mu.Lock()
		reserved[wl.GetName()] = time.Now()
		mu.Unlock()
	}
	select {
	case <-seen:
	case <-time.After(2 * time.Minute):
		mu.Lock()
		defer mu.Unlock()
		b.Fatalf("%d of %d Workloads nominated within 2 minutes", len(nominatedAt), n)
	}
	mu.Lock()
	defer mu.Unlock()
	out := make([]time.Duration, 0, n)
	for name, t0 := range reserved {
		t1, ok := nominatedAt[name]
		if !ok {
			b.Fatalf("Workload %s/%s was never nominated", ns, name)
		}
		// The watch may see the nomination before the status write that
		// caused it returned to us: that is no wait at all.
		out = append(out, max(t1.Sub(t0), 0))
	}
	return out
}
