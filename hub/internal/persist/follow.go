package persist

import (
	"context"
	"fmt"
	"strings"
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
// inventories and Leases of the clusters whose streams they hold, and the
// replicas' own Leases, whose renewals keep those clusters live (see
// Store.ReplicaRenewed). Every replica runs one, so that each answers
// queries about the whole fleet.
type Follower struct {
	// Client reads from the manager's cache, which must hold
	// ClusterInventories, ManagedClusters, the Leases named LeaseName and
	// the replica Leases of the hub's namespace.
	Client client.Client
	Store  *store.Store
	// Started is when this replica started: Leases renewed earlier do not
	// prove that their holder is still running.
	Started time.Time
	// EndStream ends the Report stream of a cluster open here when its
	// spoke reports to another replica now (optional).
	EndStream func(cluster string)

	// replicas are the replica Leases as last seen, by name; only the
	// controller's single worker touches it.
	replicas map[string]replicaRenewal
}

// replicaRenewal is who holds a replica Lease and when it renewed it.
type replicaRenewal struct {
	holder  string
	renewed time.Time
}

// SetupWithManager runs the Follower on every replica, leader or not.
func (f *Follower) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("replica-follower").
		For(&imperatorv1alpha1.ClusterInventory{}).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
			if IsReplicaLease(obj) {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}}}
			}
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

// replicaLease tells the store when another replica renewed its replica
// Lease, as this replica sees it: a renewal counts from when it is seen,
// not by the time written in it (the replicas' clocks may disagree), except
// the first one seen, which counts only when written after Started.
func (f *Follower) replicaLease(ctx context.Context, key types.NamespacedName) error {
	lease := &coordinationv1.Lease{}
	if err := f.Client.Get(ctx, key, lease); err != nil {
		if apierrors.IsNotFound(err) {
			// The replica stopped (or its Lease was swept): its clusters
			// go silent unless their spokes report elsewhere within the
			// grace period, and the store forgets it.
			if prev, ok := f.replicas[key.Name]; ok {
				f.Store.ReplicaGone(prev.holder)
			}
			delete(f.replicas, key.Name)
			return nil
		}
		return fmt.Errorf("getting Lease %s: %w", key, err)
	}
	holder, renewed := leaseHolder(lease)
	prev, seen := f.replicas[key.Name]
	if f.replicas == nil {
		f.replicas = map[string]replicaRenewal{}
	}
	f.replicas[key.Name] = replicaRenewal{holder: holder, renewed: renewed}
	switch {
	case holder == "" || holder == f.Store.Replica():
	case seen && prev.holder == holder && prev.renewed.Equal(renewed):
		// Nothing new (a resync of the cache).
	case !seen && !renewed.After(f.Started):
		// Written before this replica started: it proves nothing yet.
	default:
		f.Store.ReplicaRenewed(holder)
	}
	return nil
}

// Reconcile hands a cluster's inventory and Lease to the store, which keeps
// its own figures for the clusters whose streams this replica holds.
func (f *Follower) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if req.Namespace != req.Name && strings.HasPrefix(req.Name, ReplicaLeasePrefix) {
		// An inventory is named like its namespace; a replica Lease is not.
		return reconcile.Result{}, f.replicaLease(ctx, req.NamespacedName)
	}
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
	peer.Live = peer.Live || f.Store.ReplicaLive(peer.Replica)
	superseded := f.Store.Observe(name, peer)
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
