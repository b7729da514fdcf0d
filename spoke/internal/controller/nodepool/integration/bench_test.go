package nodepool_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/framework"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// benchNodes is the size of the pool of BenchmarkConfigurePool.
const benchNodes = 100

// BenchmarkConfigurePool measures, against a real API server, the time from
// creating a Machine listing benchNodes existing nodes until every one of
// them carries its node-pool label, and the time from deleting it (and its
// MachineNodePool, as the garbage collector would) until every label is gone.
// Run with `go test -run '^$' -bench ConfigurePool -benchtime 5x`.
func BenchmarkConfigurePool(b *testing.B) {
	ctx := context.Background()
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
	for i := range benchNodes {
		name := fmt.Sprintf("bench-%03d", i)
		node := wrappers.MakeNode(name).Obj()
		if err := e.Client.Create(ctx, node); err != nil {
			b.Fatal(err)
		}
		patch := client.MergeFrom(node.DeepCopy())
		node.Spec.Taints = nil
		if err := e.Client.Patch(ctx, node, patch); err != nil {
			b.Fatal(err)
		}
		machine.Node(name, medium).Tainted()
	}

	// labelled counts the nodes carrying the node-pool label.
	labelled := func(ctx context.Context) (int, error) {
		nodes := &metav1.PartialObjectMetadataList{}
		nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
		if err := e.Client.List(ctx, nodes, client.HasLabels{imperatorv1alpha1.NodePoolKey}); err != nil {
			return 0, err
		}
		return len(nodes.Items), nil
	}
	waitFor := func(want int) {
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			n, err := labelled(ctx)
			return n == want, err
		})
		if err != nil {
			b.Fatalf("waiting for %d labelled nodes: %v", want, err)
		}
	}

	// poolReady waits for the MachineNodePool of the Machine to exist and,
	// with finalized, to carry its finalizer: the phases before the first
	// node write.
	poolReady := func(finalized bool) {
		pool := &imperatorv1alpha1.MachineNodePool{}
		key := client.ObjectKey{Name: imperatorv1alpha1.NodePoolName("bench")}
		err := wait.PollUntilContextTimeout(ctx, 2*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			if err := e.Client.Get(ctx, key, pool); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			return !finalized || slices.Contains(pool.Finalizers, imperatorv1alpha1.NodePoolFinalizer), nil
		})
		if err != nil {
			b.Fatalf("waiting for the MachineNodePool (finalizer %v): %v", finalized, err)
		}
	}

	var configure, release, created, finalized time.Duration
	for b.Loop() {
		start := time.Now()
		if err := e.Client.Create(ctx, machine.Obj()); err != nil {
			b.Fatal(err)
		}
		poolReady(false)
		created += time.Since(start)
		poolReady(true)
		finalized += time.Since(start)
		waitFor(benchNodes)
		configure += time.Since(start)

		start = time.Now()
		if err := e.Client.Delete(ctx, machine.Obj()); err != nil {
			b.Fatal(err)
		}
		pool := &imperatorv1alpha1.MachineNodePool{ObjectMeta: metav1.ObjectMeta{Name: imperatorv1alpha1.NodePoolName("bench")}}
		if err := e.Client.Delete(ctx, pool); err != nil {
			b.Fatal(err)
		}
		waitFor(0)
		release += time.Since(start)
		// The pool is gone once its finalizer ran; wait for it so that the
		// next round starts from scratch.
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			err := e.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool)
			return client.IgnoreNotFound(err) == nil && err != nil, client.IgnoreNotFound(err)
		})
		if err != nil {
			b.Fatalf("waiting for the MachineNodePool to go: %v", err)
		}
	}
	b.ReportMetric(float64(created.Milliseconds())/float64(b.N), "ms-pool-created/op")
	b.ReportMetric(float64(finalized.Milliseconds())/float64(b.N), "ms-pool-finalized/op")
	b.ReportMetric(float64(configure.Milliseconds())/float64(b.N), "ms-configure/op")
	b.ReportMetric(float64(release.Milliseconds())/float64(b.N), "ms-release/op")
}
