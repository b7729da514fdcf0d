package persist

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/protobuf/types/known/timestamppb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/store"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// A cluster whose spoke only heartbeats costs no inventory write: the
// heartbeat time rides along with the next real change.
func TestSyncWritesTheInventoryOnlyWhenItChanges(t *testing.T) {
	ctx := context.Background()
	c, inventoryWrites := countingInventoryWrites(t)

	start := time.Unix(10_000, 0)
	clk := clocktesting.NewFakePassiveClock(start)
	st := store.New(clk, 40*time.Second)
	st.SetReplica("hub-a")
	p := New(c, st, Options{Log: logr.Discard()})
	machine := &federationv1.Machine{Name: "m", Group: "g", Types: []*federationv1.MachineType{{Name: "t", Cpu: "4", Memory: "16Gi", Available: 2}}}

	st.Connect("a", &federationv1.Hello{ClusterName: "a", Epoch: 1})
	st.ApplySnapshot("a", 1, &federationv1.Snapshot{Generation: 1, ObservedAt: timestamppb.New(start), Machines: []*federationv1.Machine{machine}})
	if err := p.sync(ctx, "a"); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	if *inventoryWrites != 1 {
		t.Fatalf("first sync wrote the inventory %d times, want 1", *inventoryWrites)
	}

	clk.SetTime(start.Add(10 * time.Second))
	st.Heartbeat("a", 1, &federationv1.Heartbeat{Generation: 1})
	if err := p.sync(ctx, "a"); err != nil {
		t.Fatalf("sync after a heartbeat: %v", err)
	}
	if *inventoryWrites != 1 {
		t.Errorf("a heartbeat alone wrote the inventory: %d writes, want 1", *inventoryWrites)
	}

	st.ApplyDelta("a", 1, &federationv1.Delta{Generation: 2, Upserts: []*federationv1.Machine{{Name: "m", Group: "g", Types: []*federationv1.MachineType{{Name: "t", Cpu: "4", Memory: "16Gi", Available: 3}}}}})
	if err := p.sync(ctx, "a"); err != nil {
		t.Fatalf("sync after a delta: %v", err)
	}
	if *inventoryWrites != 2 {
		t.Errorf("a delta made %d writes in all, want 2", *inventoryWrites)
	}
	inv := &imperatorv1alpha1.ClusterInventory{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "a", Name: InventoryName("a")}, inv); err != nil {
		t.Fatal(err)
	}
	if inv.Status.Generation != 2 || inv.Status.LastHeartbeatTime == nil || !inv.Status.LastHeartbeatTime.Time.Equal(start.Add(10*time.Second)) {
		t.Errorf("inventory generation=%d lastHeartbeat=%v, want 2 and the heartbeat that rode along (%v)", inv.Status.Generation, inv.Status.LastHeartbeatTime, start.Add(10*time.Second))
	}
}

// Changes within an interval of the last write make one write when the
// interval is over (the reconcile asks to come back then), and a cluster
// streaming here comes back for its Lease every RenewInterval.
func TestReconcileCoalescesChangesWithinTheInterval(t *testing.T) {
	ctx := context.Background()
	c, inventoryWrites := countingInventoryWrites(t)
	start := time.Unix(10_000, 0)
	clk := clocktesting.NewFakePassiveClock(start)
	st := store.New(clk, 40*time.Second)
	st.SetReplica("hub-a")
	p := New(c, st, Options{Interval: 3 * time.Second, Clock: clk, Log: logr.Discard()})
	machine := func(available int32) *federationv1.Machine {
		return &federationv1.Machine{Name: "m", Group: "g", Types: []*federationv1.MachineType{{Name: "t", Cpu: "4", Memory: "16Gi", Available: available}}}
	}
	st.Connect("a", &federationv1.Hello{ClusterName: "a", Epoch: 1})
	st.ApplySnapshot("a", 1, &federationv1.Snapshot{Generation: 1, ObservedAt: timestamppb.New(start), Machines: []*federationv1.Machine{machine(2)}})

	res, err := p.Reconcile(ctx, store.Request("a"))
	if err != nil || *inventoryWrites != 1 || res.RequeueAfter != RenewInterval(40*time.Second) {
		t.Fatalf("first reconcile: err=%v writes=%d requeueAfter=%s, want nil 1 %s", err, *inventoryWrites, res.RequeueAfter, RenewInterval(40*time.Second))
	}
	clk.SetTime(start.Add(time.Second))
	st.ApplyDelta("a", 1, &federationv1.Delta{Generation: 2, Upserts: []*federationv1.Machine{machine(3)}})
	res, err = p.Reconcile(ctx, store.Request("a"))
	if err != nil || *inventoryWrites != 1 || res.RequeueAfter != 2*time.Second {
		t.Fatalf("a change 1s after the write: err=%v writes=%d requeueAfter=%s, want nil, no write, back in 2s", err, *inventoryWrites, res.RequeueAfter)
	}
	st.ApplyDelta("a", 1, &federationv1.Delta{Generation: 3, Upserts: []*federationv1.Machine{machine(4)}})
	clk.SetTime(start.Add(3 * time.Second))
	if _, err := p.Reconcile(ctx, store.Request("a")); err != nil || *inventoryWrites != 2 {
		t.Fatalf("once the interval is over: err=%v writes=%d, want one write of both changes (2 in all)", err, *inventoryWrites)
	}
	inv := &imperatorv1alpha1.ClusterInventory{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "a", Name: InventoryName("a")}, inv); err != nil {
		t.Fatal(err)
	}
	if inv.Status.Generation != 3 {
		t.Errorf("inventory generation %d, want 3 (both changes in one write)", inv.Status.Generation)
	}
	st.Disconnect("a")
	clk.SetTime(start.Add(10 * time.Second))
	if res, err := p.Reconcile(ctx, store.Request("a")); err != nil || res.RequeueAfter != 0 {
		t.Errorf("after the stream ended: err=%v requeueAfter=%s, want nil and no periodic look (nothing to renew)", err, res.RequeueAfter)
	}
}

// countingInventoryWrites is a fake hub cluster API holding ManagedCluster
// a, and the number of ClusterInventory status writes made to it.
func countingInventoryWrites(t *testing.T) (client.Client, *int) {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, imperatorv1alpha1.AddToScheme, clusterv1.Install} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	writes := 0
	// The plain object tracker: the default one tracks managed fields and
	// cannot convert the inventory's uint64 fields.
	tracker := clienttesting.NewObjectTracker(scheme, serializer.NewCodecFactory(scheme).UniversalDecoder())
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjectTracker(tracker).
		WithObjects(&clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "uid-a"}}).
		WithStatusSubresource(&imperatorv1alpha1.ClusterInventory{}, &clusterv1.ManagedCluster{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if _, ok := obj.(*imperatorv1alpha1.ClusterInventory); ok {
					writes++
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		}).Build()
	return c, &writes
}
