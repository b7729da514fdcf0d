package nodepool

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=machines,verbs=get;list;watch
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=machines/finalizers,verbs=update
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

// SetupWithManager registers the reconciler: Machines and the pools they
// control (a pool edited or deleted by hand is put back).
func (r *PoolSyncReconciler) SetupWithManager(mgr mcmanager.Manager) error {
	return mcbuilder.ControllerManagedBy(mgr).
		Named("machinenodepool_sync").
		For(&imperatorv1alpha1.Machine{}).
		Owns(&imperatorv1alpha1.MachineNodePool{}).
		WithOptions(controllerOptions(mgr)).
		Complete(r)
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
		if err := c.Create(ctx, desired); err != nil {
			return ctrl.Result{}, fmt.Errorf("creating MachineNodePool %s: %w", desired.Name, err)
		}
		log.V(1).Info("Created MachineNodePool", "machineNodePool", klog.KObj(desired))
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("getting MachineNodePool %s: %w", desired.Name, err)
	}

	if !metav1.IsControlledBy(current, machine) {
		// Someone else's object under our name: leave it, and do not retry
		// until either object changes.
		return ctrl.Result{}, reconcile.TerminalError(fmt.Errorf("MachineNodePool %s exists and is not controlled by Machine %s", current.Name, machine.Name))
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
