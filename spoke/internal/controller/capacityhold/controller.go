package capacityhold

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// ControllerName names the controller in logs and events.
const ControllerName = "imperator-capacityhold"

// machineGrace is how long after its creation a hold whose Machine type the
// cache does not show waits before it is Failed: a Machine created at the
// same moment may not have reached the cache yet.
const machineGrace = 5 * time.Second

// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=machines,verbs=get;list;watch
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=capacityholds,verbs=delete

// Controller looks after what no Machine decides about holds: it marks
// Failed, with MachineTypeNotFound, the holds of a type no Machine of
// spec.machineGroup offers, and deletes the holds whose booking ended
// (Failed or Expired) once retention has passed. Every other decision is
// the Machine controller's (see the package doc).
type Controller struct {
	mgr       mcmanager.Manager
	now       func() time.Time
	retention time.Duration
}

// Option configures the Controller.
type Option func(*Controller)

// WithRetention sets how long a hold whose booking ended is kept before it
// is deleted (DefaultRetention when not given).
func WithRetention(retention time.Duration) Option {
	return func(r *Controller) { r.retention = retention }
}

// WithClock sets the clock whose instants are compared with the holds'
// validUntil (the system clock when not given): the agent's one clock,
// from which the reporter sets validUntil (config.Config.Clock).
func WithClock(c clock.PassiveClock) Option {
	return func(r *Controller) { r.now = c.Now }
}

// SetupWithManager registers the Controller with a multi-cluster manager.
func SetupWithManager(mgr mcmanager.Manager, opts ...Option) error {
	r := &Controller{mgr: mgr, now: time.Now, retention: DefaultRetention}
	for _, o := range opts {
		o(r)
	}
	copts := controller.TypedOptions[mcreconcile.Request]{}
	copts.DefaultFromConfig(mgr.GetControllerOptions())
	err := mcbuilder.ControllerManagedBy(mgr).
		Named("capacityhold").
		For(&imperatorv1alpha1.CapacityHold{}, mcbuilder.WithPredicates(specOrBookingEndChanged)).
		WithOptions(copts).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up the capacity hold controller: %w", err)
	}
	return nil
}

// specOrBookingEndChanged lets through the updates that change what the
// Controller decides: a new spec (validUntil moved), or the booking's end
// (Failed, BookingExpired). The Machine controller's writes of held and
// claimed are left out.
var specOrBookingEndChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*imperatorv1alpha1.CapacityHold)
	updated, okNew := e.ObjectNew.(*imperatorv1alpha1.CapacityHold)
	if !okOld || !okNew {
		return true
	}
	return old.Generation != updated.Generation || bookingEndedChanged(old, updated)
}}

// Reconcile deletes a hold whose booking ended retention ago, fails a hold
// not decided yet whose type no Machine offers once machineGrace passed
// since its creation, and otherwise comes back when the hold is due for
// deletion.
func (r *Controller) Reconcile(ctx context.Context, req mcreconcile.Request) (ctrl.Result, error) {
	cl, err := r.mgr.GetCluster(ctx, req.ClusterName)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("getting cluster %q: %w", req.ClusterName, err)
	}
	hold := &imperatorv1alpha1.CapacityHold{}
	if err := cl.GetClient().Get(ctx, req.NamespacedName, hold); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !hold.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	now := r.now()
	deleteAt, ended := DeleteAt(hold, now, r.retention)
	if ended && !now.Before(deleteAt) {
		return ctrl.Result{}, r.deleteEnded(ctx, cl.GetClient(), hold, deleteAt.Add(-r.retention))
	}
	result, err := r.failUnoffered(ctx, cl, hold, now)
	// Come back when the hold is due for deletion, or sooner if asked.
	if untilDelete := deleteAt.Sub(now); result.RequeueAfter == 0 || untilDelete < result.RequeueAfter {
		result.RequeueAfter = untilDelete
	}
	return result, err
}

// deleteEnded deletes a hold whose booking ended, this very hold (UID
// precondition): a hold of the same name made since is another booking.
// The units its guests claimed stay with them: they count as the type's
// used units, as any guest's (PlanType).
func (r *Controller) deleteEnded(ctx context.Context, c client.Client, hold *imperatorv1alpha1.CapacityHold, endedAt time.Time) error {
	if err := c.Delete(ctx, hold, client.Preconditions{UID: &hold.UID}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return fmt.Errorf("deleting CapacityHold %s, whose booking ended: %w", hold.Name, err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Deleted a CapacityHold whose booking ended", "capacityHold", klog.KObj(hold),
		"endedAt", endedAt, "retention", r.retention)
	return nil
}

// failUnoffered marks Failed, with MachineTypeNotFound, a hold not decided
// yet whose type no Machine of its group offers, once machineGrace passed
// since its creation.
func (r *Controller) failUnoffered(ctx context.Context, cl cluster.Cluster, hold *imperatorv1alpha1.CapacityHold, now time.Time) (ctrl.Result, error) {
	if PhaseOf(hold, now) != PhasePending {
		return ctrl.Result{}, nil
	}
	c := cl.GetClient()
	offered, err := Offered(ctx, c, hold.Spec.MachineGroup, hold.Spec.MachineType)
	if err != nil || offered {
		return ctrl.Result{}, err
	}
	if wait := hold.CreationTimestamp.Add(machineGrace).Sub(now); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	before := hold.DeepCopy()
	message := fmt.Sprintf("no Machine of machine group %s offers machine type %s: nothing is held", hold.Spec.MachineGroup, hold.Spec.MachineType)
	for _, t := range []string{imperatorv1alpha1.HoldConditionAccepted, imperatorv1alpha1.HoldConditionProvisioned} {
		meta.SetStatusCondition(&hold.Status.Conditions, metav1.Condition{Type: t, Status: metav1.ConditionFalse,
			Reason: imperatorv1alpha1.HoldReasonMachineTypeNotFound, Message: message, ObservedGeneration: hold.Generation})
	}
	meta.SetStatusCondition(&hold.Status.Conditions, metav1.Condition{Type: imperatorv1alpha1.HoldConditionFailed, Status: metav1.ConditionTrue,
		Reason: imperatorv1alpha1.HoldReasonMachineTypeNotFound, Message: message, ObservedGeneration: hold.Generation})
	hold.Status.ObservedGeneration, hold.Status.Held, hold.Status.Claimed = hold.Generation, 0, 0
	if equality.Semantic.DeepEqual(before.Status, hold.Status) {
		return ctrl.Result{}, nil
	}
	if err := c.Status().Patch(ctx, hold, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// The hold changed since the cache gave it to us (its event
			// queues it again) or is gone: nothing to retry here.
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("patching the status of CapacityHold %s: %w", hold.Name, err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("CapacityHold of a machine type no Machine offers failed", "capacityHold", klog.KObj(hold))
	cl.GetEventRecorder(ControllerName).Eventf(hold, nil, "Warning", imperatorv1alpha1.HoldReasonMachineTypeNotFound, "Hold", "%s", message)
	// Failed now: its deletion is retention away (the write's event,
	// which the predicate lets through, says so too).
	return ctrl.Result{RequeueAfter: r.retention}, nil
}

// Offered tells whether a Machine of group lists machineType in
// spec.machineTypes.
func Offered(ctx context.Context, c client.Reader, group, machineType string) (bool, error) {
	machines := &imperatorv1alpha1.MachineList{}
	if err := c.List(ctx, machines, client.MatchingLabels{imperatorv1alpha1.MachineGroupKey: group}); err != nil {
		return false, fmt.Errorf("listing the Machines of machine group %s: %w", group, err)
	}
	for _, m := range machines.Items {
		if slices.ContainsFunc(m.Spec.MachineTypes, func(t imperatorv1alpha1.MachineType) bool { return t.Name == machineType }) {
			return true, nil
		}
	}
	return false, nil
}
