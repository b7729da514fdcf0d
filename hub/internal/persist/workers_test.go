package persist

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/protobuf/types/known/timestamppb"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/store"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// Workers reconciles write different clusters at once (run with -race):
// each cluster gets its own inventory and Lease, and the flush on shutdown,
// started while reconciles run, neither interleaves with them (no write
// loses an optimistic lock to another of this replica) nor loses the last
// change of any cluster.
func TestClustersWrittenAtOnceAreEachPersistedAndTheShutdownFlushLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an API server")
	}
	const clusters = 40
	ctx, env, _, _ := startHubAPI(t)
	// Read and written directly, without a cache: what is checked is the
	// workers and the flush, not the cache's lag.
	c := env.Client
	names := make([]string, clusters)
	for i := range names {
		names[i] = fmt.Sprintf("c%02d", i)
		// Registration makes the ManagedCluster and the cluster's namespace.
		if err := c.Create(ctx, &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: names[i]}}); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: names[i]}}); err != nil {
			t.Fatal(err)
		}
	}

	start := time.Now()
	clk := clocktesting.NewFakePassiveClock(start)
	st := store.New(clk, 40*time.Second)
	st.SetReplica("hub-a")
	p := New(c, st, Options{Interval: 3 * time.Second, Clock: clk, Log: logr.Discard()})
	snapshot := func(gen uint64) *federationv1.Snapshot {
		return &federationv1.Snapshot{Generation: gen, ObservedAt: timestamppb.New(start), Machines: []*federationv1.Machine{gpuMachine(int32(gen))}}
	}
	for _, name := range names {
		st.Connect(name, &federationv1.Hello{ClusterName: name, Epoch: 1})
		st.ApplySnapshot(name, 1, snapshot(1))
	}

	// reconcileAll reconciles every cluster once, Workers at a time, each
	// cluster by one worker as the workqueue hands them out.
	reconcileAll := func() []error {
		var mu sync.Mutex
		var errs []error
		var wg sync.WaitGroup
		for w := range Workers {
			wg.Go(func() {
				for i := w; i < clusters; i += Workers {
					res, err := p.Reconcile(ctx, store.Request(names[i]))
					if err == nil && res.RequeueAfter == conflictRetry {
						err = fmt.Errorf("cluster %s: a write of this replica lost its optimistic lock to another", names[i])
					}
					if err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		return errs
	}
	if errs := reconcileAll(); len(errs) > 0 {
		t.Fatalf("first reconciles: %v", errs)
	}
	for _, name := range names {
		inv := &imperatorv1alpha1.ClusterInventory{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: name, Name: InventoryName(name)}, inv); err != nil {
			t.Fatalf("inventory of %s: %v", name, err)
		}
		if inv.Status.Generation != 1 || len(inv.Status.Machines) != 1 {
			t.Errorf("inventory of %s: generation %d with %d Machines, want 1 and 1", name, inv.Status.Generation, len(inv.Status.Machines))
		}
		lease := &coordinationv1.Lease{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: name, Name: LeaseName}, lease); err != nil {
			t.Fatalf("Lease of %s: %v", name, err)
		}
		if holder := ptr.Deref(lease.Spec.HolderIdentity, ""); holder != "hub-a" {
			t.Errorf("Lease of %s held by %q, want hub-a", name, holder)
		}
	}

	// A change of every cluster, then shutdown while the reconciles of
	// those changes run.
	clk.SetTime(start.Add(5 * time.Second))
	for _, name := range names {
		st.ApplySnapshot(name, 1, snapshot(2))
	}
	stop, cancel := context.WithCancel(context.Background())
	cancel()
	var flushErr error
	var flushed sync.WaitGroup
	flushed.Go(func() { flushErr = p.flushOnShutdown(stop) })
	errs := reconcileAll()
	flushed.Wait()
	if flushErr != nil || len(errs) > 0 {
		t.Fatalf("reconciles during the flush: %v; flush: %v", errs, flushErr)
	}
	for _, name := range names {
		inv := &imperatorv1alpha1.ClusterInventory{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: name, Name: InventoryName(name)}, inv); err != nil {
			t.Fatalf("inventory of %s: %v", name, err)
		}
		if inv.Status.Generation != 2 {
			t.Errorf("inventory of %s after the flush: generation %d, want 2 (the last change)", name, inv.Status.Generation)
		}
	}
}
