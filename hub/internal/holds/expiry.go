package holds

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// Expiry is the leader's controller that moves a fleet hold to its final
// phase when its time comes, whether anyone reads it or not: a Held hold
// to Expired at validUntil, a Pending hold whose coordinating replica
// stopped to Failed (see settle). It looks at each hold when it changes
// and again just when its next deadline passes (RequeueAfter), so that
// `imperatorctl hold list` and every replica's Get see the phase the
// spokes already act on, and a watch of FleetHolds sees it change.
type Expiry struct {
	Coordinator *Coordinator
}

// SetupWithManager runs the controller on mgr on every replica; its cache
// must hold FleetHolds of the hub's namespace. Two replicas settling one
// hold write the same phase: each reads the hold from the API server first
// (the Coordinator's client is uncached), so the second finds it settled
// and writes nothing.
func (e *Expiry) SetupWithManager(mgr ctrl.Manager) error {
	ns := e.Coordinator.opts.Namespace
	return builder.ControllerManagedBy(mgr).
		Named("fleethold-expiry").
		For(&imperatorv1alpha1.FleetHold{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == ns
		}))).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), RecoverPanic: ptr.To(true), MaxConcurrentReconciles: 1}).
		Complete(e)
}

// Reconcile settles the hold and asks to look again at its next deadline.
func (e *Expiry) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	c := e.Coordinator
	fh := &imperatorv1alpha1.FleetHold{}
	if err := c.opts.Client.Get(ctx, req.NamespacedName, fh); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	if err := c.settle(ctx, fh); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: c.nextDeadline(fh)}, nil
}

// nextDeadline is how long until settle would change fh, at least a
// second; 0 when its phase is final.
func (c *Coordinator) nextDeadline(fh *imperatorv1alpha1.FleetHold) time.Duration {
	now := c.opts.Clock.Now()
	var at time.Time
	switch fh.Status.Phase {
	case imperatorv1alpha1.FleetHoldHeld:
		at = fh.Spec.ValidUntil.Time
	case "", imperatorv1alpha1.FleetHoldPending:
		at = fh.CreationTimestamp.Add(c.orphanAfter())
	default:
		return 0
	}
	return max(at.Sub(now), time.Second)
}
