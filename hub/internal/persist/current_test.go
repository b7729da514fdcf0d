package persist

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/timestamppb"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/capacity"
	"github.com/imperator-federation/imperator/hub/internal/store"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// failingAPI is a fake hub cluster API whose ClusterInventory status writes
// fail with refuse when it is set: all of them, or with onlyMachines those
// carrying Machines (as etcd refuses an object over 1.5 MiB while a small
// patch of a condition goes through).
type failingAPI struct {
	client.Client
	refuse       error
	onlyMachines bool
	// refuseManagedCluster, when set, fails every ManagedCluster status
	// apply (an OCM webhook down, a missing permission).
	refuseManagedCluster error
}

func newFailingAPI(t *testing.T) *failingAPI {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, imperatorv1alpha1.AddToScheme, clusterv1.Install} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	api := &failingAPI{}
	tracker := clienttesting.NewObjectTracker(scheme, serializer.NewCodecFactory(scheme).UniversalDecoder())
	api.Client = fake.NewClientBuilder().WithScheme(scheme).WithObjectTracker(tracker).
		WithObjects(&clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "uid-a"}}).
		WithStatusSubresource(&imperatorv1alpha1.ClusterInventory{}, &clusterv1.ManagedCluster{}).
		// Restore lists the clusters' Leases by name, as the API server can.
		WithIndex(&coordinationv1.Lease{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} }).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if _, ok := obj.(*imperatorv1alpha1.ClusterInventory); ok && api.refuse != nil {
					data, err := patch.Data(obj)
					if err != nil {
						return err
					}
					if !api.onlyMachines || bytes.Contains(data, []byte(`"machines"`)) {
						return api.refuse
					}
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
			SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
				if api.refuseManagedCluster != nil {
					return api.refuseManagedCluster
				}
				return c.SubResource(sub).Apply(ctx, obj, opts...)
			},
		}).Build()
	return api
}

func (api *failingAPI) inventory(t *testing.T) *imperatorv1alpha1.ClusterInventory {
	t.Helper()
	inv := &imperatorv1alpha1.ClusterInventory{}
	if err := api.Get(context.Background(), client.ObjectKey{Namespace: "a", Name: InventoryName("a")}, inv); err != nil {
		t.Fatal(err)
	}
	return inv
}

func (api *failingAPI) leaseHolder(t *testing.T) string {
	t.Helper()
	lease := &coordinationv1.Lease{}
	if err := api.Get(context.Background(), client.ObjectKey{Namespace: "a", Name: LeaseName}, lease); err != nil {
		t.Fatal(err)
	}
	holder, _ := leaseHolder(lease)
	return holder
}

func gpuMachine(available int32) *federationv1.Machine {
	return &federationv1.Machine{Name: "gpu", Group: "g", Types: []*federationv1.MachineType{{
		Name: "t", Cpu: "4", Memory: "16Gi", Available: available,
		Usage: &federationv1.Usage{Maximum: available, Reserved: available},
	}}}
}

// follower is another hub replica's view of cluster a after reading inv and
// the Lease from api.
func follower(t *testing.T, api *failingAPI, clk *clocktesting.FakePassiveClock, started time.Time) *store.Cluster {
	t.Helper()
	other := store.New(clk, 40*time.Second)
	other.SetReplica("hub-b")
	lease := &coordinationv1.Lease{}
	if err := api.Get(context.Background(), client.ObjectKey{Namespace: "a", Name: LeaseName}, lease); err != nil {
		t.Fatal(err)
	}
	other.Observe("a", peerOf(api.inventory(t), lease, started))
	c, _ := other.Get("a")
	return c
}

// An inventory the hub cluster's API refuses to store (too large for etcd)
// is reported on the ClusterInventory and in a metric, and the other
// replicas serve the older figures they read as stale, not as live, until a
// write goes through again.
func TestInventoryTheAPIRefusesIsNotServedAsLiveByOtherReplicas(t *testing.T) {
	ctx := context.Background()
	api, clk, st, p := servingReplica(t)
	start := clk.Now()
	if err := p.sync(ctx, "a"); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	started := start.Add(-time.Minute)
	if c := follower(t, api, clk, started); capacity.StateOf(c) != queryv1.ClusterState_CLUSTER_STATE_AVAILABLE {
		t.Fatalf("before any failure another replica sees %v (outdated %q), want AVAILABLE", capacity.StateOf(c), c.Outdated)
	}

	api.refuse, api.onlyMachines = apierrors.NewRequestEntityTooLargeError("limit is 3145728"), true
	failuresBefore := testutil.ToFloat64(persistFailures.WithLabelValues("RequestEntityTooLarge"))
	st.ApplyDelta("a", 1, &federationv1.Delta{Generation: 2, Upserts: []*federationv1.Machine{gpuMachine(5)}})
	if err := p.sync(ctx, "a"); err == nil {
		t.Fatal("sync of an inventory the API refuses returned no error")
	}
	inv := api.inventory(t)
	cond := meta.FindStatusCondition(inv.Status.Conditions, ConditionInventoryCurrent)
	if inv.Status.Generation != 1 || cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != ReasonPersistFailed {
		t.Errorf("after the refused write: generation %d, condition %+v; want generation 1 and %s False/%s", inv.Status.Generation, cond, ConditionInventoryCurrent, ReasonPersistFailed)
	}
	if got := testutil.ToFloat64(persistFailures.WithLabelValues("RequestEntityTooLarge")) - failuresBefore; got != 1 {
		t.Errorf("persist failures counted: %v, want 1", got)
	}
	if got := testutil.ToFloat64(inventoryNotCurrent.WithLabelValues("a")); got != 1 {
		t.Errorf("not-current gauge of cluster a = %v, want 1", got)
	}
	c := follower(t, api, clk, started)
	if capacity.StateOf(c) != queryv1.ClusterState_CLUSTER_STATE_STALE || !c.Stale() {
		t.Errorf("another replica serves the unpersisted cluster as %v (outdated %q), want STALE", capacity.StateOf(c), c.Outdated)
	}

	api.refuse = nil
	if err := p.sync(ctx, "a"); err != nil {
		t.Fatalf("sync once the API accepts the write: %v", err)
	}
	if c := follower(t, api, clk, started); capacity.StateOf(c) != queryv1.ClusterState_CLUSTER_STATE_AVAILABLE || c.Generation != 2 {
		t.Errorf("after a good write another replica sees generation %d as %v, want 2 AVAILABLE", c.Generation, capacity.StateOf(c))
	}
}

// When not even the condition can be written, the serving replica releases
// the cluster's Lease: the other replicas, which keep the cluster live on
// the holder's replica Lease, see it go silent instead of serving figures
// nobody could update. It takes the Lease again once a write goes through.
func TestLeaseIsReleasedWhileNothingCanBeWritten(t *testing.T) {
	ctx := context.Background()
	api, clk, st, p := servingReplica(t)
	start := clk.Now()
	if err := p.sync(ctx, "a"); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	if got := api.leaseHolder(t); got != "hub-a" {
		t.Fatalf("after the first write the Lease is held by %q, want hub-a", got)
	}

	api.refuse = apierrors.NewInternalError(context.DeadlineExceeded)
	clk.SetTime(start.Add(10 * time.Second))
	st.ApplyDelta("a", 1, &federationv1.Delta{Generation: 2, Upserts: []*federationv1.Machine{gpuMachine(5)}})
	if err := p.sync(ctx, "a"); err == nil {
		t.Fatal("sync returned no error while every status write fails")
	}
	if got := api.leaseHolder(t); got != "" {
		t.Errorf("Lease held by %q while nothing could be written, want it released", got)
	}
	// Another replica that sees hub-a running: silent a grace period later.
	other := store.New(clk, 40*time.Second)
	other.SetReplica("hub-b")
	other.ReplicaRenewed("hub-a")
	lease := &coordinationv1.Lease{}
	if err := api.Get(ctx, client.ObjectKey{Namespace: "a", Name: LeaseName}, lease); err != nil {
		t.Fatal(err)
	}
	other.Observe("a", peerOf(api.inventory(t), lease, start.Add(-time.Minute)))
	clk.SetTime(start.Add(51 * time.Second))
	other.ReplicaRenewed("hub-a")
	other.EvaluateLiveness()
	if c, _ := other.Get("a"); c.Liveness != store.LivenessUnknown {
		t.Errorf("another replica sees the cluster of a released Lease as %s 41s later, want Unknown", c.Liveness)
	}

	clk.SetTime(start.Add(60 * time.Second))
	st.Heartbeat("a", 1, &federationv1.Heartbeat{Generation: 2})
	api.refuse = nil
	if err := p.sync(ctx, "a"); err != nil {
		t.Fatalf("sync once the API works: %v", err)
	}
	if got := api.leaseHolder(t); got != "hub-a" {
		t.Errorf("Lease held by %q after the API recovered, want hub-a again", got)
	}
}

// Heartbeats write nothing: neither the cluster's Lease nor its inventory
// nor its ManagedCluster, however long the spoke heartbeats.
func TestHeartbeatsWriteNothing(t *testing.T) {
	ctx := context.Background()
	api, clk, st, p := servingReplica(t)
	start := clk.Now()
	if err := p.sync(ctx, "a"); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	versions := func() []string {
		var out []string
		for _, obj := range []client.Object{&coordinationv1.Lease{}, &imperatorv1alpha1.ClusterInventory{}, &clusterv1.ManagedCluster{}} {
			key := client.ObjectKey{Namespace: "a", Name: "a"}
			switch obj.(type) {
			case *coordinationv1.Lease:
				key.Name = LeaseName
			case *clusterv1.ManagedCluster:
				key.Namespace = ""
			}
			if err := api.Get(ctx, key, obj); err != nil {
				t.Fatal(err)
			}
			out = append(out, obj.GetResourceVersion())
		}
		return out
	}
	before := versions()
	for at := 5 * time.Second; at <= 10*time.Minute; at += 5 * time.Second {
		clk.SetTime(start.Add(at))
		st.Heartbeat("a", 1, &federationv1.Heartbeat{Generation: 1})
		if err := p.upkeep(ctx, "a"); err != nil {
			t.Fatalf("renew at %s: %v", at, err)
		}
	}
	if after := versions(); !slices.Equal(before, after) {
		t.Errorf("resourceVersions of Lease, inventory, ManagedCluster went from %v to %v with heartbeats alone, want no write", before, after)
	}
}

// A Snapshot the hub refused leaves the last good inventory in the API,
// marked not current, so that other replicas do not serve it as live.
func TestRefusedSpokeInventoryIsMarkedNotCurrent(t *testing.T) {
	ctx := context.Background()
	api, clk, st, p := servingReplica(t)
	start := clk.Now()
	bad := gpuMachine(3)
	bad.Types[0].Usage.Used = -1
	if res := st.ApplySnapshot("a", 1, &federationv1.Snapshot{Generation: 2, Machines: []*federationv1.Machine{bad}}); res.Refused == nil {
		t.Fatalf("a negative count was not refused: %+v", res)
	}
	if err := p.sync(ctx, "a"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	inv := api.inventory(t)
	cond := meta.FindStatusCondition(inv.Status.Conditions, ConditionInventoryCurrent)
	if inv.Status.Generation != 1 || cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != ReasonInventoryRefused {
		t.Errorf("inventory generation %d, condition %+v; want the last good generation 1 and %s False/%s", inv.Status.Generation, cond, ConditionInventoryCurrent, ReasonInventoryRefused)
	}
	if c := follower(t, api, clk, start.Add(-time.Minute)); capacity.StateOf(c) != queryv1.ClusterState_CLUSTER_STATE_STALE {
		t.Errorf("another replica serves the refused cluster as %v, want STALE", capacity.StateOf(c))
	}
}

// An agent restarted (a new epoch) whose first Snapshot the hub refuses has
// no Snapshot of its epoch applied; its refusal must still be persisted.
func TestRefusedFirstSnapshotOfANewEpochIsMarkedNotCurrent(t *testing.T) {
	ctx := context.Background()
	api, _, st, p := servingReplica(t)
	if err := p.sync(ctx, "a"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	st.Connect("a", &federationv1.Hello{ClusterName: "a", Epoch: 2})
	bad := gpuMachine(3)
	bad.Types[0].Name = "Not_A_Type"
	if res := st.ApplySnapshot("a", 2, &federationv1.Snapshot{Generation: 1, Machines: []*federationv1.Machine{bad}}); res.Refused == nil {
		t.Fatalf("an invalid type name was not refused: %+v", res)
	}
	if err := p.sync(ctx, "a"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	cond := meta.FindStatusCondition(api.inventory(t).Status.Conditions, ConditionInventoryCurrent)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != ReasonInventoryRefused {
		t.Errorf("condition %+v, want %s False/%s", cond, ConditionInventoryCurrent, ReasonInventoryRefused)
	}
}

// A spoke whose agent cannot reach its own API server reports from a stale
// cache: the replica holding its stream shows it stale, and so must every
// other replica, which knows only what the ClusterInventory says.
func TestSpokeReportingFromAStaleCacheIsStaleOnOtherReplicasToo(t *testing.T) {
	ctx := context.Background()
	api, clk, st, p := servingReplica(t)
	start := clk.Now()
	st.Heartbeat("a", 1, &federationv1.Heartbeat{Generation: 1, ApiServerUnreachableSince: timestamppb.New(start.Add(-time.Minute))})
	if err := p.sync(ctx, "a"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	inv := api.inventory(t)
	cond := meta.FindStatusCondition(inv.Status.Conditions, ConditionInventoryCurrent)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != ReasonSpokeAPIServerUnreachable {
		t.Errorf("condition %+v; want %s False/%s", cond, ConditionInventoryCurrent, ReasonSpokeAPIServerUnreachable)
	}
	if c := follower(t, api, clk, start.Add(-time.Minute)); capacity.StateOf(c) != queryv1.ClusterState_CLUSTER_STATE_STALE {
		t.Errorf("another replica serves the cluster as %v, want STALE", capacity.StateOf(c))
	}

	// The agent reaches its API server again: current everywhere at once.
	st.Heartbeat("a", 1, &federationv1.Heartbeat{Generation: 1})
	if err := p.sync(ctx, "a"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if c := follower(t, api, clk, start.Add(-time.Minute)); capacity.StateOf(c) != queryv1.ClusterState_CLUSTER_STATE_AVAILABLE {
		t.Errorf("once the spoke reaches its API server again another replica serves it as %v, want AVAILABLE", capacity.StateOf(c))
	}
}

// servingReplica is replica hub-a of a hub whose API can be made to refuse
// writes, serving cluster "a" (epoch 1), which has sent its first Snapshot;
// the fake clock starts at the Snapshot's time.
func servingReplica(t *testing.T) (*failingAPI, *clocktesting.FakePassiveClock, *store.Store, *Persister) {
	t.Helper()
	api := newFailingAPI(t)
	start := time.Unix(10_000, 0)
	clk := clocktesting.NewFakePassiveClock(start)
	st := store.New(clk, 40*time.Second)
	st.SetReplica("hub-a")
	p := New(api, st, Options{Log: logr.Discard()})
	st.Connect("a", &federationv1.Hello{ClusterName: "a", Epoch: 1})
	st.ApplySnapshot("a", 1, &federationv1.Snapshot{Generation: 1, ObservedAt: timestamppb.New(start), Machines: []*federationv1.Machine{gpuMachine(2)}})
	return api, clk, st, p
}

// The other replicas take the serving replica's clusters as live while its
// replica Lease is renewed, until the inventory says otherwise: a spoke
// gone silent must be marked Unknown in the inventory even when the
// ManagedCluster cannot be written, or it would be shown live forever.
func TestSilentClusterIsUnknownInItsInventoryWhenTheManagedClusterCannotBeWritten(t *testing.T) {
	ctx := context.Background()
	api, clk, st, p := servingReplica(t)
	if err := p.sync(ctx, "a"); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	clk.SetTime(clk.Now().Add(time.Minute))
	st.EvaluateLiveness()
	api.refuseManagedCluster = errors.New("admission webhook unavailable")
	if err := p.sync(ctx, "a"); err == nil {
		t.Errorf("sync of a silent cluster whose ManagedCluster cannot be written returned no error: the write would not be retried")
	}
	if got := availableStatus(api.inventory(t)); got != metav1.ConditionUnknown {
		t.Errorf("inventory Available = %q, want %q: the other replicas would keep the silent cluster live", got, metav1.ConditionUnknown)
	}
}

// A replica that starts (a rolling update) restores the idle clusters of a
// replica that keeps running as Available: their inventories were written
// long ago, but that replica's Lease was renewed just now. Before, they came
// back Unknown, and a replica elected leader in its first seconds marked
// them all Unknown.
func TestStartingReplicaKeepsTheIdleClustersOfARunningReplicaAvailable(t *testing.T) {
	ctx := context.Background()
	api, clk, _, p := servingReplica(t)
	if err := p.sync(ctx, "a"); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	// An hour of heartbeats writes nothing; hub-a's Lease is renewed.
	clk.SetTime(clk.Now().Add(time.Hour))
	renewed := metav1.NewMicroTime(clk.Now().Add(-2 * time.Second))
	if err := api.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "imperator-system", Name: ReplicaLeaseName("hub-a"), Labels: map[string]string{ReplicaLabel: "true"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("hub-a"), RenewTime: &renewed},
	}); err != nil {
		t.Fatal(err)
	}

	started := store.New(clk, 40*time.Second)
	started.SetReplica("hub-c")
	if err := New(api, started, Options{Log: logr.Discard(), Namespace: "imperator-system", Clock: clk}).Restore(ctx, api); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	c, ok := started.Get("a")
	if !ok || c.Liveness != store.LivenessAvailable {
		t.Fatalf("restored cluster a: %+v (found %v), want Available: its replica renewed its Lease 2s ago", c, ok)
	}

	// hub-a's Lease renewed more than the grace period ago proves nothing.
	gone := store.New(clk, 40*time.Second)
	gone.SetReplica("hub-d")
	clk.SetTime(clk.Now().Add(time.Minute))
	if err := New(api, gone, Options{Log: logr.Discard(), Namespace: "imperator-system", Clock: clk}).Restore(ctx, api); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if c, _ := gone.Get("a"); c.Liveness == store.LivenessAvailable {
		t.Errorf("restored cluster a Available although its replica's Lease was last renewed over a minute ago")
	}
}
