package provisioningrequest

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// HoldsDetail is the key of status.provisioningClassDetails listing the
// CapacityHolds that serve the request, comma-separated: they are decided
// once, when the request is accepted.
const HoldsDetail = "capacityHolds"

// Reasons of the request's conditions beyond the mapping's and the holds'.
const (
	ReasonAccepted       = "Accepted"
	ReasonWaitingForHold = "WaitingForCapacityHold"
	ReasonProvisioned    = "Provisioned"
	ReasonHoldGone       = "CapacityHoldGone"
	ReasonNotRevoked     = "CapacityRestored"
)

// RevokedGrace is how long a hold's units must stay lost (its
// CapacityRevoked condition True) before the request is told
// CapacityRevoked. Kueue rejects the admission check on CapacityRevoked and
// deactivates the Workload, even one whose pods run: as Cluster Autoscaler,
// which says so only when the booked nodes are really gone, a node that
// leaves the ready pool for a moment (a kubelet restart, a short
// maintenance) must not end a job.
const RevokedGrace = 5 * time.Minute

// Final tells whether the request's booking ended (Failed or
// BookingExpired True): nothing more is held for it.
func Final(pr *ProvisioningRequest) bool {
	return meta.IsStatusConditionTrue(pr.Status.Conditions, ConditionFailed) ||
		meta.IsStatusConditionTrue(pr.Status.Conditions, ConditionBookingExpired)
}

// ProvisionedOnce tells whether the request was ever Provisioned: its
// holds are then never made again.
func ProvisionedOnce(pr *ProvisioningRequest) bool {
	return meta.IsStatusConditionTrue(pr.Status.Conditions, ConditionProvisioned)
}

// HoldNames are the holds recorded in status.provisioningClassDetails.
func HoldNames(pr *ProvisioningRequest) []string {
	if v := pr.Status.ProvisioningClassDetails[HoldsDetail]; v != "" {
		return strings.Split(v, ",")
	}
	return nil
}

// setCondition sets a condition of the request at its generation.
func setCondition(pr *ProvisioningRequest, conditionType string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&pr.Status.Conditions, metav1.Condition{Type: conditionType, Status: status, Reason: reason,
		Message: message, ObservedGeneration: pr.Generation})
}

// Refuse marks the request Failed for refusal: it is accepted (the class is
// ours) and nothing is held.
func Refuse(pr *ProvisioningRequest, refusal *Refusal) {
	setCondition(pr, ConditionAccepted, metav1.ConditionTrue, ReasonAccepted, "served by the Imperator agent with CapacityHolds")
	setCondition(pr, ConditionProvisioned, metav1.ConditionFalse, refusal.Reason, refusal.Message)
	setCondition(pr, ConditionFailed, metav1.ConditionTrue, refusal.Reason, refusal.Message)
}

// Accept records the holds that serve the request and marks it Accepted,
// not Provisioned yet.
func Accept(pr *ProvisioningRequest, holds []string) {
	if pr.Status.ProvisioningClassDetails == nil {
		pr.Status.ProvisioningClassDetails = map[string]string{}
	}
	pr.Status.ProvisioningClassDetails[HoldsDetail] = strings.Join(holds, ",")
	setCondition(pr, ConditionAccepted, metav1.ConditionTrue, ReasonAccepted, "served by the Imperator agent with CapacityHolds")
	if !ProvisionedOnce(pr) {
		setCondition(pr, ConditionProvisioned, metav1.ConditionFalse, ReasonWaitingForHold,
			fmt.Sprintf("waiting for CapacityHolds %s to hold their units", strings.Join(holds, ", ")))
	}
}

// FromHolds sets the request's Provisioned, Failed, BookingExpired and
// CapacityRevoked conditions from the holds that serve it (by name; a
// missing name is a hold that is gone), as the package doc says, at now. It
// returns the holds to release (every hold, once the request failed) and,
// when a hold's units are lost but not for RevokedGrace yet, how long until
// the request must be looked at again.
func FromHolds(pr *ProvisioningRequest, holds map[string]*imperatorv1alpha1.CapacityHold, now time.Time) (release []string, recheck time.Duration) {
	names := HoldNames(pr)
	var revoked []string
	for _, name := range names {
		hold, ok := holds[name]
		if !ok {
			if ProvisionedOnce(pr) {
				setCondition(pr, ConditionBookingExpired, metav1.ConditionTrue, ReasonHoldGone,
					fmt.Sprintf("CapacityHold %s is gone: its units went back to everyone", name))
			}
			continue
		}
		if failed := meta.FindStatusCondition(hold.Status.Conditions, imperatorv1alpha1.HoldConditionFailed); failed != nil && failed.Status == metav1.ConditionTrue && !ProvisionedOnce(pr) {
			message := fmt.Sprintf("CapacityHold %s (%d of %s/%s): %s", name, hold.Spec.Count, hold.Spec.MachineGroup, hold.Spec.MachineType, failed.Message)
			setCondition(pr, ConditionProvisioned, metav1.ConditionFalse, failed.Reason, message)
			setCondition(pr, ConditionFailed, metav1.ConditionTrue, failed.Reason, message)
			return names, 0
		}
		if expired := meta.FindStatusCondition(hold.Status.Conditions, imperatorv1alpha1.HoldConditionBookingExpired); expired != nil && expired.Status == metav1.ConditionTrue {
			setCondition(pr, ConditionBookingExpired, metav1.ConditionTrue, expired.Reason,
				fmt.Sprintf("CapacityHold %s: %s", name, expired.Message))
			// A booking that ended holds nothing: a revocation it kept
			// from before revokes nothing.
			continue
		}
		if c := meta.FindStatusCondition(hold.Status.Conditions, imperatorv1alpha1.HoldConditionCapacityRevoked); c != nil && c.Status == metav1.ConditionTrue {
			if wait := c.LastTransitionTime.Add(RevokedGrace).Sub(now); wait > 0 {
				if recheck == 0 || wait < recheck {
					recheck = wait
				}
				continue
			}
			revoked = append(revoked, fmt.Sprintf("CapacityHold %s: %s", name, c.Message))
		}
	}
	switch {
	case len(revoked) > 0:
		setCondition(pr, ConditionCapacityRevoked, metav1.ConditionTrue, imperatorv1alpha1.HoldReasonNodeLeftPool, strings.Join(revoked, "; "))
	case meta.FindStatusCondition(pr.Status.Conditions, ConditionCapacityRevoked) != nil:
		setCondition(pr, ConditionCapacityRevoked, metav1.ConditionFalse, ReasonNotRevoked, "every unit is held again")
	}
	if !ProvisionedOnce(pr) && len(names) > 0 && !slices.ContainsFunc(names, func(name string) bool {
		hold, ok := holds[name]
		return !ok || !meta.IsStatusConditionTrue(hold.Status.Conditions, imperatorv1alpha1.HoldConditionProvisioned)
	}) {
		setCondition(pr, ConditionProvisioned, metav1.ConditionTrue, ReasonProvisioned,
			fmt.Sprintf("CapacityHolds %s hold every unit", strings.Join(names, ", ")))
	}
	return nil, recheck
}
