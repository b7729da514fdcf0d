package migrate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// handoverHeldAnnotation, on one of the original's StatefulSets, is how many
// units the agent's reservation of the type held when the Adopter last took
// a replica away from it: the next goes only once the agent holds more (the
// released unit was taken by the agent's reservation) or all it wants.
const handoverHeldAnnotation = imperatorv1alpha1.Prefix + "handover-agent-held"

// AdoptionDone is the value of AdoptionAnnotation once nothing of the
// original is left for the Machine's group.
const AdoptionDone = "done"

// DefaultAdoptInterval is how often the Adopter looks at annotated Machines.
const DefaultAdoptInterval = 5 * time.Second

// Adopter hands the Machines annotated AdoptAnnotation=true over from the
// original Imperator: a controller-runtime Runnable that makes a pass every
// Interval. Every write is a patch with an optimistic lock or a delete with
// a UID precondition, so two agents (or a restart) cannot repeat a step.
type Adopter struct {
	Client client.Client
	// Namespace is the agent's: its reservations and the original's it
	// takes over (the original's default namespace is imperator-system too).
	Namespace string
	Interval  time.Duration
}

// Start makes a pass now and then every Interval until ctx ends.
func (a *Adopter) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("migrate")
	ctx = ctrl.LoggerInto(ctx, log)
	interval := a.Interval
	if interval <= 0 {
		interval = DefaultAdoptInterval
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		if err := a.Pass(ctx); err != nil {
			log.Error(err, "Adopting the original's objects")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// Pass adopts, one step each, every Machine annotated AdoptAnnotation=true
// whose adoption is not done. The original's reservations of the namespace
// are detached from their Machines (Detach) once in the pass, before the
// first Machine's step, and only when some Machine takes one.
func (a *Adopter) Pass(ctx context.Context) error {
	items, err := machines(ctx, a.Client)
	if err != nil {
		return err
	}
	detach := sync.OnceValue(func() error { return Detach(ctx, a.Client, a.Namespace) })
	var errs []error
	for i := range items {
		m := &items[i]
		if m.GetAnnotations()[AdoptAnnotation] != "true" || m.GetAnnotations()[AdoptionAnnotation] == AdoptionDone ||
			!m.GetDeletionTimestamp().IsZero() {
			continue
		}
		progress, err := a.adopt(ctx, m, detach)
		if err != nil {
			errs = append(errs, fmt.Errorf("adopting Machine %s: %w", m.GetName(), err))
			if progress == "" {
				progress = err.Error()
			}
		}
		if err := a.setProgress(ctx, m, progress); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// adopt makes one step of a Machine's adoption and says where it stands.
// detach is Detach of the agent's namespace, made once per pass: every
// Machine's step runs after it, and its error fails each Machine's step.
func (a *Adopter) adopt(ctx context.Context, m *unstructured.Unstructured, detach func() error) (string, error) {
	group := m.GetLabels()[imperatorv1alpha1.MachineGroupKey]
	if group == "" {
		return "the Machine has no " + imperatorv1alpha1.MachineGroupKey + " label", nil
	}
	if err := detach(); err != nil {
		return "", err
	}
	pools, err := a.originalPools(ctx, group)
	if err != nil {
		return "", err
	}
	for _, pool := range pools {
		if err := a.removeOldFinalizer(ctx, pool); err != nil {
			return "", err
		}
	}

	statefulSets := &appsv1.StatefulSetList{}
	if err := a.Client.List(ctx, statefulSets, client.InNamespace(a.Namespace), client.MatchingLabels{
		imperatorv1alpha1.PodRoleKey: string(imperatorv1alpha1.PodRoleReservation), imperatorv1alpha1.MachineGroupKey: group,
	}); err != nil {
		return "", fmt.Errorf("listing reservation StatefulSets: %w", err)
	}
	served := machineTypeNames(m)
	var steps []string
	for i := range statefulSets.Items {
		sts := &statefulSets.Items[i]
		if !isOriginalReservation(sts) {
			continue
		}
		step, err := a.handover(ctx, m, sts, served)
		if err != nil {
			return "", err
		}
		steps = append(steps, step)
	}
	if len(steps) > 0 {
		slices.Sort(steps)
		return strings.Join(steps, "; "), nil
	}
	if err := a.deleteOriginalServices(ctx, group); err != nil {
		return "", err
	}
	return a.removeOriginalPools(ctx, m, pools)
}

// handover takes one step of handing a type's units over from the
// original's StatefulSet sts to the agent's reservation of the type.
func (a *Adopter) handover(ctx context.Context, m *unstructured.Unstructured, sts *appsv1.StatefulSet, served map[string]bool) (string, error) {
	log := ctrl.LoggerFrom(ctx)
	group, machineType := sts.Labels[imperatorv1alpha1.MachineGroupKey], sts.Labels[imperatorv1alpha1.MachineTypeKey]
	pods, err := a.reservationPods(ctx, group, machineType)
	if err != nil {
		return "", err
	}
	originalPods := countPods(pods, sts, false)
	replicas := ptr.Deref(sts.Spec.Replicas, 1)

	if replicas == 0 {
		if originalPods > 0 {
			return fmt.Sprintf("%s: %d reservation pod(s) of the original leaving", machineType, originalPods), nil
		}
		if err := a.Client.Delete(ctx, sts, client.Preconditions{UID: ptr.To(sts.UID)}); client.IgnoreNotFound(err) != nil {
			return "", fmt.Errorf("deleting StatefulSet %s: %w", klog.KObj(sts), err)
		}
		log.Info("Deleted the original's reservation StatefulSet", "statefulSet", klog.KObj(sts), "machine", m.GetName())
		return fmt.Sprintf("%s: the original's StatefulSet deleted", machineType), nil
	}
	if !served[machineType] {
		// Units of a type the Machine no longer serves: nobody takes them over.
		return a.scale(ctx, sts, 0, 0, fmt.Sprintf("%s: not a type of the Machine any more, the original's reservation scaled to 0", machineType))
	}

	agent := &appsv1.StatefulSet{}
	key := types.NamespacedName{Namespace: a.Namespace, Name: imperatorv1alpha1.ReservationName(machineType, group)}
	if err := a.Client.Get(ctx, key, agent); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("%s: waiting for the agent's reservation %s", machineType, key.Name), nil
		}
		return "", fmt.Errorf("getting StatefulSet %s: %w", key, err)
	}
	if !controlledBy(agent, m) {
		return fmt.Sprintf("%s: waiting for the agent's reservation %s (not controlled by the Machine)", machineType, key.Name), nil
	}
	held, want := countPods(pods, agent, true), ptr.Deref(agent.Spec.Replicas, 1)
	if held >= want {
		return a.scale(ctx, sts, 0, held, fmt.Sprintf("%s: the agent holds its %d unit(s), the original's reservation scaled to 0", machineType, want))
	}
	if originalPods > replicas {
		return fmt.Sprintf("%s: the agent holds %d of %d unit(s), a reservation pod of the original leaving", machineType, held, want), nil
	}
	if last, ok := sts.Annotations[handoverHeldAnnotation]; ok {
		if previous, err := strconv.Atoi(last); err == nil && int(held) <= previous {
			return fmt.Sprintf("%s: the agent holds %d of %d unit(s), waiting for it to take the unit released", machineType, held, want), nil
		}
	}
	return a.scale(ctx, sts, replicas-1, held,
		fmt.Sprintf("%s: the agent holds %d of %d unit(s), one unit released from the original's reservation", machineType, held, want))
}

// scale sets the replicas of the original's StatefulSet, recording what the
// agent held then.
func (a *Adopter) scale(ctx context.Context, sts *appsv1.StatefulSet, replicas, held int32, progress string) (string, error) {
	before := sts.DeepCopy()
	sts.Spec.Replicas = ptr.To(replicas)
	metav1.SetMetaDataAnnotation(&sts.ObjectMeta, handoverHeldAnnotation, strconv.Itoa(int(held)))
	if err := a.Client.Patch(ctx, sts, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return "", fmt.Errorf("scaling StatefulSet %s to %d: %w", klog.KObj(sts), replicas, err)
	}
	ctrl.LoggerFrom(ctx).Info("Scaled the original's reservation StatefulSet", "statefulSet", klog.KObj(sts), "replicas", replicas, "agentHeld", held)
	return progress, nil
}

// reservationPods are the pods of a type's reservations in the agent's
// namespace: the original's and the agent's carry the same labels.
func (a *Adopter) reservationPods(ctx context.Context, group, machineType string) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := a.Client.List(ctx, pods, client.InNamespace(a.Namespace), client.MatchingLabels{
		imperatorv1alpha1.PodRoleKey:      string(imperatorv1alpha1.PodRoleReservation),
		imperatorv1alpha1.MachineGroupKey: group,
		imperatorv1alpha1.MachineTypeKey:  machineType,
	}); err != nil {
		return nil, fmt.Errorf("listing reservation pods: %w", err)
	}
	return pods.Items, nil
}

// countPods counts the pods sts controls; holding counts only those that
// hold a unit: bound to a node, not finished, not terminating.
func countPods(pods []corev1.Pod, sts *appsv1.StatefulSet, holding bool) int32 {
	var n int32
	for i := range pods {
		pod := &pods[i]
		if !controlledBy(pod, sts) {
			continue
		}
		if holding && (pod.Spec.NodeName == "" || !pod.DeletionTimestamp.IsZero() ||
			pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed) {
			continue
		}
		n++
	}
	return n
}

func machineTypeNames(m *unstructured.Unstructured) map[string]bool {
	names := map[string]bool{}
	types, _, _ := unstructured.NestedSlice(m.Object, "spec", "machineTypes")
	for _, t := range types {
		if tm, ok := t.(map[string]any); ok {
			if name, ok := tm["name"].(string); ok {
				names[name] = true
			}
		}
	}
	return names
}

// deleteOriginalServices deletes the original's reservation Services of the
// group, once its StatefulSets are gone.
func (a *Adopter) deleteOriginalServices(ctx context.Context, group string) error {
	services := &corev1.ServiceList{}
	if err := a.Client.List(ctx, services, client.InNamespace(a.Namespace), client.MatchingLabels{
		imperatorv1alpha1.PodRoleKey: string(imperatorv1alpha1.PodRoleReservation), imperatorv1alpha1.MachineGroupKey: group,
	}); err != nil {
		return fmt.Errorf("listing reservation Services: %w", err)
	}
	var errs []error
	for i := range services.Items {
		svc := &services.Items[i]
		if !isOriginalReservation(svc) {
			continue
		}
		if err := a.Client.Delete(ctx, svc, client.Preconditions{UID: ptr.To(svc.UID)}); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting Service %s: %w", klog.KObj(svc), err))
			continue
		}
		ctrl.LoggerFrom(ctx).Info("Deleted the original's reservation Service", "service", klog.KObj(svc))
	}
	return errors.Join(errs...)
}

// originalPools are the original's pools of group: those with its
// finalizer or its name <machine-group>-node-pool. (Under the agent's CRD
// the API server prunes the original's spec.machineGroupName on read: the
// group comes from the label then.)
func (a *Adopter) originalPools(ctx context.Context, group string) ([]*unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(imperatorv1alpha1.GroupVersion.WithKind("MachineNodePoolList"))
	if err := a.Client.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing MachineNodePools: %w", err)
	}
	var out []*unstructured.Unstructured
	for i := range list.Items {
		pool := &list.Items[i]
		if originalPoolGroup(pool) != group {
			continue
		}
		if !slices.Contains(pool.GetFinalizers(), OriginalNodePoolFinalizer) && pool.GetName() != OriginalNodePoolName(group) {
			continue
		}
		out = append(out, pool)
	}
	return out, nil
}

// removeOldFinalizer removes the original's finalizer from pool, keeping
// any other.
func (a *Adopter) removeOldFinalizer(ctx context.Context, pool *unstructured.Unstructured) error {
	if !slices.Contains(pool.GetFinalizers(), OriginalNodePoolFinalizer) {
		return nil
	}
	before := pool.DeepCopy()
	pool.SetFinalizers(slices.DeleteFunc(pool.GetFinalizers(), func(f string) bool { return f == OriginalNodePoolFinalizer }))
	if err := a.Client.Patch(ctx, pool, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("removing finalizer %s from MachineNodePool %s: %w", OriginalNodePoolFinalizer, pool.GetName(), err)
	}
	ctrl.LoggerFrom(ctx).Info("Removed the original's finalizer from MachineNodePool", "machineNodePool", pool.GetName())
	return nil
}

// removeOriginalPools deletes the original's pools of the Machine's group
// once the agent's own pool of the Machine exists. A pool under the agent's
// name of its controlling Machine (a Machine named as its group) is the
// agent's from then on and stays.
func (a *Adopter) removeOriginalPools(ctx context.Context, m *unstructured.Unstructured, pools []*unstructured.Unstructured) (string, error) {
	own := &unstructured.Unstructured{}
	own.SetGroupVersionKind(imperatorv1alpha1.GroupVersion.WithKind("MachineNodePool"))
	name := imperatorv1alpha1.NodePoolName(m.GetName())
	if err := a.Client.Get(ctx, types.NamespacedName{Name: name}, own); err != nil {
		if apierrors.IsNotFound(err) {
			return "waiting for the agent's MachineNodePool " + name, nil
		}
		return "", fmt.Errorf("getting MachineNodePool %s: %w", name, err)
	}
	if !controlledBy(own, m) {
		return "waiting for the agent's MachineNodePool " + name + " (not controlled by the Machine)", nil
	}
	var errs []error
	for _, pool := range pools {
		if ref := metav1.GetControllerOfNoCopy(pool); ref != nil && ref.Kind == "Machine" && imperatorv1alpha1.NodePoolName(ref.Name) == pool.GetName() {
			continue
		}
		if err := a.Client.Delete(ctx, pool, client.Preconditions{UID: ptr.To(pool.GetUID())}); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting MachineNodePool %s: %w", pool.GetName(), err))
			continue
		}
		ctrl.LoggerFrom(ctx).Info("Deleted the original's MachineNodePool", "machineNodePool", pool.GetName())
	}
	if len(errs) > 0 {
		return "", errors.Join(errs...)
	}
	return AdoptionDone, nil
}

// setProgress writes progress to the Machine's AdoptionAnnotation when it
// changed.
func (a *Adopter) setProgress(ctx context.Context, m *unstructured.Unstructured, progress string) error {
	if m.GetAnnotations()[AdoptionAnnotation] == progress {
		return nil
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, AdoptionAnnotation, progress)
	if err := a.Client.Patch(ctx, m, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("writing the adoption progress on Machine %s: %w", m.GetName(), err)
	}
	return nil
}
