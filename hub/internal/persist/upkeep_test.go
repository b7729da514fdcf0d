package persist

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/protobuf/types/known/timestamppb"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/store"
	"github.com/imperator-federation/imperator/internal/schemes"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	"github.com/imperator-federation/imperator/test/util/framework"
)

// The serving replica looks at every cluster streaming to it every
// RenewInterval (5 s): at 10,000 spokes its cost must not grow with the
// size of their inventories. Before, each look deep-copied the cluster's
// whole ClusterInventory out of the cache to read one condition: 4,044
// allocations for 2,000 Machines (46 for one), every 5 s, for every
// cluster; now 24 for either.
func TestRenewalCostDoesNotGrowWithTheInventory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an API server")
	}
	ctx, env, informers, c := startHubAPI(t)

	start := time.Now()
	clk := clocktesting.NewFakePassiveClock(start)
	st := store.New(clk, 40*time.Second)
	st.SetReplica("hub-a")
	p := New(c, st, Options{Reader: env.Client, Clock: clk, Log: logr.Discard()})
	sizes := map[string]int{"small": 1, "large": 2000}
	for name, machines := range sizes {
		// Registration makes the ManagedCluster and the cluster's namespace.
		if err := env.Client.Create(ctx, &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
		snapshot := &federationv1.Snapshot{Generation: 1, ObservedAt: timestamppb.New(start)}
		for i := range machines {
			m := gpuMachine(2)
			m.Name = fmt.Sprintf("gpu-%04d", i)
			snapshot.Machines = append(snapshot.Machines, m)
		}
		st.Connect(name, &federationv1.Hello{ClusterName: name, Epoch: 1})
		st.ApplySnapshot(name, 1, snapshot)
		// The cache sees the ManagedCluster and then the inventory written.
		var syncErr error
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			if syncErr = informers.Get(ctx, client.ObjectKey{Name: name}, &clusterv1.ManagedCluster{}); syncErr == nil {
				syncErr = p.sync(ctx, name)
			}
			return syncErr == nil, nil
		}); err != nil {
			t.Fatalf("writing cluster %s: %v (last: %v)", name, err, syncErr)
		}
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			inv := &imperatorv1alpha1.ClusterInventory{}
			err := informers.Get(ctx, client.ObjectKey{Namespace: name, Name: InventoryName(name)}, inv)
			return err == nil && len(inv.Status.Machines) == machines, client.IgnoreNotFound(err)
		}); err != nil {
			t.Fatalf("cache holding the inventory of %s: %v", name, err)
		}
	}

	allocs := map[string]float64{}
	for name := range sizes {
		allocs[name] = testing.AllocsPerRun(20, func() {
			if err := p.upkeep(ctx, name); err != nil {
				t.Fatalf("renewing %s: %v", name, err)
			}
		})
	}
	t.Logf("allocations per renewal: %v (machines: %v)", allocs, sizes)
	// The rest (the ManagedCluster's copy, the Lease) is the same for both.
	if extra := allocs["large"] - allocs["small"]; extra > 50 {
		t.Errorf("renewing a cluster of %d Machines costs %.0f allocations more than one of %d (%v): the renewal copies the inventory",
			sizes["large"], extra, sizes["small"], allocs)
	}

	// The periodic look itself: a reconcile of an unchanged cluster after
	// the write interval is a renewal, not a sync that converts, copies and
	// compares the whole inventory to write nothing (before: 1,000 such
	// syncs a second per replica at 10,000 spokes).
	clk.SetTime(start.Add(RenewInterval(40 * time.Second)))
	looks := map[string]float64{}
	for name := range sizes {
		// The first reconcile syncs: the writes above were not its own.
		if _, err := p.Reconcile(ctx, store.Request(name)); err != nil {
			t.Fatalf("reconciling %s: %v", name, err)
		}
		looks[name] = testing.AllocsPerRun(20, func() {
			if _, err := p.Reconcile(ctx, store.Request(name)); err != nil {
				t.Fatalf("reconciling %s: %v", name, err)
			}
		})
	}
	t.Logf("allocations per periodic look: %v (machines: %v)", looks, sizes)
	if extra := looks["large"] - looks["small"]; extra > 50 {
		t.Errorf("the periodic look at an unchanged cluster of %d Machines costs %.0f allocations more than one of %d (%v): it syncs the whole inventory",
			sizes["large"], extra, sizes["small"], looks)
	}
	// A change is still written at the next look.
	st.ApplyDelta("large", 1, &federationv1.Delta{Generation: 2, Upserts: []*federationv1.Machine{gpuMachine(5)}})
	if _, err := p.Reconcile(ctx, store.Request("large")); err != nil {
		t.Fatalf("reconciling large after a change: %v", err)
	}
	inv := &imperatorv1alpha1.ClusterInventory{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "large", Name: InventoryName("large")}, inv); err != nil {
		t.Fatal(err)
	}
	if inv.Status.Generation != 2 {
		t.Errorf("inventory of large after a change: generation %d, want 2", inv.Status.Generation)
	}
}

// startHubAPI starts an API server with the hub's CRDs and returns a
// context ended when the test is, the environment, and the hub's client: it
// reads from its own informers' cache and writes to the API server. All of
// it stops when the test ends.
func startHubAPI(t *testing.T) (context.Context, *framework.Environment, cache.Cache, client.Client) {
	t.Helper()
	log.SetLogger(logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	scheme, err := schemes.Hub()
	if err != nil {
		t.Fatal(err)
	}
	env, err := framework.Start(ctx, framework.Options{Scheme: scheme, CRDs: framework.HubCRDs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	// The hub's client: reads from the manager's cache, writes to the API.
	informers, err := cache.New(env.Config, cache.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	cacheDone := make(chan error, 1)
	go func() { cacheDone <- informers.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-cacheDone; err != nil {
			t.Error(err)
		}
	})
	c, err := client.New(env.Config, client.Options{Scheme: scheme, Cache: &client.CacheOptions{Reader: informers}})
	if err != nil {
		t.Fatal(err)
	}

	return ctx, env, informers, c
}

// An idle spoke streaming here (only heartbeats, nothing changed in the
// store) whose ClusterInventory is deleted — by hand, or by the garbage
// collector after a re-registration — gets it written again at the next
// periodic look, not only at its next change: the other replicas read the
// inventory to know the cluster is live.
func TestDeletedInventoryOfAnIdleStreamingClusterIsWrittenAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an API server")
	}
	ctx, env, informers, c := startHubAPI(t)
	const name = "idle"
	if err := env.Client.Create(ctx, &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	clk := clocktesting.NewFakePassiveClock(start)
	st := store.New(clk, 40*time.Second)
	st.SetReplica("hub-a")
	p := New(c, st, Options{Reader: env.Client, Clock: clk, Log: logr.Discard()})
	st.Connect(name, &federationv1.Hello{ClusterName: name, Epoch: 1})
	st.ApplySnapshot(name, 1, &federationv1.Snapshot{Generation: 1, ObservedAt: timestamppb.New(start), Machines: []*federationv1.Machine{gpuMachine(2)}})

	key := client.ObjectKey{Namespace: name, Name: InventoryName(name)}
	cached := func(want bool) error {
		return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			err := informers.Get(ctx, key, &imperatorv1alpha1.ClusterInventory{})
			return (err == nil) == want, client.IgnoreNotFound(err)
		})
	}
	// The first write, through Reconcile as the persister's workers run it
	// (once the cache holds the ManagedCluster).
	var reconcileErr error
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, reconcileErr = p.Reconcile(ctx, store.Request(name))
		return reconcileErr == nil && informers.Get(ctx, key, &imperatorv1alpha1.ClusterInventory{}) == nil, nil
	}); err != nil {
		t.Fatalf("writing the inventory: %v (last: %v)", err, reconcileErr)
	}
	inv := &imperatorv1alpha1.ClusterInventory{}
	if err := env.Client.Get(ctx, key, inv); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, inv); err != nil {
		t.Fatal(err)
	}
	if err := cached(false); err != nil {
		t.Fatalf("cache seeing the deletion: %v", err)
	}
	// Periodic looks past the write interval: only heartbeats arrived.
	for look := 1; look <= 3; look++ {
		clk.SetTime(start.Add(time.Duration(look) * RenewInterval(st.GracePeriod())))
		st.Heartbeat(name, 1, &federationv1.Heartbeat{})
		if _, err := p.Reconcile(ctx, store.Request(name)); err != nil {
			t.Fatalf("look %d: %v", look, err)
		}
	}
	got := &imperatorv1alpha1.ClusterInventory{}
	if err := env.Client.Get(ctx, key, got); err != nil {
		t.Fatalf("the deleted inventory of an idle streaming cluster was not written again by three periodic looks: %v", err)
	}
	if len(got.Status.Machines) != 1 {
		t.Errorf("the inventory written again holds %d Machines, want the spoke's 1", len(got.Status.Machines))
	}
}

// A cluster whose namespace is missing (registration makes it; someone
// deleted it since) gets it made again, with its Lease and inventory, at
// its first write: the Lease, written first, would otherwise fail forever.
func TestClusterWithoutItsNamespaceGetsItBackAtItsFirstWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an API server")
	}
	ctx, env, _, _ := startHubAPI(t)
	const name = "no-namespace"
	if err := env.Client.Create(ctx, &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	st := store.New(clocktesting.NewFakePassiveClock(start), 40*time.Second)
	st.SetReplica("hub-a")
	p := New(env.Client, st, Options{Clock: clocktesting.NewFakePassiveClock(start), Log: logr.Discard()})
	st.Connect(name, &federationv1.Hello{ClusterName: name, Epoch: 1})
	st.ApplySnapshot(name, 1, &federationv1.Snapshot{Generation: 1, ObservedAt: timestamppb.New(start), Machines: []*federationv1.Machine{gpuMachine(2)}})
	if _, err := p.Reconcile(ctx, store.Request(name)); err != nil {
		t.Fatalf("writing a cluster without its namespace: %v", err)
	}
	inv := &imperatorv1alpha1.ClusterInventory{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: name, Name: InventoryName(name)}, inv); err != nil {
		t.Fatalf("inventory: %v", err)
	}
	if len(inv.Status.Machines) != 1 {
		t.Errorf("inventory holds %d Machines, want 1", len(inv.Status.Machines))
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: name, Name: LeaseName}, &coordinationv1.Lease{}); err != nil {
		t.Errorf("Lease: %v", err)
	}
}
