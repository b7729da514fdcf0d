package holds

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// TestAFleetHoldIsLookedAtAgainWhenItsPhaseIsDue: the expiry controller
// comes back to a Held hold at validUntil and to a Pending one when it
// would be judged orphaned, never sooner than a second, and not to a hold
// whose phase is final.
func TestAFleetHoldIsLookedAtAgainWhenItsPhaseIsDue(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	c := New(Options{Clock: clocktesting.NewFakePassiveClock(now), Deadline: 10 * time.Second})
	hold := func(phase imperatorv1alpha1.FleetHoldPhase, created, validUntil time.Time) *imperatorv1alpha1.FleetHold {
		return &imperatorv1alpha1.FleetHold{
			ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)},
			Spec:       imperatorv1alpha1.FleetHoldSpec{ValidUntil: metav1.NewTime(validUntil)},
			Status:     imperatorv1alpha1.FleetHoldStatus{Phase: phase},
		}
	}
	cases := map[string]struct {
		hold *imperatorv1alpha1.FleetHold
		want time.Duration
	}{
		"held: at validUntil":                 {hold(imperatorv1alpha1.FleetHoldHeld, now.Add(-time.Minute), now.Add(15*time.Minute)), 15 * time.Minute},
		"held past validUntil: at once (1 s)": {hold(imperatorv1alpha1.FleetHoldHeld, now.Add(-time.Hour), now.Add(-time.Minute)), time.Second},
		"pending: when it would be orphaned":  {hold(imperatorv1alpha1.FleetHoldPending, now.Add(-20*time.Second), now.Add(time.Hour)), 40 * time.Second},
		"no phase yet: as pending":            {hold("", now, now.Add(time.Hour)), 60 * time.Second},
		"expired: final, never again":         {hold(imperatorv1alpha1.FleetHoldExpired, now.Add(-time.Hour), now.Add(-time.Minute)), 0},
		"released: final, never again":        {hold(imperatorv1alpha1.FleetHoldReleased, now.Add(-time.Hour), now.Add(time.Hour)), 0},
		"failed: final, never again":          {hold(imperatorv1alpha1.FleetHoldFailed, now.Add(-time.Hour), now.Add(time.Hour)), 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := c.nextDeadline(tc.hold); got != tc.want {
				t.Errorf("nextDeadline = %s, want %s", got, tc.want)
			}
		})
	}
}
