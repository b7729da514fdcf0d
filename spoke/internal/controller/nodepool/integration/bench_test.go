package nodepool_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/framework"
	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// defaultBenchNodes is the size of the pool of BenchmarkConfigurePool
// unless IMPERATOR_BENCH_POOL_NODES says otherwise.
const defaultBenchNodes = 100

// benchSelectorLabel labels the bench nodes; a selector pool selects them by it.
const benchSelectorLabel = "example.com/bench-pool"

// BenchmarkConfigurePool measures, against a real API server, the time from
// creating a Machine listing benchNodes existing nodes until every one of
// them carries its node-pool label, and the time from deleting it (and its
// MachineNodePool, as the garbage collector would) until every label is gone.
// Run with `go test -run '^$' -bench ConfigurePool -benchtime 5x`; with
// IMPERATOR_BENCH_PROFILE_DIR set, rounds then repeat for another
// profileWindow while the API server and the agent are profiled.
// IMPERATOR_BENCH_POOL_NODES sets the pool's size, and
// IMPERATOR_BENCH_POOL_SELECTOR=1 makes the Machine take its nodes by one
// nodeSelector entry instead of naming each.
func BenchmarkConfigurePool(b *testing.B) {
	ctx := context.Background()
	benchNodes := defaultBenchNodes
	if v := os.Getenv("IMPERATOR_BENCH_POOL_NODES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("IMPERATOR_BENCH_POOL_NODES=%q: want a positive number", v)
		}
		benchNodes = n
	}
	bySelector := os.Getenv("IMPERATOR_BENCH_POOL_SELECTOR") == "1"
	e, err := framework.Start(ctx, environment("nodepool-bench", false))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := e.Stop(); err != nil {
			b.Error(err)
		}
	})
	machine := wrappers.MakeMachine("bench", "bench").Type(medium, "6", "48Gi", 1)
	if bySelector {
		machine.Select(map[string]string{benchSelectorLabel: "bench"}, medium).Tainted()
	}
	for i := range benchNodes {
		name := fmt.Sprintf("bench-%03d", i)
		node := wrappers.MakeNode(name).Label(benchSelectorLabel, "bench").Obj()
		if err := e.Client.Create(ctx, node); err != nil {
			b.Fatal(err)
		}
		patch := client.MergeFrom(node.DeepCopy())
		node.Spec.Taints = nil
		if err := e.Client.Patch(ctx, node, patch); err != nil {
			b.Fatal(err)
		}
		if !bySelector {
			machine.Node(name, medium).Tainted()
		}
	}

	// waitFor watches the nodes until want of them carry the node-pool
	// label. A watch, not a List every few milliseconds: 100 nodes listed
	// 100 times a second load the API server the pool's writes go to.
	watcher, err := client.NewWithWatch(e.Config, client.Options{Scheme: e.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	// It returns when it saw the first node change towards want (now, when
	// the List shows want already).
	waitFor := func(want int) (first time.Time) {
		nodes := &metav1.PartialObjectMetadataList{}
		nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
		if err := watcher.List(ctx, nodes); err != nil {
			b.Fatal(err)
		}
		labelled := map[string]bool{}
		for _, node := range nodes.Items {
			if _, ok := node.Labels[imperatorv1alpha1.NodePoolKey]; ok {
				labelled[node.Name] = true
			}
		}
		if len(labelled) == want {
			return time.Now()
		}
		w, err := watcher.Watch(ctx, nodes, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: nodes.ResourceVersion}})
		if err != nil {
			b.Fatal(err)
		}
		defer w.Stop()
		timeout := time.After(time.Minute)
		for len(labelled) != want {
			select {
			case <-timeout:
				b.Fatalf("waiting for %d labelled nodes: %d after a minute", want, len(labelled))
			case ev, ok := <-w.ResultChan():
				if !ok {
					b.Fatalf("waiting for %d labelled nodes: the watch ended", want)
				}
				node, ok := ev.Object.(client.Object)
				if !ok || ev.Type == watch.Error {
					b.Fatalf("waiting for %d labelled nodes: watch event %s %T", want, ev.Type, ev.Object)
				}
				_, has := node.GetLabels()[imperatorv1alpha1.NodePoolKey]
				if has && ev.Type != watch.Deleted {
					labelled[node.GetName()] = true
				} else {
					delete(labelled, node.GetName())
				}
				if first.IsZero() {
					first = time.Now()
				}
			}
		}
		return first
	}

	// waitPool watches the MachineNodePool name until done (given nil
	// while there is none) holds: polling Get every few milliseconds would
	// load the API server the pool's writes go to.
	waitPool := func(name, what string, done func(pool *imperatorv1alpha1.MachineNodePool) bool) {
		pools := &imperatorv1alpha1.MachineNodePoolList{}
		byName := "metadata.name=" + name
		if err := watcher.List(ctx, pools, &client.ListOptions{Raw: &metav1.ListOptions{FieldSelector: byName}}); err != nil {
			b.Fatal(err)
		}
		var pool *imperatorv1alpha1.MachineNodePool
		if len(pools.Items) > 0 {
			pool = &pools.Items[0]
		}
		if done(pool) {
			return
		}
		w, err := watcher.Watch(ctx, pools, &client.ListOptions{Raw: &metav1.ListOptions{FieldSelector: byName, ResourceVersion: pools.ResourceVersion}})
		if err != nil {
			b.Fatal(err)
		}
		defer w.Stop()
		timeout := time.After(time.Minute)
		for !done(pool) {
			select {
			case <-timeout:
				b.Fatalf("waiting for MachineNodePool %s %s: not within a minute", name, what)
			case ev, ok := <-w.ResultChan():
				if !ok {
					b.Fatalf("waiting for MachineNodePool %s %s: the watch ended", name, what)
				}
				switch ev.Type {
				case watch.Deleted:
					pool = nil
				case watch.Added, watch.Modified:
					if pool, ok = ev.Object.(*imperatorv1alpha1.MachineNodePool); !ok {
						b.Fatalf("waiting for MachineNodePool %s %s: watch event %s %T", name, what, ev.Type, ev.Object)
					}
				case watch.Error:
					b.Fatalf("waiting for MachineNodePool %s %s: watch error %v", name, what, ev.Object)
				}
			}
		}
	}
	exists := func(pool *imperatorv1alpha1.MachineNodePool) bool { return pool != nil }
	finalizedPool := func(pool *imperatorv1alpha1.MachineNodePool) bool {
		return pool != nil && slices.Contains(pool.Finalizers, imperatorv1alpha1.NodePoolFinalizer)
	}
	gone := func(pool *imperatorv1alpha1.MachineNodePool) bool { return pool == nil }

	var configure, release, created, finalized, firstNode time.Duration
	runRound := func(round int) {
		// A new name every round: the controllers' per-name state (requeue
		// backoff of the Machine deleted a moment ago) is not measured.
		m := machine.Obj()
		m.Name = fmt.Sprintf("bench-%d", round)
		start := time.Now()
		if err := e.Client.Create(ctx, m); err != nil {
			b.Fatal(err)
		}
		poolName := imperatorv1alpha1.NodePoolName(m.Name)
		waitPool(poolName, "to exist", exists)
		created += time.Since(start)
		waitPool(poolName, "to carry its finalizer", finalizedPool)
		finalized += time.Since(start)
		firstLabelled := waitFor(benchNodes)
		configure += time.Since(start)
		firstNode += firstLabelled.Sub(start)

		start = time.Now()
		if err := e.Client.Delete(ctx, m); err != nil {
			b.Fatal(err)
		}
		pool := &imperatorv1alpha1.MachineNodePool{ObjectMeta: metav1.ObjectMeta{Name: imperatorv1alpha1.NodePoolName(m.Name)}}
		if err := e.Client.Delete(ctx, pool); err != nil {
			b.Fatal(err)
		}
		waitFor(0)
		release += time.Since(start)
		// The pool is gone once its finalizer ran; wait for it so that the
		// next round starts from scratch.
		waitPool(poolName, "to go", gone)
	}
	// One round before timing: the first use of the Machine and
	// MachineNodePool kinds costs this process's clients a discovery of
	// their API group and the API server the start of its watch cache for
	// them, which no later pool pays.
	runRound(0)
	created, finalized, firstNode, configure, release = 0, 0, 0, 0, 0
	round := 1
	for ; b.Loop(); round++ {
		runRound(round)
	}
	b.ReportMetric(float64(created.Milliseconds())/float64(b.N), "ms-pool-created/op")
	b.ReportMetric(float64(finalized.Milliseconds())/float64(b.N), "ms-pool-finalized/op")
	b.ReportMetric(float64(firstNode.Milliseconds())/float64(b.N), "ms-first-node/op")
	b.ReportMetric(float64(configure.Milliseconds())/float64(b.N), "ms-configure/op")
	b.ReportMetric(float64(release.Milliseconds())/float64(b.N), "ms-release/op")

	if dir := os.Getenv(harness.ProfileDirEnv); dir != "" {
		before, err := harness.ReadStages(ctx, e.Config, poolStages)
		if err != nil {
			b.Fatal(err)
		}
		rounds := 0
		created, finalized, firstNode, configure, release = 0, 0, 0, 0, 0
		err = harness.ProfileWindow(ctx, e.Config, dir, "configurepool", profileWindow, func(ctx context.Context) error {
			for ; ctx.Err() == nil; rounds++ {
				runRound(round + rounds)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		after, err := harness.ReadStages(ctx, e.Config, poolStages)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("profiled %d rounds (configure and release) over %s into %s/configurepool.*.pprof; per round %d ms pool created, %d ms first node labelled, %d ms configured, %d ms released; means:",
			rounds, profileWindow, dir, created.Milliseconds()/int64(max(rounds, 1)), firstNode.Milliseconds()/int64(max(rounds, 1)),
			configure.Milliseconds()/int64(max(rounds, 1)), release.Milliseconds()/int64(max(rounds, 1)))
		for _, line := range harness.StageMeans(poolStages, before, after) {
			b.Logf("  %s", line)
		}
	}
}

// poolStages are the histograms that time the stages of configuring a
// pool, in the API server and in the agent's controllers.
var poolStages = []harness.Stage{
	{Label: "apiserver: PATCH nodes (apiserver_request_duration_seconds)", Family: "apiserver_request_duration_seconds",
		Match: map[string]string{"verb": "PATCH", "resource": "nodes"}},
	{Label: "apiserver: etcd update (etcd_request_duration_seconds)", Family: "etcd_request_duration_seconds",
		Match: map[string]string{"operation": "update"}},
	{Label: "apiserver: POST machinenodepools", Family: "apiserver_request_duration_seconds",
		Match: map[string]string{"verb": "POST", "resource": "machinenodepools"}},
	{Label: "apiserver: POST machines", Family: "apiserver_request_duration_seconds",
		Match: map[string]string{"verb": "POST", "resource": "machines"}},
	{Label: "agent: pool-sync queue wait (workqueue_queue_duration_seconds)", Family: "workqueue_queue_duration_seconds",
		Match: map[string]string{"name": "machinenodepool_sync"}, InProcess: true},
	{Label: "agent: pool-sync reconcile (controller_runtime_reconcile_time_seconds)", Family: "controller_runtime_reconcile_time_seconds",
		Match: map[string]string{"controller": "machinenodepool_sync"}, InProcess: true},
	{Label: "agent: node-pool queue wait (workqueue_queue_duration_seconds)", Family: "workqueue_queue_duration_seconds",
		Match: map[string]string{"name": "nodepool"}, InProcess: true},
	{Label: "agent: node-pool reconcile (controller_runtime_reconcile_time_seconds)", Family: "controller_runtime_reconcile_time_seconds",
		Match: map[string]string{"controller": "nodepool"}, InProcess: true},
}

// profileWindow is how long the profiled phase of a benchmark runs.
const profileWindow = 10 * time.Second
