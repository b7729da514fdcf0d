package provisioningrequest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

func TestFromHolds(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	cond := func(conditionType string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
		return metav1.Condition{Type: conditionType, Status: status, Reason: reason, Message: message}
	}
	// revokedSince is the hold's CapacityRevoked condition, True since ago.
	revokedSince := func(ago time.Duration) metav1.Condition {
		c := cond(imperatorv1alpha1.HoldConditionCapacityRevoked, metav1.ConditionTrue, imperatorv1alpha1.HoldReasonNodeLeftPool, "node kasumi left the ready pool")
		c.LastTransitionTime = metav1.NewTime(now.Add(-ago))
		return c
	}
	hold := func(conditions ...metav1.Condition) *imperatorv1alpha1.CapacityHold {
		return &imperatorv1alpha1.CapacityHold{Spec: imperatorv1alpha1.CapacityHoldSpec{MachineGroup: "g", MachineType: "t", Count: 2},
			Status: imperatorv1alpha1.CapacityHoldStatus{Conditions: conditions}}
	}
	provisioned := cond(imperatorv1alpha1.HoldConditionProvisioned, metav1.ConditionTrue, imperatorv1alpha1.HoldReasonUnitsHeld, "")
	accepted := cond(ConditionAccepted, metav1.ConditionTrue, ReasonAccepted, "served by the Imperator agent with CapacityHolds")
	waiting := cond(ConditionProvisioned, metav1.ConditionFalse, ReasonWaitingForHold, "waiting for CapacityHolds h1 to hold their units")
	requestProvisioned := cond(ConditionProvisioned, metav1.ConditionTrue, ReasonProvisioned, "CapacityHolds h1 hold every unit")
	cases := map[string]struct {
		conditions     []metav1.Condition
		holds          map[string]*imperatorv1alpha1.CapacityHold
		wantConditions []metav1.Condition
		wantRelease    []string
		wantRecheck    time.Duration
	}{
		"a hold not decided yet leaves the request waiting": {
			conditions:     []metav1.Condition{accepted, waiting},
			holds:          map[string]*imperatorv1alpha1.CapacityHold{"h1": hold()},
			wantConditions: []metav1.Condition{accepted, waiting},
		},
		"every hold provisioned provisions the request": {
			conditions:     []metav1.Condition{accepted, waiting},
			holds:          map[string]*imperatorv1alpha1.CapacityHold{"h1": hold(provisioned)},
			wantConditions: []metav1.Condition{accepted, requestProvisioned},
		},
		"a failed hold fails the request with its reason, and every hold is released": {
			conditions: []metav1.Condition{accepted, waiting},
			holds: map[string]*imperatorv1alpha1.CapacityHold{"h1": hold(cond(imperatorv1alpha1.HoldConditionFailed, metav1.ConditionTrue,
				imperatorv1alpha1.HoldReasonNotEnoughFreeUnits, "2 asked, 1 free"))},
			wantConditions: []metav1.Condition{accepted,
				cond(ConditionProvisioned, metav1.ConditionFalse, imperatorv1alpha1.HoldReasonNotEnoughFreeUnits, "CapacityHold h1 (2 of g/t): 2 asked, 1 free"),
				cond(ConditionFailed, metav1.ConditionTrue, imperatorv1alpha1.HoldReasonNotEnoughFreeUnits, "CapacityHold h1 (2 of g/t): 2 asked, 1 free")},
			wantRelease: []string{"h1"},
		},
		"an expired hold expires the booking": {
			conditions: []metav1.Condition{accepted, requestProvisioned},
			holds: map[string]*imperatorv1alpha1.CapacityHold{"h1": hold(provisioned, cond(imperatorv1alpha1.HoldConditionBookingExpired,
				metav1.ConditionTrue, imperatorv1alpha1.HoldReasonExpired, "validUntil passed"))},
			wantConditions: []metav1.Condition{accepted, requestProvisioned,
				cond(ConditionBookingExpired, metav1.ConditionTrue, imperatorv1alpha1.HoldReasonExpired, "CapacityHold h1: validUntil passed")},
		},
		"a provisioned hold that is gone expires the booking": {
			conditions: []metav1.Condition{accepted, requestProvisioned},
			wantConditions: []metav1.Condition{accepted, requestProvisioned,
				cond(ConditionBookingExpired, metav1.ConditionTrue, ReasonHoldGone, "CapacityHold h1 is gone: its units went back to everyone")},
		},
		"a hold's units lost for the grace period revoke the request's capacity": {
			conditions: []metav1.Condition{accepted, requestProvisioned},
			holds:      map[string]*imperatorv1alpha1.CapacityHold{"h1": hold(provisioned, revokedSince(RevokedGrace))},
			wantConditions: []metav1.Condition{accepted, requestProvisioned,
				cond(ConditionCapacityRevoked, metav1.ConditionTrue, imperatorv1alpha1.HoldReasonNodeLeftPool, "CapacityHold h1: node kasumi left the ready pool")},
		},
		"a hold's units lost for a moment (Kueue would end the running job) revoke nothing yet, and the request is looked at when the grace ends": {
			conditions:     []metav1.Condition{accepted, requestProvisioned},
			holds:          map[string]*imperatorv1alpha1.CapacityHold{"h1": hold(provisioned, revokedSince(time.Minute))},
			wantConditions: []metav1.Condition{accepted, requestProvisioned},
			wantRecheck:    RevokedGrace - time.Minute,
		},
		"a hold whose booking expired while its units were lost revokes nothing": {
			conditions: []metav1.Condition{accepted, requestProvisioned},
			holds: map[string]*imperatorv1alpha1.CapacityHold{"h1": hold(provisioned, revokedSince(time.Hour), cond(imperatorv1alpha1.HoldConditionBookingExpired,
				metav1.ConditionTrue, imperatorv1alpha1.HoldReasonExpired, "validUntil passed"))},
			wantConditions: []metav1.Condition{accepted, requestProvisioned,
				cond(ConditionBookingExpired, metav1.ConditionTrue, imperatorv1alpha1.HoldReasonExpired, "CapacityHold h1: validUntil passed")},
		},
		"capacity restored turns CapacityRevoked False": {
			conditions: []metav1.Condition{accepted, requestProvisioned, cond(ConditionCapacityRevoked, metav1.ConditionTrue, imperatorv1alpha1.HoldReasonNodeLeftPool, "x")},
			holds:      map[string]*imperatorv1alpha1.CapacityHold{"h1": hold(provisioned)},
			wantConditions: []metav1.Condition{accepted, requestProvisioned,
				cond(ConditionCapacityRevoked, metav1.ConditionFalse, ReasonNotRevoked, "every unit is held again")},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pr := &ProvisioningRequest{Status: ProvisioningRequestStatus{Conditions: tc.conditions,
				ProvisioningClassDetails: map[string]string{HoldsDetail: "h1"}}}
			release, recheck := FromHolds(pr, tc.holds, now)
			if recheck != tc.wantRecheck {
				t.Errorf("recheck = %s, want %s", recheck, tc.wantRecheck)
			}
			if diff := cmp.Diff(tc.wantConditions, pr.Status.Conditions, cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantRelease, release); diff != "" {
				t.Errorf("release (-want +got):\n%s", diff)
			}
		})
	}
}
