// Package v1alpha1 holds the imperator.tenzen-y.io/v1alpha1 API: the spoke's
// Machine and MachineNodePool (cluster-scoped) and the hub's ClusterInventory,
// together with the canonical label, annotation and taint keys that every
// component of the system agrees on (ARCHITECTURE §2).
//
// +kubebuilder:object:generate=true
// +groupName=imperator.tenzen-y.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "imperator.tenzen-y.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
