// Package wire owns the conversions between the API types (api/v1alpha1,
// metav1) and the federation protocol (proto/imperator/federation/v1) that
// both sides of the stream make: the spoke's reporter writes the protocol
// from its Machines, the hub's persist package stores the protocol as API
// objects and reads it back. One definition here keeps the two directions in
// step when an enum value or a field is added.
package wire

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

var nodeConditions = map[imperatorv1alpha1.NodeCondition]federationv1.NodeCondition{
	imperatorv1alpha1.NodeConditionReady:       federationv1.NodeCondition_NODE_CONDITION_READY,
	imperatorv1alpha1.NodeConditionNotReady:    federationv1.NodeCondition_NODE_CONDITION_NOT_READY,
	imperatorv1alpha1.NodeConditionMaintenance: federationv1.NodeCondition_NODE_CONDITION_MAINTENANCE,
	imperatorv1alpha1.NodeConditionMissing:     federationv1.NodeCondition_NODE_CONDITION_MISSING,
	imperatorv1alpha1.NodeConditionConflict:    federationv1.NodeCondition_NODE_CONDITION_CONFLICT,
}

var conditionStatuses = map[metav1.ConditionStatus]federationv1.ConditionStatus{
	metav1.ConditionTrue:    federationv1.ConditionStatus_CONDITION_STATUS_TRUE,
	metav1.ConditionFalse:   federationv1.ConditionStatus_CONDITION_STATUS_FALSE,
	metav1.ConditionUnknown: federationv1.ConditionStatus_CONDITION_STATUS_UNKNOWN,
}

func invert[K, V comparable](m map[K]V) map[V]K {
	out := make(map[V]K, len(m))
	for k, v := range m {
		out[v] = k
	}
	return out
}

var (
	nodeConditionsToAPI    = invert(nodeConditions)
	conditionStatusesToAPI = invert(conditionStatuses)
)

// NodeCondition is the protocol's value of a node-pool node's condition;
// an unknown or empty condition is NODE_CONDITION_UNSPECIFIED.
func NodeCondition(c imperatorv1alpha1.NodeCondition) federationv1.NodeCondition {
	return nodeConditions[c]
}

// NodeConditionToAPI is the API value of the protocol's node condition; an
// unspecified or unknown one is "".
func NodeConditionToAPI(c federationv1.NodeCondition) imperatorv1alpha1.NodeCondition {
	return nodeConditionsToAPI[c]
}

// ConditionStatus is the protocol's value of a condition status; an unknown
// or empty status is CONDITION_STATUS_UNSPECIFIED.
func ConditionStatus(s metav1.ConditionStatus) federationv1.ConditionStatus {
	return conditionStatuses[s]
}

// ConditionStatusToAPI is the API value of the protocol's condition status;
// an unspecified or unknown one is "".
func ConditionStatusToAPI(s federationv1.ConditionStatus) metav1.ConditionStatus {
	return conditionStatusesToAPI[s]
}

// GPU is the protocol's form of a machine type's GPU; nil stays nil.
func GPU(g *imperatorv1alpha1.GPUSpec) *federationv1.GPU {
	if g == nil {
		return nil
	}
	return &federationv1.GPU{Type: g.Type, Num: g.Num, Product: g.Product, Family: g.Family, Machine: g.Machine}
}

// GPUToAPI is the API form of the protocol's GPU; nil stays nil.
func GPUToAPI(g *federationv1.GPU) *imperatorv1alpha1.GPUSpec {
	if g == nil {
		return nil
	}
	return &imperatorv1alpha1.GPUSpec{Type: g.GetType(), Num: g.GetNum(), Product: g.GetProduct(), Family: g.GetFamily(), Machine: g.GetMachine()}
}

// Usage is the protocol's form of a machine type's usage counts; nil stays nil.
func Usage(u *imperatorv1alpha1.Usage) *federationv1.Usage {
	if u == nil {
		return nil
	}
	return &federationv1.Usage{Maximum: u.Maximum, Reserved: u.Reserved, Used: u.Used, Waiting: u.Waiting, Queued: u.Queued, Held: u.Held,
		Unplaceable: u.Unplaceable}
}

// UsageToAPI is the API form of the protocol's usage counts; nil stays nil.
func UsageToAPI(u *federationv1.Usage) *imperatorv1alpha1.Usage {
	if u == nil {
		return nil
	}
	return &imperatorv1alpha1.Usage{Maximum: u.GetMaximum(), Reserved: u.GetReserved(), Used: u.GetUsed(), Waiting: u.GetWaiting(), Queued: u.GetQueued(), Held: u.GetHeld(),
		Unplaceable: u.GetUnplaceable()}
}

// NodeCounts is the protocol's form of a machine type's node counts.
func NodeCounts(c imperatorv1alpha1.NodeCounts) *federationv1.NodeCounts {
	return &federationv1.NodeCounts{Ready: c.Ready, NotReady: c.NotReady, Maintenance: c.Maintenance, Missing: c.Missing, Conflict: c.Conflict}
}

// NodeCountsToAPI is the API form of the protocol's node counts; nil is all zero.
func NodeCountsToAPI(c *federationv1.NodeCounts) imperatorv1alpha1.NodeCounts {
	return imperatorv1alpha1.NodeCounts{Ready: c.GetReady(), NotReady: c.GetNotReady(), Maintenance: c.GetMaintenance(), Missing: c.GetMissing(), Conflict: c.GetConflict()}
}
