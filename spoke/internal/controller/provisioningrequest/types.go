package provisioningrequest

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The ProvisioningRequest API the Controller reads and writes: the fields of
// Cluster Autoscaler's autoscaling.x-k8s.io/v1 it uses, with the same JSON.
// They are declared here rather than imported from
// k8s.io/autoscaler/cluster-autoscaler/apis (the version Kueue v0.17.0
// pulls) because that package imports ginkgo, gomega and
// k8s.io/code-generator for their side effects, which would go into the
// agent's binary; its CRD (deploy/spoke/provisioningrequest) is copied from
// that module unchanged. Fields left out are kept on writes: the
// Controller patches status with JSON merge patches of the fields it sets.

// GroupVersion is the API group and version of ProvisioningRequests.
var GroupVersion = schema.GroupVersion{Group: "autoscaling.x-k8s.io", Version: "v1"}

// Condition types of a ProvisioningRequest, as Cluster Autoscaler sets them.
const (
	ConditionAccepted        = "Accepted"
	ConditionProvisioned     = "Provisioned"
	ConditionFailed          = "Failed"
	ConditionBookingExpired  = "BookingExpired"
	ConditionCapacityRevoked = "CapacityRevoked"
)

// ProvisioningRequest asks a provisioning class for capacity for pod sets.
type ProvisioningRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ProvisioningRequestSpec   `json:"spec"`
	Status            ProvisioningRequestStatus `json:"status,omitempty"`
}

// ProvisioningRequestSpec is the requested capacity.
type ProvisioningRequestSpec struct {
	PodSets               []PodSet          `json:"podSets"`
	ProvisioningClassName string            `json:"provisioningClassName"`
	Parameters            map[string]string `json:"parameters,omitempty"`
}

// PodSet is count pods of the PodTemplate of the request's namespace named
// by podTemplateRef.
type PodSet struct {
	PodTemplateRef Reference `json:"podTemplateRef"`
	Count          int32     `json:"count"`
}

// Reference names an object of the request's namespace.
type Reference struct {
	Name string `json:"name,omitempty"`
}

// ProvisioningRequestStatus is what the provider says.
type ProvisioningRequestStatus struct {
	Conditions               []metav1.Condition `json:"conditions,omitempty"`
	ProvisioningClassDetails map[string]string  `json:"provisioningClassDetails,omitempty"`
}

// ProvisioningRequestList is a list of ProvisioningRequests.
type ProvisioningRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProvisioningRequest `json:"items"`
}

// AddToScheme registers ProvisioningRequest and its list in scheme.
func AddToScheme(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &ProvisioningRequest{}, &ProvisioningRequestList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}

// DeepCopyInto copies r into out.
func (r *ProvisioningRequest) DeepCopyInto(out *ProvisioningRequest) {
	*out = *r
	out.TypeMeta = r.TypeMeta
	r.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if r.Spec.PodSets != nil {
		out.Spec.PodSets = append([]PodSet(nil), r.Spec.PodSets...)
	}
	if r.Spec.Parameters != nil {
		out.Spec.Parameters = make(map[string]string, len(r.Spec.Parameters))
		for k, v := range r.Spec.Parameters {
			out.Spec.Parameters[k] = v
		}
	}
	if r.Status.Conditions != nil {
		out.Status.Conditions = make([]metav1.Condition, len(r.Status.Conditions))
		for i := range r.Status.Conditions {
			r.Status.Conditions[i].DeepCopyInto(&out.Status.Conditions[i])
		}
	}
	if r.Status.ProvisioningClassDetails != nil {
		out.Status.ProvisioningClassDetails = make(map[string]string, len(r.Status.ProvisioningClassDetails))
		for k, v := range r.Status.ProvisioningClassDetails {
			out.Status.ProvisioningClassDetails[k] = v
		}
	}
}

// DeepCopy returns a copy of r.
func (r *ProvisioningRequest) DeepCopy() *ProvisioningRequest {
	if r == nil {
		return nil
	}
	out := new(ProvisioningRequest)
	r.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (r *ProvisioningRequest) DeepCopyObject() runtime.Object { return r.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (l *ProvisioningRequestList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &ProvisioningRequestList{TypeMeta: l.TypeMeta}
	l.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]ProvisioningRequest, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}
