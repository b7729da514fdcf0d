package capacityhold

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=capacityholds,verbs=get;list;watch
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=capacityholds/status,verbs=get;patch

// ReasonCapacityRestored is the reason of CapacityRevoked False once the
// units a hold lost are back on ready nodes.
const ReasonCapacityRestored = "CapacityRestored"

// Apply writes what the plan says of a hold into status. A hold already
// Failed or Expired keeps its conditions; held and claimed are always the
// plan's.
func Apply(status *imperatorv1alpha1.CapacityHoldStatus, hold *imperatorv1alpha1.CapacityHold, p HoldPlan) {
	status.ObservedGeneration = hold.Generation
	status.Held, status.Claimed = p.Held, p.Claimed
	set := func(conditionType string, s metav1.ConditionStatus, reason, message string) {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{
			Type: conditionType, Status: s, Reason: reason, Message: message, ObservedGeneration: hold.Generation,
		})
	}
	until := hold.Spec.ValidUntil.UTC().Format(time.RFC3339)
	switch p.Phase {
	case PhaseFailed:
		if !p.Decided {
			return
		}
		set(imperatorv1alpha1.HoldConditionAccepted, metav1.ConditionTrue, imperatorv1alpha1.HoldReasonAccepted,
			fmt.Sprintf("machine group %s offers %s", hold.Spec.MachineGroup, hold.Spec.MachineType))
		set(imperatorv1alpha1.HoldConditionProvisioned, metav1.ConditionFalse, p.Reason, p.Message)
		set(imperatorv1alpha1.HoldConditionFailed, metav1.ConditionTrue, p.Reason, p.Message)
	case PhaseExpired:
		if meta.IsStatusConditionTrue(status.Conditions, imperatorv1alpha1.HoldConditionBookingExpired) {
			return
		}
		message := fmt.Sprintf("validUntil %s passed: the units no guest of the hold claimed went back to everyone; claimed units stay with their guests until they finish", until)
		if !meta.IsStatusConditionTrue(status.Conditions, imperatorv1alpha1.HoldConditionAccepted) {
			message = fmt.Sprintf("validUntil %s passed before the hold was made: nothing is held", until)
		}
		set(imperatorv1alpha1.HoldConditionProvisioned, metav1.ConditionFalse, imperatorv1alpha1.HoldReasonExpired, message)
		set(imperatorv1alpha1.HoldConditionBookingExpired, metav1.ConditionTrue, imperatorv1alpha1.HoldReasonExpired, message)
	case PhaseActive:
		if p.Decided {
			set(imperatorv1alpha1.HoldConditionAccepted, metav1.ConditionTrue, imperatorv1alpha1.HoldReasonAccepted, p.Message)
		}
		if p.Revoked > 0 {
			set(imperatorv1alpha1.HoldConditionProvisioned, metav1.ConditionFalse, imperatorv1alpha1.HoldReasonNodeLeftPool, p.Message)
			set(imperatorv1alpha1.HoldConditionCapacityRevoked, metav1.ConditionTrue, imperatorv1alpha1.HoldReasonNodeLeftPool, p.Message)
			return
		}
		set(imperatorv1alpha1.HoldConditionProvisioned, metav1.ConditionTrue, imperatorv1alpha1.HoldReasonUnitsHeld,
			fmt.Sprintf("all %d units of %s are held or claimed until %s", hold.Spec.Count, hold.Spec.MachineType, until))
		if meta.FindStatusCondition(status.Conditions, imperatorv1alpha1.HoldConditionCapacityRevoked) != nil {
			set(imperatorv1alpha1.HoldConditionCapacityRevoked, metav1.ConditionFalse, ReasonCapacityRestored,
				"the units lost to nodes that left the ready pool are held again")
		}
	}
}

// Write patches the status the plan gives a hold, when it changed, with the
// resourceVersion the hold was read at: a decision made on a stale copy is
// refused (Conflict) and made again by the next reconcile, which the
// write of the winner triggers. Conditions that turn True are sent as
// events on the hold (Warning for Failed and CapacityRevoked).
func Write(ctx context.Context, c client.Client, recorder events.EventRecorder, hold *imperatorv1alpha1.CapacityHold, p HoldPlan) (bool, error) {
	updated := hold.DeepCopy()
	Apply(&updated.Status, updated, p)
	if equality.Semantic.DeepEqual(hold.Status, updated.Status) {
		return false, nil
	}
	if err := c.Status().Patch(ctx, updated, client.MergeFromWithOptions(hold, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			ctrl.LoggerFrom(ctx).V(1).Info("CapacityHold changed or is gone, its status is left to the next reconcile", "capacityHold", klog.KObj(hold))
			return false, err
		}
		return false, fmt.Errorf("patching the status of CapacityHold %s: %w", hold.Name, err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Wrote CapacityHold status", "capacityHold", klog.KObj(hold), "phase", p.Phase, "held", p.Held, "claimed", p.Claimed)
	for _, t := range []string{imperatorv1alpha1.HoldConditionProvisioned, imperatorv1alpha1.HoldConditionFailed,
		imperatorv1alpha1.HoldConditionBookingExpired, imperatorv1alpha1.HoldConditionCapacityRevoked} {
		was := meta.FindStatusCondition(hold.Status.Conditions, t)
		now := meta.FindStatusCondition(updated.Status.Conditions, t)
		if now == nil || now.Status != metav1.ConditionTrue || (was != nil && was.Status == metav1.ConditionTrue) {
			continue
		}
		eventType := corev1.EventTypeNormal
		if t == imperatorv1alpha1.HoldConditionFailed || t == imperatorv1alpha1.HoldConditionCapacityRevoked {
			eventType = corev1.EventTypeWarning
		}
		recorder.Eventf(updated, nil, eventType, now.Reason, "Hold", "%s", now.Message)
	}
	*hold = *updated
	return true, nil
}
