package machine

import (
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// What a pod's spec and status, or its namespace's labels, say about it:
// the predicates the count and the queue share.

// active is a pod that holds or will hold its node's resources: neither
// terminating nor finished.
func active(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && !finished(pod)
}

// finished is a pod whose containers have all stopped for good.
func finished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// bound is a pod the scheduler placed on a node (Running or ContainerCreating
// in the original design's words; docs/contract.md, Counting).
func bound(pod *corev1.Pod) bool { return pod.Spec.NodeName != "" }

// unschedulable is a pod the scheduler tried and failed to place.
func unschedulable(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}

// podOrdinal is the StatefulSet ordinal of a pod: the pod-index label the
// StatefulSet controller sets, else the number after "<statefulset>-".
func podOrdinal(pod *corev1.Pod, statefulSet string) (int32, bool) {
	value, ok := pod.Labels[appsv1.PodIndexLabel]
	if !ok {
		value, ok = strings.CutPrefix(pod.Name, statefulSet+"-")
		if !ok {
			return 0, false
		}
	}
	ordinal, err := strconv.ParseInt(value, 10, 32)
	if err != nil || ordinal < 0 {
		return 0, false
	}
	return int32(ordinal), true
}

// injectionEnabled tells whether guest pods of a namespace with these labels
// are injected, under either spelling of the label.
func injectionEnabled(labels map[string]string) bool {
	return labels[imperatorv1alpha1.InjectResourceKey] == imperatorv1alpha1.InjectResourceEnabled ||
		labels[imperatorv1alpha1.LegacyInjectResourceKey] == imperatorv1alpha1.InjectResourceEnabled
}
