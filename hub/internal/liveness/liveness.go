// Package liveness turns spoke clusters that stopped heartbeating Unknown.
// It is a controller-runtime controller on every replica, fed with the
// store's clusters (store.Source): each reconcile turns a cluster silent
// past the grace period Unknown, and otherwise asks to look again just when
// the grace period will run out (RequeueAfter), so a silent cluster goes
// Unknown within a reconcile of its deadline without polling the fleet. The
// store notifies the persister of every change.
package liveness

import (
	"context"

	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/imperator-federation/imperator/hub/internal/store"
)

// Reconciler evaluates one cluster's liveness.
type Reconciler struct {
	Store *store.Store
}

// SetupWithManager runs the controller on every replica, leader or not:
// each keeps its own index current.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return builder.TypedControllerManagedBy[reconcile.Request](mgr).
		Named("cluster-liveness").
		WatchesRawSource(r.Store.Source()).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), RecoverPanic: ptr.To(true), MaxConcurrentReconciles: 1}).
		Complete(r)
}

// Reconcile turns the cluster Unknown when it was silent past the grace
// period, and looks again when the grace period will have run out.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	changed, recheck := r.Store.EvaluateLivenessOf(req.Name)
	if changed {
		if c, ok := r.Store.Get(req.Name); ok {
			ctrl.LoggerFrom(ctx).Info("Cluster liveness changed", "cluster", req.Name, "liveness", c.Liveness, "lastHeartbeat", c.LastHeartbeat)
		}
	}
	return reconcile.Result{RequeueAfter: recheck}, nil
}
