package nodepool

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// unhealthyTaints make a node of the pool not-ready (docs/contract.md): the node
// lifecycle controller and the kubelet set them.
var unhealthyTaints = []string{
	corev1.TaintNodeNotReady,
	corev1.TaintNodeUnschedulable,
	corev1.TaintNodeNetworkUnavailable,
	corev1.TaintNodeUnreachable,
}

// Health classifies a node of the pool: maintenance mode wins; a node carrying
// any of the node.kubernetes.io/{not-ready,unschedulable,network-unavailable,
// unreachable} taints, whatever their effect, is not-ready; otherwise ready.
func Health(node *corev1.Node, mode imperatorv1alpha1.NodePoolMode) imperatorv1alpha1.NodePoolState {
	if mode == imperatorv1alpha1.NodePoolModeMaintenance {
		return imperatorv1alpha1.NodePoolMaintenance
	}
	for _, t := range node.Spec.Taints {
		if slices.Contains(unhealthyTaints, t.Key) {
			return imperatorv1alpha1.NodePoolNotReady
		}
	}
	return imperatorv1alpha1.NodePoolReady
}

// conditionOf is the status condition reported for a node in state.
func conditionOf(state imperatorv1alpha1.NodePoolState) imperatorv1alpha1.NodeCondition {
	switch state {
	case imperatorv1alpha1.NodePoolMaintenance:
		return imperatorv1alpha1.NodeConditionMaintenance
	case imperatorv1alpha1.NodePoolNotReady:
		return imperatorv1alpha1.NodeConditionNotReady
	default:
		return imperatorv1alpha1.NodeConditionReady
	}
}

// OwnedState is what this package puts on a Node: every label, annotation and
// taint whose key is under imperatorv1alpha1.Prefix.
type OwnedState struct {
	Labels      map[string]string
	Annotations map[string]string
	// Taints are kept sorted by key and effect.
	Taints []corev1.Taint
}

// DesiredState is what a node listed in entry of the pool of group should
// carry in state: the machine-group annotation; the <type>, machine-type and
// node-pool labels; and, with taint: true, NoSchedule taints with the keys and
// values of the <type> and node-pool labels. An entry without a machine type
// (the CRD forbids it) only gets the annotation and the node-pool label.
func DesiredState(entry imperatorv1alpha1.NodePool, group string, state imperatorv1alpha1.NodePoolState) OwnedState {
	desired := OwnedState{
		Labels:      map[string]string{imperatorv1alpha1.NodePoolKey: string(state)},
		Annotations: map[string]string{imperatorv1alpha1.MachineGroupKey: group},
	}
	if entry.Taint {
		desired.Taints = append(desired.Taints, corev1.Taint{
			Key: imperatorv1alpha1.NodePoolKey, Value: string(state), Effect: corev1.TaintEffectNoSchedule,
		})
	}
	if len(entry.MachineType) > 0 {
		machineType := entry.MachineType[0].Name
		desired.Labels[imperatorv1alpha1.MachineTypeKey] = machineType
		desired.Labels[imperatorv1alpha1.MachineTypeKeyFor(machineType)] = group
		if entry.Taint {
			desired.Taints = append(desired.Taints, corev1.Taint{
				Key: imperatorv1alpha1.MachineTypeKeyFor(machineType), Value: group, Effect: corev1.TaintEffectNoSchedule,
			})
		}
	}
	sortTaints(desired.Taints)
	return desired
}

// CurrentState is what this package has put on node, judged by key prefix.
func CurrentState(node *corev1.Node) OwnedState {
	current := OwnedState{Labels: owned(node.Labels), Annotations: owned(node.Annotations)}
	for _, t := range node.Spec.Taints {
		if isOwnedKey(t.Key) {
			current.Taints = append(current.Taints, t)
		}
	}
	sortTaints(current.Taints)
	return current
}

// Equal tells whether two owned states put the same keys on a node. The order
// of taints and their timeAdded do not matter.
func (s OwnedState) Equal(other OwnedState) bool {
	return maps.Equal(s.Labels, other.Labels) &&
		maps.Equal(s.Annotations, other.Annotations) &&
		slices.EqualFunc(s.Taints, other.Taints, func(a, b corev1.Taint) bool {
			return a.Key == b.Key && a.Value == b.Value && a.Effect == b.Effect
		})
}

// Empty tells whether the state puts nothing on a node.
func (s OwnedState) Empty() bool {
	return len(s.Labels) == 0 && len(s.Annotations) == 0 && len(s.Taints) == 0
}

// Apply makes node carry exactly desired among the keys this package owns and
// reports whether it changed anything. Foreign labels, annotations and taints
// are left as they are, taints in their order; our taints follow them. Apply
// with an empty OwnedState removes everything this package put on the node.
func Apply(node *corev1.Node, desired OwnedState) bool {
	if CurrentState(node).Equal(desired) {
		return false
	}
	node.Labels = replaceOwned(node.Labels, desired.Labels)
	node.Annotations = replaceOwned(node.Annotations, desired.Annotations)
	taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool { return isOwnedKey(t.Key) })
	taints = append(taints, desired.Taints...)
	if len(taints) == 0 {
		taints = nil
	}
	node.Spec.Taints = taints
	return true
}

func isOwnedKey(key string) bool { return strings.HasPrefix(key, imperatorv1alpha1.Prefix) }

func owned(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if isOwnedKey(k) {
			out[k] = v
		}
	}
	return out
}

// replaceOwned returns m without its owned keys, plus desired. It returns m
// itself (possibly nil) when nothing is to be added to a nil map.
func replaceOwned(m, desired map[string]string) map[string]string {
	if m == nil && len(desired) == 0 {
		return m
	}
	out := make(map[string]string, len(m)+len(desired))
	for k, v := range m {
		if !isOwnedKey(k) {
			out[k] = v
		}
	}
	maps.Copy(out, desired)
	return out
}

func sortTaints(taints []corev1.Taint) {
	slices.SortFunc(taints, func(a, b corev1.Taint) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return strings.Compare(string(a.Effect), string(b.Effect))
	})
}
