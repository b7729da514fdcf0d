package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodePoolMode is the mode an administrator puts a node in.
// +kubebuilder:validation:Enum=ready;maintenance
type NodePoolMode string

const (
	// NodePoolModeReady offers the node to its machine type.
	NodePoolModeReady NodePoolMode = "ready"
	// NodePoolModeMaintenance withdraws the node; it wins over node health.
	NodePoolModeMaintenance NodePoolMode = "maintenance"
)

// MachineSpec declares a machine group: the nodes that back it and the machine
// types carved out of them.
// +kubebuilder:validation:XValidation:rule="!has(self.nodePool) || self.nodePool.all(p, p.machineType.all(t, self.machineTypes.exists(m, m.name == t.name)))",message="spec.nodePool[].machineType[].name must name an entry of spec.machineTypes"
type MachineSpec struct {
	// nodePool lists the nodes of this group and the machine type each one
	// serves: each entry names one node (name) or selects nodes by their labels
	// (nodeSelector). A node may belong to one Machine only. Named nodes that do
	// not exist yet are allowed and reported in the MachineNodePool status;
	// nodes matching a selector join the pool as they appear and leave it as
	// they go. A node both named and selected, or selected by several entries,
	// takes the first naming entry, else the first selecting entry.
	//
	// The list is atomic (an entry may have no name to key a map list by);
	// the Machine validator refuses a name listed twice.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1000
	// +optional
	NodePool []NodePool `json:"nodePool,omitempty"`

	// machineTypes are the named shapes (cpu, memory, GPU) offered by this group,
	// each with the number of units to keep reserved.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +required
	MachineTypes []MachineType `json:"machineTypes"`
}

// NodePool puts one node, or the nodes a label selector matches, into the
// group.
// +kubebuilder:validation:XValidation:rule="has(self.name) != has(self.nodeSelector)",message="spec.nodePool[]: exactly one of name and nodeSelector must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.nodeSelector) || (has(self.nodeSelector.matchLabels) && size(self.nodeSelector.matchLabels) > 0) || (has(self.nodeSelector.matchExpressions) && size(self.nodeSelector.matchExpressions) > 0)",message="spec.nodePool[].nodeSelector must not be empty: an empty selector would take every node"
type NodePool struct {
	// name is the name of the Node. Exactly one of name and nodeSelector is set.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Name string `json:"name,omitempty"`

	// nodeSelector puts every node whose labels it matches into the pool, as
	// the node appears or is labelled, and takes it out when the node goes or
	// stops matching, e.g. matchLabels {nvidia.com/gpu.product:
	// NVIDIA-H100-80GB-HBM3}. It must not be empty. A matching node named by
	// another Machine, or already held by another Machine's selector, stays
	// with that Machine and is reported as Conflict.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`

	// mode is ready (offered) or maintenance (withdrawn).
	// +kubebuilder:default=ready
	// +optional
	Mode NodePoolMode `json:"mode,omitempty"`

	// taint adds NoSchedule taints matching the pool labels, so that only pods of
	// this machine type land on the node.
	// +kubebuilder:default=false
	// +optional
	Taint bool `json:"taint,omitempty"`

	// machineType names the single machine type this node serves.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=1
	// +required
	MachineType []MachineTypeRef `json:"machineType"`
}

// MachineTypeRef names a machine type of the same Machine.
type MachineTypeRef struct {
	// name of the machine type.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`
}

// MachineType is a named shape and how many units of it are kept reserved.
type MachineType struct {
	// name is used as a label-key suffix (imperator.tenzen-y.io/<name>) and in
	// object names (<name>-<machine-group>): a DNS-1123 label.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`

	// spec is the shape of one unit.
	// +required
	Spec MachineTypeSpec `json:"spec"`

	// available is the number of units of this type the group offers.
	// +kubebuilder:validation:Minimum=0
	// +required
	Available int32 `json:"available"`
}

// MachineTypeSpec is the shape of one unit of a machine type. Pods of the type
// request and are limited to exactly these figures.
//
// cpu and memory must be positive. The Machine validator checks it: a CEL
// rule parsing a quantity costs in proportion to the string's length, which
// the quantity schema does not bound, and the API server refuses such a rule
// under a list of 64 machine types.
type MachineTypeSpec struct {
	// cpu of one unit, e.g. 6000m.
	// +required
	CPU resource.Quantity `json:"cpu"`

	// memory of one unit, e.g. 48Gi.
	// +required
	Memory resource.Quantity `json:"memory"`

	// gpu of one unit; omit for CPU-only types.
	// +optional
	GPU *GPUSpec `json:"gpu,omitempty"`
}

// GPUSpec asks for GPUs and, optionally, narrows the nodes by the labels of
// NVIDIA GPU Feature Discovery. Several selectors are ANDed.
type GPUSpec struct {
	// type is the extended resource name, e.g. nvidia.com/gpu.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Type string `json:"type"`

	// num is the number of GPUs per unit.
	// +kubebuilder:validation:Minimum=1
	// +required
	Num int32 `json:"num"`

	// product selects nodes by nvidia.com/gpu.product, e.g. NVIDIA-GeForce-RTX-3090.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Product string `json:"product,omitempty"`

	// family selects nodes by nvidia.com/gpu.family, e.g. ampere.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Family string `json:"family,omitempty"`

	// machine selects nodes by nvidia.com/gpu.machine, e.g. DGX-1.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Machine string `json:"machine,omitempty"`
}

// The GPU Feature Discovery node labels the GPU selectors map to.
const (
	GPUProductLabel = "nvidia.com/gpu.product"
	GPUFamilyLabel  = "nvidia.com/gpu.family"
	GPUMachineLabel = "nvidia.com/gpu.machine"
)

// MachineStatus is what the spoke observed of the group.
type MachineStatus struct {
	// observedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready, and InsufficientCapacity when the nodes cannot hold
	// what available asks for.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// availableMachines reports the usage of each machine type.
	// +listType=map
	// +listMapKey=name
	// +optional
	AvailableMachines []AvailableMachine `json:"availableMachines,omitempty"`

	// typesSummary is the names of spec.machineTypes joined with commas, e.g.
	// "compute-xlarge,compute-small": what kubectl get machines shows as
	// TYPES (a printer column of spec.machineTypes[*].name shows only the
	// first).
	// +optional
	TypesSummary string `json:"typesSummary,omitempty"`
}

// AvailableMachine is the usage of one machine type.
type AvailableMachine struct {
	// name of the machine type.
	Name string `json:"name"`
	// usage of the machine type.
	Usage Usage `json:"usage"`
}

// Usage counts the units of a machine type (docs/contract.md, Counting).
type Usage struct {
	// maximum is spec.machineTypes[].available.
	Maximum int32 `json:"maximum"`
	// reserved counts reservation pods bound to a node, not terminating or finished.
	Reserved int32 `json:"reserved"`
	// used counts guest pods bound to a node, not terminating or finished.
	Used int32 `json:"used"`
	// waiting counts guest pods not yet bound to a node, queued ones included.
	Waiting int32 `json:"waiting"`
	// queued counts guest pods held at the agent's slot scheduling gate:
	// waiting in line for a unit of this type, in arrival order. They are
	// part of waiting.
	// +optional
	Queued int32 `json:"queued,omitempty"`
	// unplaceable counts the queued guests that no node-pool=ready node of
	// the type can take now (their nodeSelector, required node affinity or
	// tolerations rule every one out), and the members of gangs that free
	// units alone cannot let through (bigger than available, members
	// missing, no readable size, spread over several types). They wait but
	// hold no unit: the reservation keeps their units, and the hub counts
	// them as free. They are part of queued.
	// +optional
	Unplaceable int32 `json:"unplaceable,omitempty"`
	// held counts the units set aside for CapacityHolds that no guest of
	// the hold holds yet: they are not free for other guests.
	// +optional
	Held int32 `json:"held,omitempty"`
}

// Machine is a machine group: nodes carved into named machine types whose
// capacity is held by reservation pods until guest pods claim it.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=mc,categories=imperator
// +kubebuilder:printcolumn:name="Group",type=string,JSONPath=`.metadata.labels.imperator\.tenzen-y\.io/machine-group`
// +kubebuilder:printcolumn:name="Types",type=string,JSONPath=`.status.typesSummary`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Machine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec MachineSpec `json:"spec"`
	// +optional
	Status MachineStatus `json:"status,omitempty"`
}

// MachineList is a list of Machines.
// +kubebuilder:object:root=true
type MachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Machine `json:"items"`
}

func init() { register(&Machine{}, &MachineList{}) }

// MachineType returns the machine type of the Machine's spec named name; nil
// when it offers none of that name (or m is nil).
func (m *Machine) MachineType(name string) *MachineType {
	if m == nil {
		return nil
	}
	for i := range m.Spec.MachineTypes {
		if m.Spec.MachineTypes[i].Name == name {
			return &m.Spec.MachineTypes[i]
		}
	}
	return nil
}
