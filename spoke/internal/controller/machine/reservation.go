package machine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/machinetype"
	"github.com/imperator-federation/imperator/spoke/internal/reservation"
)

const (
	// placeholderContainer is the name of the reservation pod's only container.
	placeholderContainer = "placeholder"
	// reservationPriority is the priority of reservation pods: the default
	// priority of workloads, so that guests (and other workloads of default
	// priority) do not preempt them. The handover is the controller's: a
	// waiting guest scales the reservation down, and the deleted reservation
	// pod (no grace period) makes the scheduler retry the guest at once.
	// Letting guests preempt reservations instead races the scheduler's
	// preemption against that scale-down: both delete the same pod, and the
	// kube-scheduler 1.36 can then leave the guest pending for minutes
	// (kubernetes/kubernetes#139162). Both hand over in about 0.6 s here.
	reservationPriority int32 = 0
	// nonRootUser runs the placeholder; pause images use it.
	nonRootUser int64 = 65535
)

// reservationLabels are the labels of a reservation StatefulSet, its pods and
// its Service (docs/contract.md, Names).
func reservationLabels(group, machineType string) map[string]string {
	return map[string]string{
		imperatorv1alpha1.MachineGroupKey: group,
		imperatorv1alpha1.MachineTypeKey:  machineType,
		imperatorv1alpha1.PodRoleKey:      string(imperatorv1alpha1.PodRoleReservation),
	}
}

// ownerReference makes the Machine the controller of a reservation object, so
// that the garbage collector removes it with the Machine.
func ownerReference(machine *imperatorv1alpha1.Machine) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(imperatorv1alpha1.GroupVersion.String()).
		WithKind("Machine").
		WithName(machine.Name).
		WithUID(machine.UID).
		WithController(true).
		WithBlockOwnerDeletion(true)
}

// reservationService is the headless Service of a machine type's reservation
// StatefulSet, named <machine-type>-<machine-group>. The original Imperator
// asks for a ClusterIP Service without ports, which the API rejects; a
// headless one is what a StatefulSet's serviceName wants anyway.
func reservationService(machine *imperatorv1alpha1.Machine, group, namespace, machineType string) *corev1ac.ServiceApplyConfiguration {
	labels := reservationLabels(group, machineType)
	return corev1ac.Service(imperatorv1alpha1.ReservationName(machineType, group), namespace).
		WithLabels(labels).
		WithOwnerReferences(ownerReference(machine)).
		WithSpec(corev1ac.ServiceSpec().
			WithType(corev1.ServiceTypeClusterIP).
			WithClusterIP(corev1.ClusterIPNone).
			WithSelector(labels))
}

// reservationStatefulSet is the StatefulSet whose pods hold replicas units of
// a machine type on the type's ready nodes: requests = limits of the type's
// shape, the tolerations and the required node affinity a guest of the type
// gets from the injector, the reservation priority and no grace period,
// so that a guest takes the place of a reservation pod within seconds.
func reservationStatefulSet(machine *imperatorv1alpha1.Machine, group, namespace string, machineType *imperatorv1alpha1.MachineType,
	replicas int32, opts Options) *appsv1ac.StatefulSetApplyConfiguration {
	name := imperatorv1alpha1.ReservationName(machineType.Name, group)
	labels := reservationLabels(group, machineType.Name)

	resources := machinetype.Resources(machineType.Spec)

	requirements := make([]*corev1ac.NodeSelectorRequirementApplyConfiguration, 0, 5)
	for _, r := range machinetype.Placement(group, machineType) {
		requirements = append(requirements, corev1ac.NodeSelectorRequirement().
			WithKey(r.Key).WithOperator(r.Operator).WithValues(r.Values...))
	}
	tolerations := make([]*corev1ac.TolerationApplyConfiguration, 0, 2)
	for _, t := range machinetype.Tolerations(group, machineType.Name) {
		tolerations = append(tolerations, corev1ac.Toleration().
			WithKey(t.Key).WithOperator(t.Operator).WithValue(t.Value).WithEffect(t.Effect))
	}

	pod := corev1ac.PodSpec().
		WithPriorityClassName(opts.PriorityClassName).
		WithTerminationGracePeriodSeconds(0).
		WithAutomountServiceAccountToken(false).
		WithEnableServiceLinks(false).
		WithTolerations(tolerations...).
		WithAffinity(corev1ac.Affinity().WithNodeAffinity(corev1ac.NodeAffinity().
			WithRequiredDuringSchedulingIgnoredDuringExecution(corev1ac.NodeSelector().
				WithNodeSelectorTerms(corev1ac.NodeSelectorTerm().WithMatchExpressions(requirements...))))).
		WithSecurityContext(corev1ac.PodSecurityContext().
			WithRunAsNonRoot(true).
			WithRunAsUser(nonRootUser).
			WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))).
		WithContainers(corev1ac.Container().
			WithName(placeholderContainer).
			WithImage(opts.Image).
			WithResources(corev1ac.ResourceRequirements().WithRequests(resources).WithLimits(resources)).
			WithSecurityContext(corev1ac.SecurityContext().
				WithAllowPrivilegeEscalation(false).
				WithReadOnlyRootFilesystem(true).
				WithCapabilities(corev1ac.Capabilities().WithDrop("ALL"))))

	return appsv1ac.StatefulSet(name, namespace).
		WithLabels(labels).
		WithOwnerReferences(ownerReference(machine)).
		WithSpec(appsv1ac.StatefulSetSpec().
			WithReplicas(replicas).
			WithServiceName(name).
			// Parallel: scaling creates and deletes every pod at once instead of
			// one ordinal at a time.
			WithPodManagementPolicy(appsv1.ParallelPodManagement).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(labels).
				WithSpec(pod)))
}

// reservationPriorityClass is the PriorityClass reservation pods need: the
// default priority, and never preempting anything itself. deploy/spoke ships
// it (agent/priorityclass.yaml, which a unit test holds equal to this); the
// agent only compares the one it finds with it.
func reservationPriorityClass(name string) *schedulingv1.PriorityClass {
	return &schedulingv1.PriorityClass{
		ObjectMeta:       metav1.ObjectMeta{Name: name},
		Value:            reservationPriority,
		PreemptionPolicy: ptr.To(corev1.PreemptNever),
		GlobalDefault:    false,
	}
}

// statefulSetInSync tells whether the StatefulSet the API server has already
// carries everything of the desired apply configuration: its labels, the
// Machine as controller, and the spec (fields the desired spec leaves unset
// may hold defaults).
func statefulSetInSync(existing *appsv1.StatefulSet, desired *appsv1ac.StatefulSetApplyConfiguration) (bool, error) {
	want := &appsv1.StatefulSet{}
	if err := roundTrip(desired, want); err != nil {
		return false, err
	}
	return metadataInSync(&existing.ObjectMeta, &want.ObjectMeta) &&
		equality.Semantic.DeepDerivative(want.Spec, existing.Spec), nil
}

// serviceInSync is statefulSetInSync for the reservation Service.
func serviceInSync(existing *corev1.Service, desired *corev1ac.ServiceApplyConfiguration) (bool, error) {
	want := &corev1.Service{}
	if err := roundTrip(desired, want); err != nil {
		return false, err
	}
	return metadataInSync(&existing.ObjectMeta, &want.ObjectMeta) &&
		equality.Semantic.DeepDerivative(want.Spec, existing.Spec), nil
}

func metadataInSync(existing, want *metav1.ObjectMeta) bool {
	for k, v := range want.Labels {
		if existing.Labels[k] != v {
			return false
		}
	}
	for _, ref := range want.OwnerReferences {
		owner := metav1.GetControllerOfNoCopy(existing)
		if owner == nil || owner.UID != ref.UID {
			return false
		}
	}
	return true
}

// roundTrip turns an apply configuration into the typed object it describes.
func roundTrip(in, out any) error {
	data, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encoding apply configuration: %w", err)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decoding apply configuration: %w", err)
	}
	return nil
}

// conflictError is an object with a reservation's name that the Machine does
// not control.
type conflictError struct {
	kind, namespace, name, machine string
	// earlier is set when the object is an earlier Machine's of the same
	// name that is being deleted: it cannot be taken over.
	earlier bool
	// otherMachine names the Machine of another name that controls the
	// object, if one does: that Machine runs the group's line.
	otherMachine string
}

func (e *conflictError) Error() string {
	if e.earlier {
		return fmt.Sprintf("%s %s/%s of an earlier Machine %s is being deleted", e.kind, e.namespace, e.name, e.machine)
	}
	return fmt.Sprintf("%s %s/%s exists and is not controlled by Machine %s", e.kind, e.namespace, e.name, e.machine)
}

// ownedByEarlier tells whether obj's controller is an earlier Machine of
// the same name as machine: one deleted, with machine created in its place
// before the garbage collector removed what it owned. Machines are
// cluster-scoped, so no Machine of that UID can come back.
func ownedByEarlier(obj client.Object, machine *imperatorv1alpha1.Machine) bool {
	ref := machineControllerOf(obj)
	return ref != nil && ref.Name == machine.Name && ref.UID != machine.UID
}

// machineControllerOf is obj's controller reference when it is a Machine.
func machineControllerOf(obj client.Object) *metav1.OwnerReference {
	ref := metav1.GetControllerOfNoCopy(obj)
	if ref == nil || ref.Kind != "Machine" {
		return nil
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != imperatorv1alpha1.GroupVersion.Group {
		return nil
	}
	return ref
}

// applyReservation server-side applies the Service and StatefulSet of one
// machine type when the cached ones differ from what they should be.
func (r *Reconciler) applyReservation(ctx context.Context, c client.Client, recorder events.EventRecorder,
	machine *imperatorv1alpha1.Machine, group string, machineType *imperatorv1alpha1.MachineType, replicas int32) error {
	log := ctrl.LoggerFrom(ctx)
	name := imperatorv1alpha1.ReservationName(machineType.Name, group)
	key := client.ObjectKey{Namespace: r.opts.Namespace, Name: name}

	svc := &corev1.Service{}
	if err := getControlled(ctx, c, key, svc, machine); err != nil {
		return err
	}
	desiredSvc := reservationService(machine, group, r.opts.Namespace, machineType.Name)
	inSync, err := serviceInSync(svc, desiredSvc)
	if err != nil {
		return err
	}
	if !inSync {
		if err := c.Apply(ctx, desiredSvc, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying Service %s: %w", klog.KRef(key.Namespace, key.Name), err)
		}
		log.V(1).Info("Applied reservation Service", "service", klog.KRef(key.Namespace, key.Name))
	}

	sts := &appsv1.StatefulSet{}
	if err := getControlled(ctx, c, key, sts, machine); err != nil {
		return err
	}
	desired := reservationStatefulSet(machine, group, r.opts.Namespace, machineType, replicas, r.opts)
	inSync, err = statefulSetInSync(sts, desired)
	if err != nil {
		return err
	}
	if inSync {
		return nil
	}
	if err := c.Apply(ctx, desired, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying StatefulSet %s: %w", klog.KRef(key.Namespace, key.Name), err)
	}
	switch {
	case sts.UID == "":
		log.V(1).Info("Created reservation StatefulSet", "statefulSet", klog.KRef(key.Namespace, key.Name), "replicas", replicas)
		recorder.Eventf(machine, nil, corev1.EventTypeNormal, "ReservationCreated", "Create",
			"Created StatefulSet %s/%s reserving %d of %d %s", key.Namespace, name, replicas, machineType.Available, machineType.Name)
	case sts.Spec.Replicas == nil || *sts.Spec.Replicas != replicas:
		from := int32(0)
		if sts.Spec.Replicas != nil {
			from = *sts.Spec.Replicas
		}
		log.V(1).Info("Scaled reservation StatefulSet", "statefulSet", klog.KRef(key.Namespace, key.Name), "from", from, "to", replicas)
		recorder.Eventf(machine, nil, corev1.EventTypeNormal, "ReservationScaled", "Scale",
			"Scaled the %s reservation from %d to %d of %d available", machineType.Name, from, replicas, machineType.Available)
	default:
		log.V(1).Info("Updated reservation StatefulSet", "statefulSet", klog.KRef(key.Namespace, key.Name))
	}
	return nil
}

// getControlled reads obj from the cache and fails with a conflictError when
// it exists without the Machine as its controller. A missing obj is left
// empty. One that an earlier Machine of the same name controls is the
// Machine's to take over (the apply makes it the controller): waiting for
// the garbage collector instead keeps every guest out until it comes round
// to it, which can take it tens of seconds, and the reservation pods it
// would delete hold the very units the Machine reserves again.
func getControlled(ctx context.Context, c client.Client, key client.ObjectKey, obj client.Object, machine *imperatorv1alpha1.Machine) error {
	if err := c.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("getting %T %s: %w", obj, key, err)
	}
	if metav1.IsControlledBy(obj, machine) {
		return nil
	}
	earlier := ownedByEarlier(obj, machine)
	if earlier && obj.GetDeletionTimestamp().IsZero() {
		ctrl.LoggerFrom(ctx).V(1).Info("Taking over a reservation object of an earlier Machine of this name", "object", klog.KObj(obj),
			"earlierUID", metav1.GetControllerOfNoCopy(obj).UID)
		return nil
	}
	kind := "StatefulSet"
	if _, ok := obj.(*corev1.Service); ok {
		kind = "Service"
	}
	conflict := &conflictError{kind: kind, namespace: key.Namespace, name: key.Name, machine: machine.Name, earlier: earlier}
	if ref := machineControllerOf(obj); ref != nil && ref.Name != machine.Name {
		conflict.otherMachine = ref.Name
	}
	return conflict
}

// prune deletes the reservation StatefulSets and Services the Machine
// controls whose names are not in keep: machine types no longer served, or a
// machine group that changed; and those an earlier Machine of its name left
// that it does not take over.
//
// It reads every reservation object of the namespace (those of other
// Machines too) on each reconcile, as the cache holds them and without
// copies: it only reads them and deletes by name and UID. A copy of each
// of 50 StatefulSets per reconcile was a fifth of the agent's CPU while
// 1,000 nodes converged.
func (r *Reconciler) prune(ctx context.Context, c client.Client, machine *imperatorv1alpha1.Machine, keep map[string]bool) error {
	stale, err := reservation.Objects(ctx, c, r.opts.Namespace, client.UnsafeDisableDeepCopy)
	if err != nil {
		return err
	}
	stale = slices.DeleteFunc(stale, func(obj client.Object) bool {
		return keep[obj.GetName()] || (!metav1.IsControlledBy(obj, machine) && !ownedByEarlier(obj, machine)) || !obj.GetDeletionTimestamp().IsZero()
	})
	var errs []error
	for _, obj := range stale {
		err := c.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground),
			client.Preconditions{UID: ptr.To(obj.GetUID())})
		if client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting %T %s: %w", obj, klog.KObj(obj), err))
			continue
		}
		ctrl.LoggerFrom(ctx).V(1).Info("Deleted stale reservation object", "object", klog.KObj(obj), "kind", fmt.Sprintf("%T", obj))
	}
	return errors.Join(errs...)
}
