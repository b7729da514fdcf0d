package machinevalidator

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	webhookmetrics "github.com/imperator-federation/imperator/spoke/internal/webhook/metrics"
)

// WebhookPath is where the agent's webhook server serves the validator: the
// path controller-runtime's webhook builder derives for Machine.
const WebhookPath = "/validate-imperator-tenzen-y-io-v1alpha1-machine"

// +kubebuilder:webhook:path=/validate-imperator-tenzen-y-io-v1alpha1-machine,mutating=false,failurePolicy=fail,sideEffects=None,groups=imperator.tenzen-y.io,resources=machines,verbs=create;update,versions=v1alpha1,name=machine-validator.imperator.tenzen-y.io,admissionReviewVersions=v1,timeoutSeconds=5,matchPolicy=Equivalent
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=machines,verbs=get;list;watch

// Validator validates Machines on create and update.
type Validator struct {
	// Reader lists other Machines; the manager's cache, with the
	// MachineNodeNameKey index.
	Reader client.Reader
}

var _ admission.Validator[*imperatorv1alpha1.Machine] = (*Validator)(nil)

// SetupWebhookWithManager registers the index and serves the validator at
// WebhookPath on the manager's webhook server.
func SetupWebhookWithManager(mgr ctrl.Manager) error {
	// Before the manager starts, registering an index only adds it to the
	// informer to come; the context is not waited on.
	if err := SetupIndexer(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &imperatorv1alpha1.Machine{}).
		WithValidator(webhookmetrics.Validator[*imperatorv1alpha1.Machine](webhookmetrics.MachineValidator, &Validator{Reader: mgr.GetCache()})).
		WithValidatorCustomPath(WebhookPath).
		Complete(); err != nil {
		return fmt.Errorf("registering the Machine validator: %w", err)
	}
	return nil
}

// ValidateCreate checks a new Machine.
func (v *Validator) ValidateCreate(ctx context.Context, machine *imperatorv1alpha1.Machine) (admission.Warnings, error) {
	errs := ValidateMachine(machine)
	if len(errs) == 0 {
		crossErrs, err := v.validateAgainstOthers(ctx, machine, nil)
		if err != nil {
			return nil, err
		}
		errs = crossErrs
	}
	return nil, invalid(ctx, machine, errs)
}

// ValidateUpdate checks a changed Machine. Updates that change neither the
// spec nor the machine-group label are admitted as they are. Rules across
// Machines apply only to what the update adds (a node newly listed), so that
// a conflict admitted by racing requests can still be resolved by editing
// either Machine.
func (v *Validator) ValidateUpdate(ctx context.Context, oldMachine, machine *imperatorv1alpha1.Machine) (admission.Warnings, error) {
	if !machine.DeletionTimestamp.IsZero() {
		// Finalizers must be removable whatever the object holds.
		return nil, nil
	}
	group := machine.Labels[imperatorv1alpha1.MachineGroupKey]
	if group == oldMachine.Labels[imperatorv1alpha1.MachineGroupKey] && equality.Semantic.DeepEqual(oldMachine.Spec, machine.Spec) {
		// Metadata only (finalizers, annotations, other labels): a Machine
		// admitted before a rule existed must not block its controllers.
		return nil, nil
	}
	errs := append(ValidateMachine(machine), ValidateLabelUpdate(oldMachine, machine)...)
	if len(errs) == 0 {
		crossErrs, err := v.validateAgainstOthers(ctx, machine, oldMachine)
		if err != nil {
			return nil, err
		}
		errs = crossErrs
	}
	return nil, invalid(ctx, machine, errs)
}

// ValidateDelete allows every deletion; the webhook is not registered for it.
func (v *Validator) ValidateDelete(context.Context, *imperatorv1alpha1.Machine) (admission.Warnings, error) {
	return nil, nil
}

func invalid(ctx context.Context, machine *imperatorv1alpha1.Machine, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Denied Machine", "machine", klog.KObj(machine), "errors", errs.ToAggregate().Error())
	return apierrors.NewInvalid(imperatorv1alpha1.GroupVersion.WithKind("Machine").GroupKind(), machine.Name, errs)
}

var groupLabelPath = field.NewPath("metadata", "labels").Key(imperatorv1alpha1.MachineGroupKey)

// ValidateMachine checks one Machine on its own.
func ValidateMachine(machine *imperatorv1alpha1.Machine) field.ErrorList {
	var errs field.ErrorList
	group := machine.Labels[imperatorv1alpha1.MachineGroupKey]
	if group == "" {
		errs = append(errs, field.Required(groupLabelPath, "every Machine names its machine group"))
	}
	if group != "" {
		// The group is part of object names: <machine-type>-<machine-group>.
		for _, msg := range validation.IsDNS1123Label(group) {
			errs = append(errs, field.Invalid(groupLabelPath, group, msg))
		}
	}
	groupValid := len(errs) == 0

	typesPath := field.NewPath("spec", "machineTypes")
	types := make([]string, 0, len(machine.Spec.MachineTypes))
	for i, machineType := range machine.Spec.MachineTypes {
		path := typesPath.Index(i)
		types = append(types, machineType.Name)
		if slices.Contains(imperatorv1alpha1.ReservedMachineTypeNames, machineType.Name) {
			errs = append(errs, field.Invalid(path.Child("name"), machineType.Name,
				fmt.Sprintf("is reserved: %s is one of Imperator's own keys", imperatorv1alpha1.MachineTypeKeyFor(machineType.Name))))
		}
		if machineType.Spec.CPU.Sign() <= 0 {
			errs = append(errs, field.Invalid(path.Child("spec", "cpu"), machineType.Spec.CPU.String(), "must be positive"))
		}
		if machineType.Spec.Memory.Sign() <= 0 {
			errs = append(errs, field.Invalid(path.Child("spec", "memory"), machineType.Spec.Memory.String(), "must be positive"))
		}
		if groupValid {
			// The reservation StatefulSet and Service are named
			// <machine-type>-<machine-group>; a Service name is a DNS-1035 label.
			name := imperatorv1alpha1.ReservationName(machineType.Name, group)
			for _, msg := range validation.IsDNS1035Label(name) {
				errs = append(errs, field.Invalid(path.Child("name"), machineType.Name,
					fmt.Sprintf("the reservation Service name %q (<machine-type>-<machine-group>) is invalid: %s", name, msg)))
			}
		}
	}

	poolPath := field.NewPath("spec", "nodePool")
	named := make(map[string]bool, len(machine.Spec.NodePool))
	for i, entry := range machine.Spec.NodePool {
		errs = append(errs, validateNodeChoice(poolPath.Index(i), entry, named)...)
		path := poolPath.Index(i).Child("machineType")
		if len(entry.MachineType) != 1 {
			errs = append(errs, field.Invalid(path, len(entry.MachineType), "must name exactly one machine type"))
			continue
		}
		if name := entry.MachineType[0].Name; !slices.Contains(types, name) {
			// The CRD's rule says the same; it answers first.
			errs = append(errs, field.Invalid(path.Index(0).Child("name"), name, "must name an entry of spec.machineTypes"))
		}
	}
	return errs
}

// validateNodeChoice checks that entry names a node (once in the Machine:
// the list is atomic, so the API server does not) or selects nodes by a
// valid, non-empty label selector, not both. named collects the names seen.
func validateNodeChoice(path *field.Path, entry imperatorv1alpha1.NodePool, named map[string]bool) field.ErrorList {
	switch {
	case entry.Name != "" && entry.NodeSelector != nil:
		return field.ErrorList{field.Invalid(path.Child("nodeSelector"), "", "name and nodeSelector are exclusive: set exactly one")}
	case entry.NodeSelector != nil:
		selectorPath := path.Child("nodeSelector")
		errs := metav1validation.ValidateLabelSelector(entry.NodeSelector, metav1validation.LabelSelectorValidationOptions{}, selectorPath)
		if len(entry.NodeSelector.MatchLabels) == 0 && len(entry.NodeSelector.MatchExpressions) == 0 {
			errs = append(errs, field.Required(selectorPath, "an empty selector would take every node: give matchLabels or matchExpressions"))
		}
		return errs
	case entry.Name == "":
		return field.ErrorList{field.Required(path.Child("name"), "name a node or give a nodeSelector")}
	case named[entry.Name]:
		return field.ErrorList{field.Duplicate(path.Child("name"), entry.Name)}
	default:
		named[entry.Name] = true
		return nil
	}
}

// ValidateLabelUpdate keeps the machine-group label as it was: pods, nodes,
// reservation workloads and the MachineNodePool carry it. A Machine admitted
// without it may get one.
func ValidateLabelUpdate(oldMachine, machine *imperatorv1alpha1.Machine) field.ErrorList {
	oldGroup := oldMachine.Labels[imperatorv1alpha1.MachineGroupKey]
	group := machine.Labels[imperatorv1alpha1.MachineGroupKey]
	if oldGroup != "" && group != oldGroup {
		return field.ErrorList{field.Invalid(groupLabelPath, group, fmt.Sprintf("is immutable (was %q)", oldGroup))}
	}
	return nil
}

// validateAgainstOthers checks that no other Machine has the group and that
// no node added by this request (every node on create, when oldMachine is
// nil) is in another Machine: a name or a selector this request adds must
// not take a node that another Machine names, nor an existing node that
// another Machine's selector matches (overlap.go).
func (v *Validator) validateAgainstOthers(ctx context.Context, machine, oldMachine *imperatorv1alpha1.Machine) (field.ErrorList, error) {
	var errs field.ErrorList
	group := machine.Labels[imperatorv1alpha1.MachineGroupKey]
	if oldMachine == nil || oldMachine.Labels[imperatorv1alpha1.MachineGroupKey] != group {
		sameGroup := &imperatorv1alpha1.MachineList{}
		if err := v.Reader.List(ctx, sameGroup, client.MatchingLabels{imperatorv1alpha1.MachineGroupKey: group}); err != nil {
			return nil, fmt.Errorf("listing the Machines of group %s: %w", group, err)
		}
		for _, other := range sameGroup.Items {
			if other.Name != machine.Name {
				errs = append(errs, field.Invalid(groupLabelPath, group,
					fmt.Sprintf("machine group %q is already used by Machine %s; a machine group belongs to one Machine", group, other.Name)))
				break
			}
		}
	}

	var listedBefore map[string]bool
	if oldMachine != nil {
		listedBefore = make(map[string]bool, len(oldMachine.Spec.NodePool))
		for _, entry := range oldMachine.Spec.NodePool {
			if entry.NodeSelector == nil {
				listedBefore[entry.Name] = true
			}
		}
	}
	poolPath := field.NewPath("spec", "nodePool")
	for i, entry := range machine.Spec.NodePool {
		if entry.NodeSelector != nil {
			if !selectedBefore(oldMachine, entry.NodeSelector) {
				selectorErrs, err := v.validateSelectorOverlap(ctx, machine, poolPath.Index(i).Child("nodeSelector"), entry.NodeSelector)
				if err != nil {
					return nil, err
				}
				errs = append(errs, selectorErrs...)
			}
			continue
		}
		if listedBefore[entry.Name] {
			continue
		}
		selectedErr, err := v.validateNameSelected(ctx, machine, poolPath.Index(i).Child("name"), entry.Name)
		if err != nil {
			return nil, err
		}
		if selectedErr != nil {
			errs = append(errs, selectedErr)
		}
		others := &imperatorv1alpha1.MachineList{}
		if err := v.Reader.List(ctx, others, client.MatchingFields{MachineNodeNameKey: entry.Name}); err != nil {
			return nil, fmt.Errorf("listing the Machines of node %s: %w", entry.Name, err)
		}
		for _, other := range others.Items {
			if other.Name == machine.Name {
				continue
			}
			errs = append(errs, field.Invalid(poolPath.Index(i).Child("name"), entry.Name,
				fmt.Sprintf("node %s is already in Machine %s (machine group %q); a node belongs to one Machine",
					entry.Name, other.Name, other.Labels[imperatorv1alpha1.MachineGroupKey])))
			break
		}
	}
	return errs, nil
}
