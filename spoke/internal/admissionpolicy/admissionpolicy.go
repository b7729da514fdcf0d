// Package admissionpolicy keeps the one piece of the in-API-server guest
// injection (deploy/spoke/policy/injection) that CEL cannot derive from the
// Machines: the binding of the imperator-guest-unknown-group
// ValidatingAdmissionPolicy, whose object selector lists the machine groups
// the Machines carry, so that a guest of any other group is refused even
// when it was created with a copied injection record. A policy evaluates
// one parameter at a time and cannot tell that none of them matched; the
// agent can. Reconciler writes the binding by server-side apply whenever a
// Machine changes; Binding is the pure computation.
package admissionpolicy

import (
	"context"
	"fmt"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

const (
	// UnknownGroupPolicy names the ValidatingAdmissionPolicy of
	// deploy/spoke/policy/injection/guest-unknown-group.yaml, and its
	// binding.
	UnknownGroupPolicy = "imperator-guest-unknown-group"
	// FieldOwner is the server-side apply field manager of the binding.
	FieldOwner = "imperator-admission-policy"
)

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicybindings,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=machines,verbs=get;list;watch

// Binding returns the binding of UnknownGroupPolicy for machines: it
// selects the pods whose machine-group label is none of the groups the
// Machines are labelled with (pods without the label included), or every
// pod when no Machine has a group. The groups are sorted and deduplicated,
// so the binding only changes when the set of groups does.
func Binding(machines []imperatorv1alpha1.Machine) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	var groups []string
	for _, m := range machines {
		if g := m.Labels[imperatorv1alpha1.MachineGroupKey]; g != "" && m.DeletionTimestamp.IsZero() {
			groups = append(groups, g)
		}
	}
	slices.Sort(groups)
	groups = slices.Compact(groups)
	selector := &metav1.LabelSelector{}
	if len(groups) > 0 {
		selector.MatchExpressions = []metav1.LabelSelectorRequirement{{
			Key: imperatorv1alpha1.MachineGroupKey, Operator: metav1.LabelSelectorOpNotIn, Values: groups,
		}}
	}
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta: metav1.TypeMeta{
			APIVersion: admissionregistrationv1.SchemeGroupVersion.String(),
			Kind:       "ValidatingAdmissionPolicyBinding",
		},
		ObjectMeta: metav1.ObjectMeta{Name: UnknownGroupPolicy},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        UnknownGroupPolicy,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources:    &admissionregistrationv1.MatchResources{ObjectSelector: selector},
		},
	}
}

// Reconciler applies Binding of the Machines it lists whenever a Machine
// changes. Every event maps to one request: the binding is one object.
type Reconciler struct {
	Client client.Client
}

// Reconcile lists the Machines and applies their binding.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	var machines imperatorv1alpha1.MachineList
	if err := r.Client.List(ctx, &machines); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing Machines: %w", err)
	}
	binding := Binding(machines.Items)
	u, err := toUnstructured(binding)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return reconcile.Result{}, fmt.Errorf("applying ValidatingAdmissionPolicyBinding %s: %w", binding.Name, err)
	}
	return reconcile.Result{}, nil
}

// SetupWithManager runs the Reconciler on mgr's Machines.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("admissionpolicy").
		Watches(&imperatorv1alpha1.Machine{}, handler.EnqueueRequestsFromMapFunc(
			func(context.Context, client.Object) []reconcile.Request {
				return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: UnknownGroupPolicy}}}
			})).
		Complete(r)
}
