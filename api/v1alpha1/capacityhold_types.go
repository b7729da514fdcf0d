package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CapacityHoldSpec books units of one machine type of one machine group for a
// while. Held units are taken out of the type's free units for everyone else;
// guests that claim the hold take them ahead of the queue. A guest names the
// hold in the label imperator.tenzen-y.io/hold; the pod injector then stamps
// the hold's UID in imperator.tenzen-y.io/hold-uid, and only that claims it.
// +kubebuilder:validation:XValidation:rule="self.machineGroup == oldSelf.machineGroup && self.machineType == oldSelf.machineType && self.count == oldSelf.count",message="machineGroup, machineType and count are immutable: release the hold and create another"
type CapacityHoldSpec struct {
	// machineGroup is the imperator.tenzen-y.io/machine-group of the Machine
	// whose type is held.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	MachineGroup string `json:"machineGroup"`
	// machineType is the name of the held machine type, an entry of the
	// Machine's spec.machineTypes.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	MachineType string `json:"machineType"`
	// count is the number of units to hold. A hold is all or nothing: when
	// fewer units are free it holds none and says Failed.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +required
	Count int32 `json:"count"`
	// validUntil is when the units no guest of the hold claimed go back to
	// everyone. Units claimed by then stay with their guests until they
	// finish. It may be moved, later or earlier, while the hold lasts.
	// +required
	ValidUntil metav1.Time `json:"validUntil"`
	// namespaces, when set, are the only namespaces whose guests may claim
	// the hold; otherwise a guest in any namespace the pod injector serves may.
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`
	// fleetHold names the hub's fleet hold this hold is part of, when the hub
	// created it. Informational: the hold lives by its own validUntil even if
	// the hub is gone.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	FleetHold string `json:"fleetHold,omitempty"`
}

// CapacityHoldStatus says whether the units are held and how many guests
// claimed them, in the vocabulary of Cluster Autoscaler's ProvisioningRequest
// (autoscaling.x-k8s.io/v1 conditions).
type CapacityHoldStatus struct {
	// observedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Accepted, Provisioned, Failed, BookingExpired,
	// CapacityRevoked.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// held counts the units set aside for the hold that no guest of it holds
	// yet.
	// +optional
	Held int32 `json:"held,omitempty"`
	// claimed counts the units the hold's guests hold: bound, or let through
	// the slot gate and not bound yet.
	// +optional
	Claimed int32 `json:"claimed,omitempty"`
}

// Condition types of a CapacityHold, as a ProvisioningRequest's.
const (
	// HoldConditionAccepted is True once the agent checked the hold against
	// its Machine and type.
	HoldConditionAccepted = "Accepted"
	// HoldConditionProvisioned is True while every unit of the hold is held
	// or claimed.
	HoldConditionProvisioned = "Provisioned"
	// HoldConditionFailed is True when the hold could not be made: too few
	// free units (the message gives the numbers), or no such type. Nothing
	// is held. It is final.
	HoldConditionFailed = "Failed"
	// HoldConditionBookingExpired is True once validUntil passed: the
	// unclaimed units went back. It is final.
	HoldConditionBookingExpired = "BookingExpired"
	// HoldConditionCapacityRevoked is True when a held unit was lost because
	// its node left the ready pool (not ready, maintenance, removed).
	HoldConditionCapacityRevoked = "CapacityRevoked"
)

// Reasons of the conditions of a CapacityHold.
const (
	// HoldReasonAccepted: the Machine and its type exist.
	HoldReasonAccepted = "Accepted"
	// HoldReasonMachineTypeNotFound: no Machine of the group offers the type.
	HoldReasonMachineTypeNotFound = "MachineTypeNotFound"
	// HoldReasonNotEnoughFreeUnits: fewer units were free than the hold asks.
	HoldReasonNotEnoughFreeUnits = "NotEnoughFreeUnits"
	// HoldReasonUnitsHeld: every unit is held or claimed.
	HoldReasonUnitsHeld = "UnitsHeld"
	// HoldReasonExpired: validUntil passed.
	HoldReasonExpired = "Expired"
	// HoldReasonNodeLeftPool: a node that held a unit left the ready pool.
	HoldReasonNodeLeftPool = "NodeLeftPool"
)

// Cluster Autoscaler's ProvisioningRequest consumer annotations. A pod
// annotated with ProvisioningClassNameAnnotation set to
// CapacityHoldProvisioningClass and ConsumeProvisioningRequestAnnotation
// naming a ProvisioningRequest of its namespace claims the CapacityHold the
// agent made for that request and the pod's machine type. With the class
// LegacyCapacityHoldProvisioningClass, the annotation names the hold itself,
// as the label HoldKey does.
const (
	ConsumeProvisioningRequestAnnotation = "autoscaling.x-k8s.io/consume-provisioning-request"
	ProvisioningClassNameAnnotation      = "autoscaling.x-k8s.io/provisioning-class-name"
	// CapacityHoldProvisioningClass is the ProvisioningRequest class the
	// agent serves with CapacityHolds: a DNS subdomain, as Kueue's
	// ProvisioningRequestConfig requires of a class name.
	CapacityHoldProvisioningClass = "capacity-hold.imperator.tenzen-y.io"
	// LegacyCapacityHoldProvisioningClass is the class's first name, which
	// Kueue refuses (not a DNS subdomain); still honoured on pods, whose
	// consume-provisioning-request annotation then names the hold itself.
	LegacyCapacityHoldProvisioningClass = "imperator.tenzen-y.io/capacity-hold"
)

// CapacityHold books units of a machine type in this cluster until a time,
// for the guests that claim it (stamped with its UID by the pod injector).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=chold,categories=imperator
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name is what guests name in the label imperator.tenzen-y.io/hold: a DNS-1123 label of at most 63 characters"
// +kubebuilder:printcolumn:name="Group",type=string,JSONPath=`.spec.machineGroup`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.machineType`
// +kubebuilder:printcolumn:name="Count",type=integer,JSONPath=`.spec.count`
// +kubebuilder:printcolumn:name="Held",type=integer,JSONPath=`.status.held`
// +kubebuilder:printcolumn:name="Claimed",type=integer,JSONPath=`.status.claimed`
// +kubebuilder:printcolumn:name="Provisioned",type=string,JSONPath=`.status.conditions[?(@.type=="Provisioned")].status`
// +kubebuilder:printcolumn:name="Valid-Until",type=date,JSONPath=`.spec.validUntil`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CapacityHold struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +required
	Spec CapacityHoldSpec `json:"spec"`
	// +optional
	Status CapacityHoldStatus `json:"status,omitempty"`
}

// CapacityHoldList is a list of CapacityHolds.
// +kubebuilder:object:root=true
type CapacityHoldList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CapacityHold `json:"items"`
}

func init() { register(&CapacityHold{}, &CapacityHoldList{}) }
