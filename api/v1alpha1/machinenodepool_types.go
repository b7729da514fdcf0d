package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// MachineNodePoolSpec is copied from the owning Machine by the spoke.
type MachineNodePoolSpec struct {
	// machineGroup is the group of the owning Machine.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +required
	MachineGroup string `json:"machineGroup"`

	// nodePool is the owning Machine's spec.nodePool.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1000
	// +optional
	NodePool []NodePool `json:"nodePool,omitempty"`

	// machineTypeStock names every machine type of the owning Machine.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	MachineTypeStock []MachineTypeRef `json:"machineTypeStock,omitempty"`
}

// NodeCondition is the observed state of a node in the pool.
// +kubebuilder:validation:Enum=Ready;NotReady;Maintenance;Missing;Conflict
type NodeCondition string

const (
	// NodeConditionReady is a node in mode ready with none of the unhealthy node taints.
	NodeConditionReady NodeCondition = "Ready"
	// NodeConditionNotReady is a node that carries one of the
	// node.kubernetes.io/{not-ready,unschedulable,network-unavailable,unreachable} taints.
	NodeConditionNotReady NodeCondition = "NotReady"
	// NodeConditionMaintenance is a node in mode maintenance; it wins over node health.
	NodeConditionMaintenance NodeCondition = "Maintenance"
	// NodeConditionMissing is reported for a listed node that does not exist (yet).
	NodeConditionMissing NodeCondition = "Missing"
	// NodeConditionConflict is reported for a node of the pool that another
	// MachineNodePool owns: one that names it (a name wins over a selector),
	// else the one that holds it already (its machine-group annotation), else
	// the oldest. That pool keeps the node and this one leaves it alone. The
	// Machine validator prevents this for nodes that exist at admission; it
	// follows a node labelled later, a race between two admissions, or
	// hand-made MachineNodePools.
	NodeConditionConflict NodeCondition = "Conflict"
)

// Condition types and reasons of a MachineNodePool.
const (
	// NodePoolConditionReady is True when every listed node exists and carries
	// the labels, annotation and taints of its pool.
	NodePoolConditionReady = "Ready"

	// NodePoolReasonNodesConfigured: every listed node carries what it should.
	NodePoolReasonNodesConfigured = "NodesConfigured"
	// NodePoolReasonNodeMissing: a listed node does not exist (yet).
	NodePoolReasonNodeMissing = "NodeMissing"
	// NodePoolReasonNodeConflict: a listed node belongs to another pool.
	NodePoolReasonNodeConflict = "NodeConflict"
	// NodePoolReasonNodeUpdateFailed: writing a node failed; it is retried.
	NodePoolReasonNodeUpdateFailed = "NodeUpdateFailed"
)

// NodePoolFinalizer lets the node-pool controller remove what it put on the
// nodes before a MachineNodePool goes away.
const NodePoolFinalizer = Prefix + "node-pool-cleanup"

// NodePoolStatus is the observed state of one node of the pool: a named node,
// or a node a selector entry matches.
type NodePoolStatus struct {
	// name of the Node.
	Name string `json:"name"`
	// condition of the node: Ready, NotReady, Maintenance, or Missing when the
	// node does not exist.
	Condition NodeCondition `json:"condition"`
	// machineType the node serves.
	// +optional
	MachineType string `json:"machineType,omitempty"`
}

// MachineNodePoolStatus is what the node-pool controller observed.
type MachineNodePoolStatus struct {
	// observedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready is True when every listed node exists and carries the
	// labels, annotation and taints of its pool.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// nodePool reports each listed node.
	// +listType=map
	// +listMapKey=name
	// +optional
	NodePool []NodePoolStatus `json:"nodePool,omitempty"`
}

// MachineNodePool is the node side of a Machine, named <machine>-node-pool and
// owned by it.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=mnp,categories=imperator
// +kubebuilder:printcolumn:name="Group",type=string,JSONPath=`.spec.machineGroup`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MachineNodePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec MachineNodePoolSpec `json:"spec"`
	// +optional
	Status MachineNodePoolStatus `json:"status,omitempty"`
}

// MachineNodePoolList is a list of MachineNodePools.
// +kubebuilder:object:root=true
type MachineNodePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MachineNodePool `json:"items"`
}

func init() { register(&MachineNodePool{}, &MachineNodePoolList{}) }
