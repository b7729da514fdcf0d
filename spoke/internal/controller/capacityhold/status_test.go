package capacityhold

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// conditionSummary is a condition without its transition time.
type conditionSummary struct {
	Status  metav1.ConditionStatus
	Reason  string
	Message string
}

func TestApply(t *testing.T) {
	until := "2026-11-25T12:10:00Z"
	cases := map[string]struct {
		hold           *imperatorv1alpha1.CapacityHold
		plan           HoldPlan
		wantHeld       int32
		wantClaimed    int32
		wantConditions map[string]conditionSummary
	}{
		"accepted now: Accepted and Provisioned": {
			hold:     makeHold("train", 2).obj(),
			plan:     HoldPlan{Phase: PhaseActive, Decided: true, Held: 2, Message: "Machine general-machine offers compute-small: 2 units held"},
			wantHeld: 2,
			wantConditions: map[string]conditionSummary{
				imperatorv1alpha1.HoldConditionAccepted: {metav1.ConditionTrue, imperatorv1alpha1.HoldReasonAccepted, "Machine general-machine offers compute-small: 2 units held"},
				imperatorv1alpha1.HoldConditionProvisioned: {metav1.ConditionTrue, imperatorv1alpha1.HoldReasonUnitsHeld,
					"all 2 units of compute-small are held or claimed until " + until},
			},
		},
		"failed now: Failed with the numbers, not Provisioned": {
			hold:     makeHold("big", 5).obj(),
			plan:     HoldPlan{Phase: PhaseFailed, Decided: true, Reason: imperatorv1alpha1.HoldReasonNotEnoughFreeUnits, Message: "5 asked, 4 free"},
			wantHeld: 0,
			wantConditions: map[string]conditionSummary{
				imperatorv1alpha1.HoldConditionAccepted:    {metav1.ConditionTrue, imperatorv1alpha1.HoldReasonAccepted, "machine group general-machine offers compute-small"},
				imperatorv1alpha1.HoldConditionProvisioned: {metav1.ConditionFalse, imperatorv1alpha1.HoldReasonNotEnoughFreeUnits, "5 asked, 4 free"},
				imperatorv1alpha1.HoldConditionFailed:      {metav1.ConditionTrue, imperatorv1alpha1.HoldReasonNotEnoughFreeUnits, "5 asked, 4 free"},
			},
		},
		"revoked: CapacityRevoked, not Provisioned, held shrinks": {
			hold:        makeHold("train", 2).accepted().obj(),
			plan:        HoldPlan{Phase: PhaseActive, Held: 0, Claimed: 1, Revoked: 1, Message: "1 of 2 units lost"},
			wantClaimed: 1,
			wantConditions: map[string]conditionSummary{
				imperatorv1alpha1.HoldConditionAccepted:        {metav1.ConditionTrue, "Test", ""},
				imperatorv1alpha1.HoldConditionProvisioned:     {metav1.ConditionFalse, imperatorv1alpha1.HoldReasonNodeLeftPool, "1 of 2 units lost"},
				imperatorv1alpha1.HoldConditionCapacityRevoked: {metav1.ConditionTrue, imperatorv1alpha1.HoldReasonNodeLeftPool, "1 of 2 units lost"},
			},
		},
		"restored: CapacityRevoked False, Provisioned again": {
			hold:     makeHold("train", 2).accepted().condition(imperatorv1alpha1.HoldConditionCapacityRevoked).obj(),
			plan:     HoldPlan{Phase: PhaseActive, Held: 2},
			wantHeld: 2,
			wantConditions: map[string]conditionSummary{
				imperatorv1alpha1.HoldConditionAccepted: {metav1.ConditionTrue, "Test", ""},
				imperatorv1alpha1.HoldConditionProvisioned: {metav1.ConditionTrue, imperatorv1alpha1.HoldReasonUnitsHeld,
					"all 2 units of compute-small are held or claimed until " + until},
				imperatorv1alpha1.HoldConditionCapacityRevoked: {metav1.ConditionFalse, ReasonCapacityRestored,
					"the units lost to nodes that left the ready pool are held again"},
			},
		},
		"expired: BookingExpired, claimed units stay with their guests": {
			hold:        makeHold("train", 2).accepted().obj(),
			plan:        HoldPlan{Phase: PhaseExpired, Claimed: 1},
			wantClaimed: 1,
			wantConditions: map[string]conditionSummary{
				imperatorv1alpha1.HoldConditionAccepted: {metav1.ConditionTrue, "Test", ""},
				imperatorv1alpha1.HoldConditionProvisioned: {metav1.ConditionFalse, imperatorv1alpha1.HoldReasonExpired,
					"validUntil " + until + " passed: the units no guest of the hold claimed went back to everyone; claimed units stay with their guests until they finish"},
				imperatorv1alpha1.HoldConditionBookingExpired: {metav1.ConditionTrue, imperatorv1alpha1.HoldReasonExpired,
					"validUntil " + until + " passed: the units no guest of the hold claimed went back to everyone; claimed units stay with their guests until they finish"},
			},
		},
		"expired before it was made: nothing held": {
			hold: makeHold("late", 1).obj(),
			plan: HoldPlan{Phase: PhaseExpired},
			wantConditions: map[string]conditionSummary{
				imperatorv1alpha1.HoldConditionProvisioned: {metav1.ConditionFalse, imperatorv1alpha1.HoldReasonExpired,
					"validUntil " + until + " passed before the hold was made: nothing is held"},
				imperatorv1alpha1.HoldConditionBookingExpired: {metav1.ConditionTrue, imperatorv1alpha1.HoldReasonExpired,
					"validUntil " + until + " passed before the hold was made: nothing is held"},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			status := tc.hold.Status.DeepCopy()
			tc.plan.Hold = tc.hold
			Apply(status, tc.hold, tc.plan)
			got := map[string]conditionSummary{}
			for _, c := range status.Conditions {
				got[c.Type] = conditionSummary{c.Status, c.Reason, c.Message}
			}
			if diff := cmp.Diff(tc.wantConditions, got); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if status.Held != tc.wantHeld || status.Claimed != tc.wantClaimed {
				t.Errorf("held, claimed = %d, %d; want %d, %d", status.Held, status.Claimed, tc.wantHeld, tc.wantClaimed)
			}
		})
	}
}
