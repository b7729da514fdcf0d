package capacityhold

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// ClaimOf returns the UID of the hold a guest claims: its
// imperator.tenzen-y.io/hold-uid annotation, which only the Pod Resource
// Injector sets (at the guest's creation, from the hold it named, when that
// hold existed) and only the agent may change afterwards. It returns "" for a
// guest that claims none, whatever name it quotes: a guest created before
// its hold, or before a hold of the same name was created again, carries no
// UID of that hold and so is an ordinary guest.
func ClaimOf(pod *corev1.Pod) types.UID {
	return types.UID(pod.Annotations[imperatorv1alpha1.HoldUIDAnnotation])
}

// Claims tells whether pod claims hold: it carries the hold's UID and the
// hold allows its namespace. The caller checks the hold's phase, machine
// group and type.
func Claims(hold *imperatorv1alpha1.CapacityHold, pod *corev1.Pod) bool {
	uid := ClaimOf(pod)
	return uid != "" && uid == hold.UID && Allows(hold, pod.Namespace) && !createdBefore(pod, hold)
}

// createdBefore tells whether pod was created before hold (creation
// timestamps have one-second resolution: a pod of the hold's second is not).
// The injector stamps only guests created once the hold exists, so a pod
// that carries the UID of a younger hold wrote it itself, past the injector
// (its registration deleted): it claims nothing.
func createdBefore(pod *corev1.Pod, hold *imperatorv1alpha1.CapacityHold) bool {
	return pod.CreationTimestamp.Before(&hold.CreationTimestamp)
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
