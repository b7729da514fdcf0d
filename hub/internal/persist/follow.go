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
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false)}).
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
	if f.Store.Observe(name, peer) {
		ctrl.LoggerFrom(ctx).Info("Spoke reconnected to another hub replica; the stream held here is stale", "cluster", name, "replica", peer.Replica)
	}
	return reconcile.Result{}, nil
}
