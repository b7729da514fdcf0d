// Package v1alpha1 holds the imperator.tenzen-y.io/v1alpha1 API: the spoke's
// Machine and MachineNodePool (cluster-scoped) and the hub's ClusterInventory,
// together with the canonical label, annotation and taint keys that every
// component of the system agrees on (ARCHITECTURE §2).
//
// +kubebuilder:object:generate=true
// +groupName=imperator.tenzen-y.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "imperator.tenzen-y.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a
	// runtime.Scheme. It is apimachinery's, not controller-runtime's
	// (deprecated there): the API package depends on apimachinery only.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// knownTypes are the kinds of this package, each with its list; every
// *_types.go adds its own in an init.
var knownTypes []runtime.Object

// register adds kinds to those AddToScheme registers.
func register(objs ...runtime.Object) { knownTypes = append(knownTypes, objs...) }

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, knownTypes...)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
