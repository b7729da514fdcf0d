package persist

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/store"
)

// Follower feeds the store with what other hub replicas write: the
// inventories and heartbeat Leases of the clusters whose streams they hold.
// Every replica runs one, so that each answers queries about the whole fleet.
type Follower struct {
	// Client reads from the manager's cache, which must hold
	// ClusterInventories, ManagedClusters and the Leases named LeaseName.
	Client client.Client
	Store  *store.Store
	// Started is when this replica started: Leases renewed earlier do not
	// prove that their holder is still running.
	Started time.Time
	// EndStream ends the Report stream of a cluster open here when its
	// spoke reports to another replica now (optional).
	EndStream func(cluster string)

	// running are the replicas seen renewing a Lease since Started; only
	// the controller's single worker touches it.
	running map[string]bool
}

// SetupWithManager runs the Follower on every replica, leader or not.
func (f *Follower) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("replica-follower").
		For(&imperatorv1alpha1.ClusterInventory{}).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
			if obj.GetName() != LeaseName {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: InventoryName(obj.GetNamespace())}}}
		})).
		// A ManagedCluster the cache had not seen when its inventory came.
		Watches(&clusterv1.ManagedCluster{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetName(), Name: InventoryName(obj.GetName())}}}
		})).
		// One worker: running needs no lock, and the store orders updates
		// per cluster anyway.
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), RecoverPanic: ptr.To(true), MaxConcurrentReconciles: 1}).
		Complete(f)
}

// Reconcile hands a cluster's inventory and Lease to the store, which keeps
// its own figures for the clusters whose streams this replica holds.
func (f *Follower) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	inv := &imperatorv1alpha1.ClusterInventory{}
	if err := f.Client.Get(ctx, req.NamespacedName, inv); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !isClusterInventory(inv) {
		return reconcile.Result{}, nil
	}
	name := inv.Spec.ClusterName
	// A deregistered cluster stays forgotten, whatever events are late.
	mc := &clusterv1.ManagedCluster{}
	if err := f.Client.Get(ctx, client.ObjectKey{Name: name}, mc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !mc.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	var lease *coordinationv1.Lease
	l := &coordinationv1.Lease{}
	switch err := f.Client.Get(ctx, client.ObjectKey{Namespace: name, Name: LeaseName}, l); {
	case err == nil:
		lease = l
	case !apierrors.IsNotFound(err):
		return reconcile.Result{}, fmt.Errorf("getting Lease %s/%s: %w", name, LeaseName, err)
	}
	peer := peerOf(inv, lease, f.Started)
	if peer.Live && peer.Replica != "" && !f.running[peer.Replica] {
		// One renewal proves the replica runs: its other clusters are
		// current too, without waiting for each of their renewals.
		if f.running == nil {
			f.running = map[string]bool{}
		}
		f.running[peer.Replica] = true
		f.Store.ConfirmReplica(peer.Replica)
	}
	peer.Live = peer.Live || f.running[peer.Replica]
	superseded := f.Store.Observe(name, peer)
	if c, ok := f.Store.Get(name); ok && c.Phase == store.PhaseRemote && c.Replica != "" && !f.running[c.Replica] {
		// The store saw the replica renew (whatever its clock says): its
		// other clusters are current too.
		if f.running == nil {
			f.running = map[string]bool{}
		}
		f.running[c.Replica] = true
		f.Store.ConfirmReplica(c.Replica)
	}
	if superseded {
		ctrl.LoggerFrom(ctx).Info("Spoke reports to another hub replica now; ending its stream here", "cluster", name, "replica", peer.Replica)
		if f.EndStream != nil {
			f.EndStream(name)
		}
	}
	// The ManagedCluster may have gone meanwhile, and the deregistration
	// with it: make sure the cluster does not stay in the index.
	if err := f.Client.Get(ctx, client.ObjectKey{Name: name}, mc); apierrors.IsNotFound(err) || (err == nil && !mc.DeletionTimestamp.IsZero()) {
		f.Store.Remove(name)
	}
	return reconcile.Result{}, nil
}
