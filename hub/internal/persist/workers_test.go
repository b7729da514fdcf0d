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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

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
	const clusters = 40
	ctx := context.Background()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, imperatorv1alpha1.AddToScheme, clusterv1.Install} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	names := make([]string, clusters)
	objs := make([]client.Object, clusters)
	for i := range names {
		names[i] = fmt.Sprintf("c%02d", i)
		objs[i] = &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: names[i], UID: types.UID("uid-" + names[i])}}
	}
	tracker := clienttesting.NewObjectTracker(scheme, serializer.NewCodecFactory(scheme).UniversalDecoder())
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjectTracker(tracker).WithObjects(objs...).
		WithStatusSubresource(&imperatorv1alpha1.ClusterInventory{}, &clusterv1.ManagedCluster{}).Build()

	start := time.Unix(10_000, 0)
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
	stop, cancel := context.WithCancel(ctx)
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
