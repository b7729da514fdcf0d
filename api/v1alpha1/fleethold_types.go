package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FleetHoldSpec is a booking of units of one machine type, or of a resource
// shape, across the fleet, made through the hub's query API (CreateHold).
// The hub writes it; people read it.
// +kubebuilder:validation:XValidation:rule="has(self.machineType) != has(self.shape)",message="exactly one of spec.machineType and spec.shape must be set"
type FleetHoldSpec struct {
	// machineType names the machine type to hold (group optional).
	// +optional
	MachineType *FleetHoldMachineType `json:"machineType,omitempty"`
	// shape is what one held unit must offer at least.
	// +optional
	Shape *FleetHoldShape `json:"shape,omitempty"`
	// count is the number of units held across the fleet.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +required
	Count int32 `json:"count"`
	// sameCluster puts every unit in one cluster; otherwise they may be
	// spread over as few clusters as possible.
	// +optional
	SameCluster bool `json:"sameCluster,omitempty"`
	// validUntil is when the spokes give the unclaimed units back.
	// +required
	ValidUntil metav1.Time `json:"validUntil"`
	// namespaces, when set, are the only namespaces whose guests may claim
	// the units.
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`
	// creator is who created the hold, with the kind of identity:
	// "certificate:<common name>" for a client certificate of the hub CA,
	// "kubernetes:<user name>" for a bearer token of the hub cluster. Only
	// the creator releases the hold (besides admins). A creator without a
	// kind was recorded by a hub before 0.2.0, when only certificates
	// created holds.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Creator string `json:"creator,omitempty"`
}

// FleetHoldMachineType names a machine type.
type FleetHoldMachineType struct {
	// group restricts the match to one machine group.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Group string `json:"group,omitempty"`
	// type is the machine type's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +required
	Type string `json:"type"`
}

// FleetHoldShape is what one unit must offer at least.
type FleetHoldShape struct {
	// cpu is the least CPU of one unit, a quantity, e.g. 8.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	CPU string `json:"cpu,omitempty"`
	// memory is the least memory of one unit, a quantity, e.g. 64Gi.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Memory string `json:"memory,omitempty"`
	// gpuCount is the least number of GPUs of one unit.
	// +kubebuilder:validation:Minimum=0
	// +optional
	GPUCount int32 `json:"gpuCount,omitempty"`
	// gpuProduct, when set, is the GPU product the unit must have
	// (nvidia.com/gpu.product), e.g. NVIDIA-H100-80GB-HBM3.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	GPUProduct string `json:"gpuProduct,omitempty"`
	// gpuFamily, when set, is the GPU family the unit must have
	// (nvidia.com/gpu.family), e.g. hopper.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	GPUFamily string `json:"gpuFamily,omitempty"`
}

// FleetHoldPhase is where a fleet hold is in its life.
// +kubebuilder:validation:Enum=Pending;Held;Failed;Released;Expired
type FleetHoldPhase string

// Phases of a FleetHold.
const (
	// FleetHoldPending: the hub is asking the chosen spokes.
	FleetHoldPending FleetHoldPhase = "Pending"
	// FleetHoldHeld: every chosen spoke holds its part.
	FleetHoldHeld FleetHoldPhase = "Held"
	// FleetHoldFailed: a spoke refused or did not answer in time; the hub
	// released the others' parts. Final.
	FleetHoldFailed FleetHoldPhase = "Failed"
	// FleetHoldReleased: released by a user. Final.
	FleetHoldReleased FleetHoldPhase = "Released"
	// FleetHoldExpired: validUntil passed. Final.
	FleetHoldExpired FleetHoldPhase = "Expired"
)

// FleetHoldStatus is the outcome of the two-phase hold.
type FleetHoldStatus struct {
	// phase: Pending, Held, Failed, Released or Expired.
	// +optional
	Phase FleetHoldPhase `json:"phase,omitempty"`
	// message says why the hold failed, for people.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Message string `json:"message,omitempty"`
	// clusters are the parts of the hold, one per chosen cluster.
	// +listType=map
	// +listMapKey=cluster
	// +kubebuilder:validation:MaxItems=1000
	// +optional
	Clusters []FleetHoldCluster `json:"clusters,omitempty"`
	// clustersSummary is each part as cluster:count, joined with commas,
	// e.g. "spoke-a:2,spoke-b:2": what kubectl get fleetholds shows as
	// CLUSTERS (a printer column of clusters[*].cluster shows only the
	// first).
	// +kubebuilder:validation:MaxLength=80000
	// +optional
	ClustersSummary string `json:"clustersSummary,omitempty"`
}

// FleetHoldCluster is one cluster's part of a fleet hold.
type FleetHoldCluster struct {
	// cluster is the spoke cluster's name.
	Cluster string `json:"cluster"`
	// group is the machine group of the machine type held there.
	// +optional
	Group string `json:"group,omitempty"`
	// type is the machine type held there.
	// +optional
	Type string `json:"type,omitempty"`
	// count is the units asked of the cluster.
	// +optional
	Count int32 `json:"count,omitempty"`
	// held is the units the cluster said it holds.
	// +optional
	Held int32 `json:"held,omitempty"`
	// result is the spoke's answer: Held, Refused, TimedOut, Released.
	// +optional
	Result string `json:"result,omitempty"`
	// reason says, in one word, why the cluster refused or did not answer.
	// +optional
	Reason string `json:"reason,omitempty"`
	// message says it in words.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
}

// FleetHold is a booking of units across the fleet, kept by the hub in its
// own namespace (as ClusterInventory), so that a hub restart keeps it. Each
// chosen spoke holds its part in a CapacityHold of the same name that lives
// by its own validUntil, whether the hub is up or not.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fhold,categories=imperator
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="metadata.name is what guests quote in the label imperator.tenzen-y.io/hold: at most 63 characters"
// +kubebuilder:printcolumn:name="Count",type=integer,JSONPath=`.spec.count`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Clusters",type=string,JSONPath=`.status.clustersSummary`
// +kubebuilder:printcolumn:name="Valid-Until",type=date,JSONPath=`.spec.validUntil`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FleetHold struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +required
	Spec FleetHoldSpec `json:"spec"`
	// +optional
	Status FleetHoldStatus `json:"status,omitempty"`
}

// FleetHoldList is a list of FleetHolds.
// +kubebuilder:object:root=true
type FleetHoldList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FleetHold `json:"items"`
}

func init() { register(&FleetHold{}, &FleetHoldList{}) }
