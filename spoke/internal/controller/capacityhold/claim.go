package capacityhold

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// ClaimOf returns the name of the hold a guest quotes: its
// imperator.tenzen-y.io/hold label, else, for a ProvisioningRequest consumer
// of the class imperator.tenzen-y.io/capacity-hold, the request it consumes.
// It returns "" for a guest that quotes none.
func ClaimOf(pod *corev1.Pod) string {
	if name := pod.Labels[imperatorv1alpha1.HoldKey]; name != "" {
		return name
	}
	if pod.Annotations[imperatorv1alpha1.ProvisioningClassNameAnnotation] == imperatorv1alpha1.CapacityHoldProvisioningClass {
		return pod.Annotations[imperatorv1alpha1.ConsumeProvisioningRequestAnnotation]
	}
	return ""
}

// Allows tells whether guests of namespace may claim the hold: every
// namespace when spec.namespaces is empty.
func Allows(hold *imperatorv1alpha1.CapacityHold, namespace string) bool {
	return len(hold.Spec.Namespaces) == 0 || slices.Contains(hold.Spec.Namespaces, namespace)
}

// Order orders holds as they are decided: by creation timestamp, then UID,
// so that every reconcile, and every agent replica, decides them alike.
func Order(a, b *imperatorv1alpha1.CapacityHold) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Compare(a.UID, b.UID)
}
