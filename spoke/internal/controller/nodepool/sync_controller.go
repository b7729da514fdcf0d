package nodepool

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mchandler "sigs.k8s.io/multicluster-runtime/pkg/handler"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=machines,verbs=get;list;watch
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=machines/finalizers,verbs=update
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=machines/status,verbs=get;patch
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=machinenodepools,verbs=get;list;watch;create;patch

// PoolSyncReconciler keeps the MachineNodePool of every Machine: named
// <machine>-node-pool, spec copied from the Machine, labelled with its machine
// group and controlled by it. Deleting the Machine garbage-collects the pool.
type PoolSyncReconciler struct {
	mgr mcmanager.Manager
}

// NewPoolSyncReconciler returns a PoolSyncReconciler for the clusters of mgr.
func NewPoolSyncReconciler(mgr mcmanager.Manager) *PoolSyncReconciler {
	return &PoolSyncReconciler{mgr: mgr}
}

// SetupWithManager registers the reconciler: Machines, and every
// MachineNodePool mapped to the Machine it belongs to or whose name it
// carries (poolToMachines): a pool edited or deleted by hand is put back, and
// a foreign pool that blocked a Machine's name being deleted lets the
// Machine get its pool at once.
func (r *PoolSyncReconciler) SetupWithManager(mgr mcmanager.Manager) error {
	return mcbuilder.ControllerManagedBy(mgr).
		Named("machinenodepool_sync").
		For(&imperatorv1alpha1.Machine{}).
		Watches(&imperatorv1alpha1.MachineNodePool{}, mchandler.EnqueueRequestsFromMapFunc(poolToMachines)).
		WithOptions(controllerOptions(mgr)).
		Complete(r)
}

// poolToMachines maps a MachineNodePool to the Machine controlling it and
// to the Machine whose pool name it has (<machine>-node-pool), when these
// differ: the name's Machine may be waiting for a foreign pool to go.
func poolToMachines(_ context.Context, pool client.Object) []reconcile.Request {
	var requests []reconcile.Request
	owner := ""
	if ref := metav1.GetControllerOf(pool); ref != nil && ref.Kind == "Machine" && strings.HasPrefix(ref.APIVersion, imperatorv1alpha1.GroupVersion.Group+"/") {
		owner = ref.Name
		requests = append(requests, reconcile.Request{NamespacedName: types.NamespacedName{Name: owner}})
	}
	if machine, ok := strings.CutSuffix(pool.GetName(), imperatorv1alpha1.NodePoolName("")); ok && machine != "" && machine != owner {
		requests = append(requests, reconcile.Request{NamespacedName: types.NamespacedName{Name: machine}})
	}
	return requests
}

// DesiredNodePool is the MachineNodePool of machine, without its owner
// reference: spec.machineGroup from the machine-group label, spec.nodePool
// copied, machineTypeStock naming every machine type.
func DesiredNodePool(machine *imperatorv1alpha1.Machine) *imperatorv1alpha1.MachineNodePool {
	group := machine.Labels[imperatorv1alpha1.MachineGroupKey]
	pool := &imperatorv1alpha1.MachineNodePool{
		ObjectMeta: metav1.ObjectMeta{
			Name:   imperatorv1alpha1.NodePoolName(machine.Name),
			Labels: map[string]string{imperatorv1alpha1.MachineGroupKey: group},
		},
		Spec: imperatorv1alpha1.MachineNodePoolSpec{MachineGroup: group},
	}
	for _, entry := range machine.Spec.NodePool {
		pool.Spec.NodePool = append(pool.Spec.NodePool, *entry.DeepCopy())
	}
	for _, machineType := range machine.Spec.MachineTypes {
		pool.Spec.MachineTypeStock = append(pool.Spec.MachineTypeStock, imperatorv1alpha1.MachineTypeRef{Name: machineType.Name})
	}
	return pool
}

// Reconcile creates or corrects the MachineNodePool of a Machine.
func (r *PoolSyncReconciler) Reconcile(ctx context.Context, req mcreconcile.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	cl, err := r.mgr.GetCluster(ctx, req.ClusterName)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("getting cluster %q: %w", req.ClusterName, err)
	}
	c := cl.GetClient()

	machine := &imperatorv1alpha1.Machine{}
	if err := c.Get(ctx, req.NamespacedName, machine); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !machine.DeletionTimestamp.IsZero() {
		// The garbage collector deletes the pool; its finalizer cleans the nodes.
		return ctrl.Result{}, nil
	}
	if machine.Labels[imperatorv1alpha1.MachineGroupKey] == "" {
		// The Machine validator rejects such Machines; one admitted before it
		// ran gets no pool until it is labelled.
		log.V(1).Info("Skipping Machine without machine-group label", "machine", klog.KObj(machine))
		return ctrl.Result{}, nil
	}

	desired := DesiredNodePool(machine)
	current := &imperatorv1alpha1.MachineNodePool{}
	err = c.Get(ctx, client.ObjectKeyFromObject(desired), current)
	switch {
	case apierrors.IsNotFound(err):
		if err := controllerutil.SetControllerReference(machine, desired, c.Scheme()); err != nil {
			return ctrl.Result{}, fmt.Errorf("setting the owner of MachineNodePool %s: %w", desired.Name, err)
		}
		// Created with the node-pool controller's finalizer: that controller
		// configures the nodes on its first look instead of adding the
		// finalizer and waiting for the update event to come back (a round
		// trip and an event of every new pool's configuration time).
		controllerutil.AddFinalizer(desired, imperatorv1alpha1.NodePoolFinalizer)
		if err := c.Create(ctx, desired); err != nil {
			return ctrl.Result{}, fmt.Errorf("creating MachineNodePool %s: %w", desired.Name, err)
		}
		log.V(1).Info("Created MachineNodePool", "machineNodePool", klog.KObj(desired))
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("getting MachineNodePool %s: %w", desired.Name, err)
	}

	if !metav1.IsControlledBy(current, machine) {
		// Someone else's object under our name: leave it and say so on the
		// Machine. Its deletion (or a change of owner) enqueues the Machine
		// again through poolToMachines.
		log.Info("MachineNodePool of the Machine's name is not controlled by it", "machineNodePool", klog.KObj(current))
		return ctrl.Result{}, setPoolConflict(ctx, c, machine, poolConflictCondition(machine, current))
	}
	if err := setPoolConflict(ctx, c, machine, poolConflictCondition(machine, nil)); err != nil {
		return ctrl.Result{}, err
	}
	if !current.DeletionTimestamp.IsZero() {
		// Being cleaned up (its finalizer runs); the delete event brings us
		// back to recreate it.
		return ctrl.Result{}, nil
	}
	group := desired.Labels[imperatorv1alpha1.MachineGroupKey]
	if current.Labels[imperatorv1alpha1.MachineGroupKey] == group && equality.Semantic.DeepEqual(current.Spec, desired.Spec) {
		return ctrl.Result{}, nil
	}
	// A merge patch replaces spec's lists as a whole: the spec is ours alone.
	patch := client.MergeFromWithOptions(current.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if current.Labels == nil {
		current.Labels = map[string]string{}
	}
	current.Labels[imperatorv1alpha1.MachineGroupKey] = group
	current.Spec = desired.Spec
	if err := c.Patch(ctx, current, patch); err != nil {
		return ctrl.Result{}, fmt.Errorf("updating MachineNodePool %s: %w", current.Name, err)
	}
	log.V(1).Info("Updated MachineNodePool", "machineNodePool", klog.KObj(current))
	return ctrl.Result{}, nil
}

// poolConflictCondition is the NodePoolConflict condition of machine when
// pool (nil: none) holds its pool name: True naming the pool's controller
// when the Machine does not control it, False otherwise.
func poolConflictCondition(machine *imperatorv1alpha1.Machine, pool *imperatorv1alpha1.MachineNodePool) metav1.Condition {
	if pool == nil {
		return metav1.Condition{
			Type:               imperatorv1alpha1.ConditionNodePoolConflict,
			Status:             metav1.ConditionFalse,
			Reason:             imperatorv1alpha1.ReasonNodePoolControlled,
			Message:            fmt.Sprintf("MachineNodePool %s is controlled by this Machine", imperatorv1alpha1.NodePoolName(machine.Name)),
			ObservedGeneration: machine.Generation,
		}
	}
	controller := "no controller"
	if ref := metav1.GetControllerOf(pool); ref != nil {
		controller = fmt.Sprintf("%s %s", ref.Kind, ref.Name)
	}
	return metav1.Condition{
		Type:   imperatorv1alpha1.ConditionNodePoolConflict,
		Status: metav1.ConditionTrue,
		Reason: imperatorv1alpha1.ReasonNodePoolNotControlled,
		Message: fmt.Sprintf("MachineNodePool %s exists and is not controlled by this Machine (it has %s); "+
			"the Machine gets its node pool once that object is deleted", pool.Name, controller),
		ObservedGeneration: machine.Generation,
	}
}

// setPoolConflict writes cond into the Machine's status when it differs
// from what is there. A False condition is only written over a True one:
// Machines that never had a conflict carry none. The patch carries the
// resourceVersion, so that the Machine controller's own status write and
// this one never undo each other; a conflict is retried by the queue.
func setPoolConflict(ctx context.Context, c client.Client, machine *imperatorv1alpha1.Machine, cond metav1.Condition) error {
	current := meta.FindStatusCondition(machine.Status.Conditions, cond.Type)
	if current == nil && cond.Status == metav1.ConditionFalse {
		return nil
	}
	if current != nil && current.Status == cond.Status && current.Reason == cond.Reason &&
		current.Message == cond.Message && current.ObservedGeneration == cond.ObservedGeneration {
		return nil
	}
	patch := client.MergeFromWithOptions(machine.DeepCopy(), client.MergeFromWithOptimisticLock{})
	meta.SetStatusCondition(&machine.Status.Conditions, cond)
	if err := c.Status().Patch(ctx, machine, patch); err != nil {
		return fmt.Errorf("setting the %s condition of Machine %s: %w", cond.Type, machine.Name, err)
	}
	return nil
}
