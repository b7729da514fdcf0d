package capacityhold

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// DefaultRetention is how long a hold whose booking ended (Failed or
// Expired) is kept before the Controller deletes it, unless the agent's
// --hold-retention says otherwise. An hour is the API server's default
// --event-ttl: the hold goes with the events that explain it (its Failed
// or BookingExpired event), and until then `kubectl get capacityholds`
// still says why a booking failed or when it ended.
const DefaultRetention = time.Hour

// MinRetention is the shortest retention the agent accepts: the hub's hold
// request waits at most a minute for a hold's verdict (the reporter's
// maxHoldWait), and must find a Failed hold still there to say why.
const MinRetention = time.Minute

// EndedAt returns when a hold's booking ended, and false while it lasts
// (Pending or Active at now). A Failed hold ended when Failed turned True; an
// expired one at validUntil, or when BookingExpired turned True if that was
// earlier (validUntil moved later after the booking ended: it stays ended).
// A hold is never live again once ended (PhaseOf), so what ends is final.
func EndedAt(hold *imperatorv1alpha1.CapacityHold, now time.Time) (time.Time, bool) {
	switch PhaseOf(hold, now) {
	case PhaseFailed:
		if c := meta.FindStatusCondition(hold.Status.Conditions, imperatorv1alpha1.HoldConditionFailed); c != nil && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Time, true
		}
		// The API server requires lastTransitionTime; a condition without
		// one ended no later than the hold was made.
		return hold.CreationTimestamp.Time, true
	case PhaseExpired:
		at := hold.Spec.ValidUntil.Time
		if c := meta.FindStatusCondition(hold.Status.Conditions, imperatorv1alpha1.HoldConditionBookingExpired); c != nil &&
			c.Status == metav1.ConditionTrue && !c.LastTransitionTime.IsZero() && c.LastTransitionTime.Before(&hold.Spec.ValidUntil) {
			at = c.LastTransitionTime.Time
		}
		return at, true
	}
	return time.Time{}, false
}

// DeleteAt returns when the Controller deletes a hold: retention after its
// booking ended. While the booking lasts it is retention after validUntil,
// the earliest the booking can end unless it fails or validUntil moves
// (either is an update that queues the hold again); ended is then false and
// the time only says when to look again.
func DeleteAt(hold *imperatorv1alpha1.CapacityHold, now time.Time, retention time.Duration) (at time.Time, ended bool) {
	if end, ok := EndedAt(hold, now); ok {
		return end.Add(retention), true
	}
	return hold.Spec.ValidUntil.Add(retention), false
}

// bookingEndedChanged tells whether an update turned Failed or
// BookingExpired True (or back): the status writes the Controller must see
// to plan a deletion, among the held and claimed updates it need not.
func bookingEndedChanged(old, updated *imperatorv1alpha1.CapacityHold) bool {
	for _, t := range []string{imperatorv1alpha1.HoldConditionFailed, imperatorv1alpha1.HoldConditionBookingExpired} {
		if meta.IsStatusConditionTrue(old.Status.Conditions, t) != meta.IsStatusConditionTrue(updated.Status.Conditions, t) {
			return true
		}
	}
	return false
}
