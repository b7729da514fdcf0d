package nodepool

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=machinenodepools,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=machinenodepools/status,verbs=get;patch

// conflictRetry is how soon a node write that lost an optimistic-lock race
// is retried; the event of the winning write usually comes first.
const conflictRetry = time.Second

// Reconciler puts the labels, annotation and taints of a MachineNodePool on
// its nodes, takes them off nodes that left it, and reports each node in the
// pool's status.
//
// The nodes of a pool are the nodes its entries name and the nodes its
// selector entries match (Members). A node claimed by several live pools (the
// Machine validator forbids it for the nodes it sees, but a node can be
// labelled later, two admissions can race, and pools can be written by hand)
// belongs to the one Owner picks; the others report it as Conflict and leave
// it alone, and a pool takes nothing off a node that another live pool owns.
// So no two pools ever write the same node back and forth.
//
// The nodes of one pool are written by up to nodeWorkers requests at a time:
// each node is read, decided and patched on its own (the cache hands out
// copies, and every call writes only its own slot of the results), so a large
// pool does not wait for one round trip after the other.
type Reconciler struct {
	mgr mcmanager.Manager
}

// nodeWorkers is how many nodes of one pool are written at a time. A
// node patch is a round trip that mostly waits on the API server. On a
// two-core test machine, where the API server's own CPU is soon the limit
// (about 1.6 ms of it per node patch, in its profile), four in flight
// configure a 100-node pool in about 0.7 of the time one after the other
// takes, and eight measured no better than the noise
// (BenchmarkConfigurePool); four also keeps one pool's burst of writes
// small next to the other writers of a busy cluster's API server, where
// ControllerWorkers pools may be written at once.
const nodeWorkers = 4

// NewReconciler returns a node-pool Reconciler for the clusters of mgr.
func NewReconciler(mgr mcmanager.Manager) *Reconciler {
	return &Reconciler{mgr: mgr}
}

// SetupWithManager registers the reconciler. It needs the indexes of
// SetupIndexer.
func (r *Reconciler) SetupWithManager(mgr mcmanager.Manager) error {
	return mcbuilder.ControllerManagedBy(mgr).
		Named("nodepool").
		For(&imperatorv1alpha1.MachineNodePool{}).
		// A pool that changes or goes away may hand nodes over to a pool
		// that listed them too.
		Watches(&imperatorv1alpha1.MachineNodePool{}, mapWithCache(poolToPeers)).
		Watches(&corev1.Node{}, mapWithCache(nodeToPools), mcbuilder.WithPredicates(nodeChanged())).
		WithOptions(controllerOptions(mgr)).
		Complete(r)
}

// Reconcile configures the nodes of one MachineNodePool.
func (r *Reconciler) Reconcile(ctx context.Context, req mcreconcile.Request) (_ ctrl.Result, reterr error) {
	log := ctrl.LoggerFrom(ctx)
	cl, err := r.mgr.GetCluster(ctx, req.ClusterName)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("getting cluster %q: %w", req.ClusterName, err)
	}
	c := cl.GetClient()

	pool := &imperatorv1alpha1.MachineNodePool{}
	defer func() { nodeSeries.observe(req.ClusterName.String(), req.Name, pool, reterr) }()
	if err := c.Get(ctx, req.NamespacedName, pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}

	if !pool.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, c, cl.GetAPIReader(), pool)
	}
	if !controllerutil.ContainsFinalizer(pool, imperatorv1alpha1.NodePoolFinalizer) {
		patch := client.MergeFromWithOptions(pool.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(pool, imperatorv1alpha1.NodePoolFinalizer)
		if err := c.Patch(ctx, pool, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer: %w", err)
		}
		// The update event brings the pool back.
		return ctrl.Result{}, nil
	}

	original := pool.DeepCopy()
	var results []nodeResult
	defer func() {
		written, err := patchStatus(ctx, c, original, pool)
		if err != nil {
			reterr = errors.Join(reterr, err)
		}
		if written {
			// The status was patched over the version it was compared with
			// (optimistic lock), so each change of a node's condition is
			// reported once, however stale the cache was.
			recordNodeEvents(cl.GetEventRecorder(ControllerName), pool, nodeEvents(original.Status.NodePool, results))
		}
	}()

	members, err := poolMembers(ctx, c, pool)
	if err != nil {
		return ctrl.Result{}, err
	}
	results, requeue, configureErr := r.configureNodes(ctx, c, pool, members)
	listed := make(map[string]bool, len(members))
	for _, m := range members {
		listed[m.name] = true
	}
	releaseRequeue, releaseErr := r.releaseNodes(ctx, c, nil, pool, listed)
	setStatus(pool, results)

	if err := errors.Join(configureErr, releaseErr); err != nil {
		return ctrl.Result{}, err
	}
	if requeue || releaseRequeue {
		log.V(1).Info("Retrying after a conflicting node update", "machineNodePool", klog.KObj(pool))
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return ctrl.Result{}, nil
}

// reconcileDelete takes everything the pool put on nodes off them, then
// releases the pool. The listed nodes are read from the API server (live):
// the pool is gone once the finalizer is removed, and a node configured a
// moment ago may not look configured in the cache yet.
func (r *Reconciler) reconcileDelete(ctx context.Context, c client.Client, live client.Reader, pool *imperatorv1alpha1.MachineNodePool) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(pool, imperatorv1alpha1.NodePoolFinalizer) {
		return ctrl.Result{}, nil
	}
	requeue, err := r.releaseNodes(ctx, c, live, pool, nil)
	if err != nil {
		return ctrl.Result{}, err
	}
	if requeue {
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	patch := client.MergeFromWithOptions(pool.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(pool, imperatorv1alpha1.NodePoolFinalizer)
	if err := c.Patch(ctx, pool, patch); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("removing the finalizer: %w", err))
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Released the nodes of a deleted MachineNodePool", "machineNodePool", klog.KObj(pool))
	return ctrl.Result{}, nil
}
