package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterInventorySpec names the spoke cluster an inventory describes.
type ClusterInventorySpec struct {
	// clusterName is the name of the spoke cluster (its ManagedCluster).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.clusterName is immutable"
	// +required
	ClusterName string `json:"clusterName"`
}

// ClusterInventoryStatus is the last snapshot the hub received from the spoke.
type ClusterInventoryStatus struct {
	// conditions: Available is True while the spoke heartbeats, Unknown once it
	// has been silent past the hub's grace period.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// agentVersion is the version the spoke agent announced.
	// +optional
	AgentVersion string `json:"agentVersion,omitempty"`

	// agentMode is how the spoke agent runs: in-cluster (inside the spoke
	// cluster) or hosted (in a management cluster, serving the spoke through
	// its kubeconfig). Empty when the agent did not say.
	// +kubebuilder:validation:Enum=in-cluster;hosted
	// +optional
	AgentMode string `json:"agentMode,omitempty"`

	// injectionUnavailable, when set, says why the spoke cluster's API
	// server cannot call the agent's webhooks: guests are not injected.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	InjectionUnavailable string `json:"injectionUnavailable,omitempty"`

	// epoch identifies one run of the spoke agent; generations are
	// comparable only within one epoch.
	// +optional
	Epoch uint64 `json:"epoch,omitempty"`
	// generation of the spoke inventory this status holds, monotonic
	// within an epoch.
	// +optional
	Generation uint64 `json:"generation,omitempty"`

	// observedAt is when the spoke read these figures from its API server.
	// +optional
	ObservedAt *metav1.Time `json:"observedAt,omitempty"`

	// lastHeartbeatTime is when the hub last heard from the spoke (written at
	// most every few seconds, so it lags the hub's memory).
	// +optional
	LastHeartbeatTime *metav1.Time `json:"lastHeartbeatTime,omitempty"`

	// machines are the spoke's Machines with their usage.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=10000
	// +optional
	Machines []InventoryMachine `json:"machines,omitempty"`
}

// InventoryMachine is one Machine of a spoke cluster.
type InventoryMachine struct {
	// name of the Machine on the spoke.
	Name string `json:"name"`
	// group is the machine group.
	// +optional
	Group string `json:"group,omitempty"`
	// ready mirrors the Machine's Ready condition status.
	// +optional
	Ready metav1.ConditionStatus `json:"ready,omitempty"`
	// types are the machine types with shape and usage.
	// +listType=map
	// +listMapKey=name
	// +optional
	Types []InventoryMachineType `json:"types,omitempty"`
	// nodePool reports each node of the pool.
	// +listType=map
	// +listMapKey=name
	// +optional
	NodePool []NodePoolStatus `json:"nodePool,omitempty"`
}

// InventoryMachineType is one machine type with its shape, usage and nodes.
type InventoryMachineType struct {
	// name of the machine type.
	Name string `json:"name"`
	// cpu of one unit, as a Kubernetes quantity string.
	// +optional
	CPU string `json:"cpu,omitempty"`
	// memory of one unit, as a Kubernetes quantity string.
	// +optional
	Memory string `json:"memory,omitempty"`
	// gpu of one unit.
	// +optional
	GPU *GPUSpec `json:"gpu,omitempty"`
	// available is the number of units the group offers.
	Available int32 `json:"available"`
	// usage of the type as the spoke reported it; absent until the spoke's
	// Machine controller counted it.
	// +optional
	Usage *Usage `json:"usage,omitempty"`
	// nodes counts the pool's nodes serving the type by condition.
	// +optional
	Nodes NodeCounts `json:"nodes"`
}

// NodeCounts counts nodes by condition.
type NodeCounts struct {
	// ready counts the pool's nodes in the node-pool=ready state: they serve guests.
	// +optional
	Ready int32 `json:"ready,omitempty"`
	// notReady counts the pool's nodes in the node-pool=not-ready state (unhealthy).
	// +optional
	NotReady int32 `json:"notReady,omitempty"`
	// maintenance counts the pool's nodes in the node-pool=maintenance state.
	// +optional
	Maintenance int32 `json:"maintenance,omitempty"`
	// missing counts the nodes the pool lists that do not exist.
	// +optional
	Missing int32 `json:"missing,omitempty"`
	// conflict counts the nodes the pool lists that belong to another Machine's pool.
	// +optional
	Conflict int32 `json:"conflict,omitempty"`
}

// ConditionAvailable is the ClusterInventory condition mirroring the spoke's
// liveness (the same meaning as OCM's ManagedClusterConditionAvailable).
const ConditionAvailable = "Available"

// ClusterInventory is the hub's durable copy of one spoke cluster's Machines
// and usage, in the namespace named like the cluster (as OCM does). The hub
// serves queries from memory and reloads this on restart.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cinv,categories=imperator
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=`.status.conditions[?(@.type=="Available")].status`
// +kubebuilder:printcolumn:name="Observed",type=date,JSONPath=`.status.observedAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterInventory struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ClusterInventorySpec `json:"spec"`
	// +optional
	Status ClusterInventoryStatus `json:"status,omitempty"`
}

// ClusterInventoryList is a list of ClusterInventories.
// +kubebuilder:object:root=true
type ClusterInventoryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterInventory `json:"items"`
}

func init() { register(&ClusterInventory{}, &ClusterInventoryList{}) }
