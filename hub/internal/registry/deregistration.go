package registry

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Deregistrations calls Forget with the name of every ManagedCluster that is
// deleted, so that the hub drops the cluster from memory and ends its
// stream. Its ClusterInventory goes with it through its owner reference. It
// is a controller of ManagedClusters, read through the manager's cache, on
// every replica.
type Deregistrations struct {
	// Reader is the manager's cache.
	Reader client.Reader
	Forget func(cluster string)
}

// SetupWithManager runs the controller on every replica: each keeps its own
// index. Only deletions are of interest.
func (d *Deregistrations) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("cluster-deregistration").
		For(&clusterv1.ManagedCluster{}, builder.WithPredicates(predicate.Funcs{
			CreateFunc:  func(event.CreateEvent) bool { return false },
			UpdateFunc:  func(event.UpdateEvent) bool { return false },
			GenericFunc: func(event.GenericEvent) bool { return false },
		})).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), RecoverPanic: ptr.To(true)}).
		Complete(d)
}

// Reconcile forgets the cluster when its ManagedCluster is gone.
func (d *Deregistrations) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	err := d.Reader.Get(ctx, req.NamespacedName, &clusterv1.ManagedCluster{})
	switch {
	case apierrors.IsNotFound(err):
		d.Forget(req.Name)
		return reconcile.Result{}, nil
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("reading ManagedCluster %q: %w", req.Name, err)
	}
	// Registered again (same name) before the deletion was seen: keep it.
	return reconcile.Result{}, nil
}
