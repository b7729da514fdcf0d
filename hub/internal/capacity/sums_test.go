package capacity

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/imperator-federation/imperator/hub/internal/store"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// One cluster reporting the largest counts the wire allows cannot turn the
// fleet's totals negative: sums saturate at MaxInt32.
func TestFleetTotalsSaturate(t *testing.T) {
	const most = math.MaxInt32
	clusters := []*store.Cluster{
		makeCluster("a").Machine("gpu", "g", makeType("xlarge").Usage(most, 0, 0).Obj()).Obj(),
		makeCluster("b").Machine("gpu", "g", makeType("xlarge").Usage(4, 1, 0).Obj()).
			Machine("gpu-2", "g", makeType("xlarge").Usage(most, most, most).Reserved(most).Queued(most).Obj()).Obj(),
	}
	got := Usage(clusters, nil)
	wantFleet := []*queryv1.TypeUsage{{Group: "g", Type: "xlarge", Maximum: most, Reserved: most, Used: most, Waiting: most, Queued: most, Free: most}}
	if diff := cmp.Diff(wantFleet, got.Fleet, protoTransform()); diff != "" {
		t.Errorf("fleet (-want +got):\n%s", diff)
	}
	// Within cluster b the two Machines of the type sum past MaxInt32 too.
	wantB := []*queryv1.TypeUsage{{Group: "g", Type: "xlarge", Maximum: most, Reserved: most, Used: most, Waiting: most, Queued: most, Free: 3}}
	if diff := cmp.Diff(wantB, got.Clusters[1].Types, protoTransform()); diff != "" {
		t.Errorf("cluster b (-want +got):\n%s", diff)
	}
	resp := Find(clusters, Request{Type: "xlarge", Count: 1, Spread: true}, now)
	for _, c := range resp.Candidates {
		if c.Free < 0 {
			t.Errorf("candidate %s has %d free units", c.Cluster, c.Free)
		}
	}
}

// maximum − used − waiting of large counts leaves int32: a type with every
// unit used has none free, never a wrapped positive number.
func TestFreeDoesNotWrap(t *testing.T) {
	typ := makeType("x").Usage(0, math.MaxInt32, math.MaxInt32).Reserved(math.MaxInt32).Obj()
	if got := Free(typ); got != 0 {
		t.Errorf("Free = %d, want 0", got)
	}
}

// Watch streams and GetUsage share one computation per cluster value.
func TestUsageCacheComputesOncePerClusterValue(t *testing.T) {
	var cache UsageCache
	first := makeCluster("a").Machine("gpu", "g", makeType("xlarge").Usage(4, 1, 0).Obj()).Obj()
	var wg sync.WaitGroup
	results := make([]*queryv1.ClusterUsage, 8)
	for i := range results {
		wg.Go(func() { results[i] = cache.Of(first) })
	}
	wg.Wait()
	for i, r := range results {
		if r != results[0] {
			t.Fatalf("caller %d got its own computation of the same cluster value", i)
		}
	}
	next := makeCluster("a").Machine("gpu", "g", makeType("xlarge").Usage(4, 2, 0).Obj()).Obj()
	got := cache.Of(next)
	if got == results[0] || got.Types[0].Used != 2 {
		t.Errorf("a changed cluster got the old usage: %v", got)
	}
}

// typesCluster is one cluster with n machine types over Machines of 50
// types each (the Machine CRD allows 64), in groups of 10 Machines.
func typesCluster(n int) *store.Cluster {
	w := makeCluster("big")
	for m := 0; m*50 < n; m++ {
		types := make([]*federationv1.MachineType, 0, 50)
		for i := m * 50; i < min(n, (m+1)*50); i++ {
			types = append(types, makeType(fmt.Sprintf("type-%05d", i)).Usage(8, int32(i%8), 0).Obj())
		}
		w.Machines = append(w.Machines, &federationv1.Machine{Name: fmt.Sprintf("m-%04d", m), Group: fmt.Sprintf("g-%d", m/10), Types: types})
	}
	return w.Obj()
}

// Aggregating a cluster with 50,000 machine types (the per-cluster cap)
// must stay under 50 ms; cpu-ns/op is the process's CPU time per call, which
// a loaded machine does not inflate as it does ns/op:
//
//	go test -run '^$' -bench 'BenchmarkClusterUsageOf|BenchmarkFleetUsage' ./hub/internal/capacity/
func BenchmarkClusterUsageOf(b *testing.B) {
	c := typesCluster(50_000)
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		ClusterUsageOf(c)
	}
	b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkFleetUsage is GetUsage over 10 clusters of 5,000 types each:
// 50,000 types in the fleet.
func BenchmarkFleetUsage(b *testing.B) {
	var clusters []*store.Cluster
	for i := range 10 {
		c := typesCluster(5_000)
		c.Name = fmt.Sprintf("cluster-%d", i)
		clusters = append(clusters, c)
	}
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		Usage(clusters, nil)
	}
	b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// cpuTime is the CPU time the process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A cluster whose last inventory the hub refused (or could not persist)
// offers no capacity and counts in no fleet total: its figures are older
// than the cluster's.
func TestOutdatedClusterIsStale(t *testing.T) {
	w := makeCluster("a").Machine("gpu", "g", makeType("xlarge").Usage(4, 0, 0).Obj())
	w.Outdated = "the hub refused the spoke's Snapshot: snapshot.machines: Too many"
	c := w.Obj()
	resp := Find([]*store.Cluster{c}, Request{Type: "xlarge", Count: 1}, now)
	if len(resp.Candidates) != 0 || len(resp.Excluded) != 1 || resp.Excluded[0].Reason != queryv1.ExclusionReason_EXCLUSION_REASON_STALE ||
		!strings.Contains(resp.Excluded[0].Message, w.Outdated) {
		t.Errorf("FindCapacity = %v, want cluster a excluded as stale saying why", resp)
	}
	usage := Usage([]*store.Cluster{c}, nil)
	if len(usage.Fleet) != 0 || usage.Clusters[0].State != queryv1.ClusterState_CLUSTER_STATE_STALE {
		t.Errorf("GetUsage = %v, want cluster a STALE and out of the fleet totals", usage)
	}
}

// The fleet is merged from every cluster's sorted list; a usageOf that
// hands out an unsorted list (not ClusterUsageOf's) still sums right.
func TestFleetMergesClusterLists(t *testing.T) {
	clusters := []*store.Cluster{
		makeCluster("a").Machine("m1", "g2", makeType("x").Usage(1, 0, 0).Obj()).Machine("m2", "g1", makeType("y").Usage(2, 0, 0).Obj()).Obj(),
		makeCluster("b").Machine("m1", "g1", makeType("y").Usage(4, 1, 2).Queued(1).Obj(), makeType("z").Usage(8, 0, 0).Obj()).Obj(),
		makeCluster("c").Machine("m1", "g2", makeType("x").Usage(16, 0, 0).Obj()).Obj(),
	}
	want := []*queryv1.TypeUsage{
		{Group: "g1", Type: "y", Maximum: 6, Reserved: 3, Used: 1, Waiting: 2, Queued: 1, Free: 3},
		{Group: "g1", Type: "z", Maximum: 8, Reserved: 8, Free: 8},
		{Group: "g2", Type: "x", Maximum: 17, Reserved: 17, Free: 17},
	}
	reversed := func(c *store.Cluster) *queryv1.ClusterUsage {
		u := ClusterUsageOf(c)
		slices.Reverse(u.Types)
		return u
	}
	for name, usageOf := range map[string]func(*store.Cluster) *queryv1.ClusterUsage{"sorted": nil, "unsorted": reversed} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(want, Usage(clusters, usageOf).Fleet, protoTransform()); diff != "" {
				t.Errorf("fleet (-want +got):\n%s", diff)
			}
		})
	}
}
