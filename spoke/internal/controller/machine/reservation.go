package machine

import (
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/machinetype"
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
