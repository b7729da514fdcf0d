package admissionpolicy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
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
	// AmbiguousGroupPolicy names the ValidatingAdmissionPolicy of
	// deploy/spoke/policy/injection/guest-ambiguous-group.yaml, and its
	// binding.
	AmbiguousGroupPolicy = "imperator-guest-ambiguous-group"
	// InjectionPolicy names the MutatingAdmissionPolicy of
	// deploy/spoke/policy/injection/guest-injection.yaml.
	InjectionPolicy = "imperator-guest-injection"
	// ManagedByLabel marks the injection bindings the Reconciler owns, so
	// that it finds and deletes those of Machines gone.
	ManagedByLabel = "imperator.tenzen-y.io/injection-binding"
)

// InjectionBindingName is the name of the injection binding of the Machine
// named machine for namespaces labelled with the canonical injection label
// (legacy false) or only with the original Imperator's (legacy true): the
// policy's name and the Machine's, shortened with a hash when that would be
// longer than an object name may be.
func InjectionBindingName(machine string, legacy bool) string {
	prefix := InjectionPolicy + "-"
	if legacy {
		prefix = InjectionPolicy + "-legacy-"
	}
	name := prefix + machine
	if len(name) <= validation.DNS1123SubdomainMaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(machine))
	return name[:validation.DNS1123SubdomainMaxLength-17] + "-" + hex.EncodeToString(sum[:8])
}

// injectionNamespaces are the namespace selectors of the two bindings of a
// Machine, as the webhook registration's (a selector cannot OR two labels):
// namespaces labelled imperator.tenzen-y.io/inject-resource=enabled, and
// those labelled only imperator.tenzen.io/inject-resource=enabled; never
// kube-system nor the agent's namespace. The policy checks the same again.
func injectionNamespaces(legacy bool, agentNamespace string) *metav1.LabelSelector {
	if agentNamespace == "" {
		agentNamespace = AgentNamespace
	}
	notExcluded := metav1.LabelSelectorRequirement{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{metav1.NamespaceSystem, agentNamespace},
	}
	enabled := func(key string) metav1.LabelSelectorRequirement {
		return metav1.LabelSelectorRequirement{Key: key, Operator: metav1.LabelSelectorOpIn, Values: []string{imperatorv1alpha1.InjectResourceEnabled}}
	}
	if !legacy {
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{enabled(imperatorv1alpha1.InjectResourceKey), notExcluded}}
	}
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		enabled(imperatorv1alpha1.LegacyInjectResourceKey),
		{Key: imperatorv1alpha1.InjectResourceKey, Operator: metav1.LabelSelectorOpNotIn, Values: []string{imperatorv1alpha1.InjectResourceEnabled}},
		notExcluded,
	}}
}

// AgentNamespace is the namespace the policies exclude from injection, as
// they name it (deploy/spoke/policy): the agent's in deploy/spoke; the Helm
// chart writes its own namespace into them, and the agent into the
// bindings (Reconciler.Namespace).
const AgentNamespace = "imperator-system"

// InjectionBindings returns two bindings of InjectionPolicy per Machine
// labelled with a machine group and not being deleted, one per injection
// label of namespaces: its parameter is the Machine, and it matches only
// pods labelled with the Machine's group in injection-enabled namespaces
// other than kube-system and agentNamespace ("": AgentNamespace), so that
// no other pod costs the API server a policy evaluation.
func InjectionBindings(machines []imperatorv1alpha1.Machine, agentNamespace string) []*admissionregistrationv1.MutatingAdmissionPolicyBinding {
	var bindings []*admissionregistrationv1.MutatingAdmissionPolicyBinding
	for _, m := range machines {
		group := m.Labels[imperatorv1alpha1.MachineGroupKey]
		if group == "" || !m.DeletionTimestamp.IsZero() {
			continue
		}
		for _, legacy := range []bool{false, true} {
			deny := admissionregistrationv1.DenyAction
			bindings = append(bindings, &admissionregistrationv1.MutatingAdmissionPolicyBinding{
				TypeMeta: metav1.TypeMeta{
					APIVersion: admissionregistrationv1.SchemeGroupVersion.String(),
					Kind:       "MutatingAdmissionPolicyBinding",
				},
				ObjectMeta: metav1.ObjectMeta{
					Name:   InjectionBindingName(m.Name, legacy),
					Labels: map[string]string{ManagedByLabel: "true"},
				},
				Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{
					PolicyName: InjectionPolicy,
					ParamRef:   &admissionregistrationv1.ParamRef{Name: m.Name, ParameterNotFoundAction: &deny},
					MatchResources: &admissionregistrationv1.MatchResources{
						NamespaceSelector: injectionNamespaces(legacy, agentNamespace),
						ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
							imperatorv1alpha1.MachineGroupKey: group,
							imperatorv1alpha1.PodRoleKey:      string(imperatorv1alpha1.PodRoleGuest),
						}},
					},
				},
			})
		}
	}
	return bindings
}

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicybindings,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingadmissionpolicybindings,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=machines,verbs=get;list;watch

// Binding returns the binding of UnknownGroupPolicy for machines: it
// selects the guests (pod-role=guest) whose machine-group label is none of
// the groups the Machines are labelled with (guests without the label
// included), or every guest when no Machine has a group. The groups are sorted and deduplicated,
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
	// Only guests: every other pod skips the policy without any CEL.
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{imperatorv1alpha1.PodRoleKey: string(imperatorv1alpha1.PodRoleGuest)}}
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

// AmbiguousGroupBinding returns the binding of AmbiguousGroupPolicy for
// machines: it selects the guests of the groups that several Machines (not
// being deleted) are labelled with, sorted; nil when every group has one
// Machine (a selector cannot say "In []").
func AmbiguousGroupBinding(machines []imperatorv1alpha1.Machine) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	count := map[string]int{}
	for _, m := range machines {
		if g := m.Labels[imperatorv1alpha1.MachineGroupKey]; g != "" && m.DeletionTimestamp.IsZero() {
			count[g]++
		}
	}
	var ambiguous []string
	for g, n := range count {
		if n > 1 {
			ambiguous = append(ambiguous, g)
		}
	}
	if len(ambiguous) == 0 {
		return nil
	}
	slices.Sort(ambiguous)
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta: metav1.TypeMeta{
			APIVersion: admissionregistrationv1.SchemeGroupVersion.String(),
			Kind:       "ValidatingAdmissionPolicyBinding",
		},
		ObjectMeta: metav1.ObjectMeta{Name: AmbiguousGroupPolicy},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        AmbiguousGroupPolicy,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{ObjectSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{imperatorv1alpha1.PodRoleKey: string(imperatorv1alpha1.PodRoleGuest)},
				MatchExpressions: []metav1.LabelSelectorRequirement{{
					Key: imperatorv1alpha1.MachineGroupKey, Operator: metav1.LabelSelectorOpIn, Values: ambiguous,
				}},
			}},
		},
	}
}

// The agent's --injection values: where guests are injected.
const (
	// ModeAuto is ModePolicy when the API server serves
	// MutatingAdmissionPolicies (admissionregistration.k8s.io/v1,
	// Kubernetes 1.36 and later), else ModeWebhook.
	ModeAuto = "auto"
	// ModePolicy: the agent writes the bindings of the injection policies.
	ModePolicy = "policy"
	// ModeWebhook: the agent's webhook injects; the agent deletes the
	// bindings it wrote, so one path injects.
	ModeWebhook = "webhook"
)

// Modes are the values of --injection.
var Modes = []string{ModeAuto, ModePolicy, ModeWebhook}

// UsePolicy resolves mode: whether the agent maintains the injection
// policies' bindings. ModeAuto asks discovery whether the API server serves
// mutatingadmissionpolicies in admissionregistration.k8s.io/v1.
func UsePolicy(mode string, disc discovery.DiscoveryInterface) (bool, error) {
	switch mode {
	case ModePolicy:
		return true, nil
	case ModeWebhook:
		return false, nil
	case ModeAuto:
		resources, err := disc.ServerResourcesForGroupVersion(admissionregistrationv1.SchemeGroupVersion.String())
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("discovering %s: %w", admissionregistrationv1.SchemeGroupVersion, err)
		}
		return slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool {
			return r.Name == "mutatingadmissionpolicies"
		}), nil
	default:
		return false, fmt.Errorf("injection mode %q: must be one of %v", mode, Modes)
	}
}

// Reconciler applies InjectionBindings and Binding of the Machines it
// lists whenever a Machine changes (Enabled), or deletes the bindings it
// wrote (not Enabled: the webhook injects). Every event maps to one
// request: the bindings are decided together.
type Reconciler struct {
	Client  client.Client
	Enabled bool
	// Namespace is the agent's, which guests are never injected in (""
	// AgentNamespace).
	Namespace string
}

// Reconcile lists the Machines, applies their bindings and deletes the
// injection bindings of Machines gone (all of them when not Enabled).
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	var machines imperatorv1alpha1.MachineList
	if err := r.Client.List(ctx, &machines); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing Machines: %w", err)
	}
	wanted := map[string]bool{}
	var errs []error
	if r.Enabled {
		for _, binding := range InjectionBindings(machines.Items, r.Namespace) {
			wanted[binding.Name] = true
			errs = append(errs, r.apply(ctx, binding))
		}
		errs = append(errs, r.apply(ctx, Binding(machines.Items)))
		if ambiguous := AmbiguousGroupBinding(machines.Items); ambiguous != nil {
			errs = append(errs, r.apply(ctx, ambiguous))
		} else {
			errs = append(errs, r.deleteValidatingBinding(ctx, AmbiguousGroupPolicy))
		}
	} else {
		errs = append(errs, r.deleteValidatingBinding(ctx, UnknownGroupPolicy), r.deleteValidatingBinding(ctx, AmbiguousGroupPolicy))
	}
	var existing admissionregistrationv1.MutatingAdmissionPolicyBindingList
	if err := r.Client.List(ctx, &existing, client.HasLabels{ManagedByLabel}); err != nil {
		errs = append(errs, fmt.Errorf("listing MutatingAdmissionPolicyBindings: %w", err))
	}
	for i := range existing.Items {
		if b := &existing.Items[i]; !wanted[b.Name] {
			if err := r.Client.Delete(ctx, b); client.IgnoreNotFound(err) != nil {
				errs = append(errs, fmt.Errorf("deleting MutatingAdmissionPolicyBinding %s: %w", b.Name, err))
			}
		}
	}
	return reconcile.Result{}, errors.Join(errs...)
}

// deleteValidatingBinding deletes the ValidatingAdmissionPolicyBinding
// name, when there is one.
func (r *Reconciler) deleteValidatingBinding(ctx context.Context, name string) error {
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := r.Client.Delete(ctx, binding); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting ValidatingAdmissionPolicyBinding %s: %w", name, err)
	}
	return nil
}

// apply applies obj with FieldOwner.
func (r *Reconciler) apply(ctx context.Context, obj client.Object) error {
	u, err := toUnstructured(obj)
	if err != nil {
		return err
	}
	if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
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

// toUnstructured converts obj for a server-side apply.
func toUnstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting %T: %w", obj, err)
	}
	u := &unstructured.Unstructured{Object: content}
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	return u, nil
}

// UsePolicyAt resolves mode as UsePolicy does, asking the discovery of the
// API server config reaches.
func UsePolicyAt(config *rest.Config, mode string) (bool, error) {
	if mode != ModeAuto {
		return UsePolicy(mode, nil)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		return false, fmt.Errorf("creating the discovery client: %w", err)
	}
	return UsePolicy(mode, disc)
}

// WithoutInjectorWebhook deletes the pod injector's
// MutatingWebhookConfiguration name, when there is one: on the policy path
// the API server injects, and the webhook would inject a second time and
// refuse every guest while the agent is down (failurePolicy Fail).
func WithoutInjectorWebhook(ctx context.Context, c client.Client, name string) error {
	registration := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Delete(ctx, registration); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting MutatingWebhookConfiguration %s (guests are injected by admission policy): %w", name, err)
	}
	return nil
}
