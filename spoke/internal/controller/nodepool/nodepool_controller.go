package nodepool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mchandler "sigs.k8s.io/multicluster-runtime/pkg/handler"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
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

// mapWithCache lifts a map function that reads a cluster's cache into a
// multicluster event handler for that cluster.
func mapWithCache(fn func(client.Reader) handler.MapFunc) mchandler.EventHandlerFunc {
	return func(name multicluster.ClusterName, cl cluster.Cluster) mchandler.EventHandler {
		return mchandler.Lift(handler.EnqueueRequestsFromMapFunc(fn(cl.GetCache())))(name, cl)
	}
}

// nodeToPools maps a node to the pools that list it, to the pools whose
// selectors match its labels, and to the pool of the group it is annotated
// with, which releases it if it left that pool (it was relabelled, or it
// left before the cache saw it configured).
func nodeToPools(reader client.Reader) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		reqs := poolsListing(ctx, reader, obj.GetName(), "")
		if node, ok := obj.(*corev1.Node); ok {
			for _, pool := range selectingPools(ctx, reader) {
				req := reconcile.Request{NamespacedName: types.NamespacedName{Name: pool.Name}}
				if _, _, ok := EntryFor(pool.Spec.NodePool, node); ok && !slices.Contains(reqs, req) {
					reqs = append(reqs, req)
				}
			}
		}
		group, ok := obj.GetAnnotations()[imperatorv1alpha1.MachineGroupKey]
		if !ok {
			return reqs
		}
		pools := &imperatorv1alpha1.MachineNodePoolList{}
		if err := reader.List(ctx, pools, client.MatchingFields{PoolMachineGroupKey: group}, client.UnsafeDisableDeepCopy); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing the MachineNodePools of a machine group failed", "machineGroup", group)
			return reqs
		}
		for _, pool := range pools.Items {
			req := reconcile.Request{NamespacedName: types.NamespacedName{Name: pool.Name}}
			if !slices.Contains(reqs, req) {
				reqs = append(reqs, req)
			}
		}
		return reqs
	}
}

// poolToPeers maps a pool to the other pools listing one of its nodes and
// to every other pool with a selector entry, which may claim one of its
// nodes (a pool that changes or goes away may hand nodes over to them).
// Pools with selectors are few, one per Machine at most: no node is read.
func poolToPeers(reader client.Reader) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		pool, ok := obj.(*imperatorv1alpha1.MachineNodePool)
		if !ok {
			return nil
		}
		seen := map[reconcile.Request]struct{}{}
		for _, entry := range pool.Spec.NodePool {
			if entry.NodeSelector != nil {
				continue
			}
			for _, req := range poolsListing(ctx, reader, entry.Name, pool.Name) {
				seen[req] = struct{}{}
			}
		}
		for _, peer := range selectingPools(ctx, reader) {
			if peer.Name != pool.Name {
				seen[reconcile.Request{NamespacedName: types.NamespacedName{Name: peer.Name}}] = struct{}{}
			}
		}
		return slices.Collect(maps.Keys(seen))
	}
}

// selectingPools are the pools with a selector entry, from the cache's own
// objects: read them only.
func selectingPools(ctx context.Context, reader client.Reader) []*imperatorv1alpha1.MachineNodePool {
	pools := &imperatorv1alpha1.MachineNodePoolList{}
	if err := reader.List(ctx, pools, client.MatchingFields{PoolSelectorKey: PoolSelects}, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the MachineNodePools with a node selector failed")
		return nil
	}
	out := make([]*imperatorv1alpha1.MachineNodePool, 0, len(pools.Items))
	for i := range pools.Items {
		out = append(out, &pools.Items[i])
	}
	return out
}

func poolsListing(ctx context.Context, reader client.Reader, node, except string) []reconcile.Request {
	pools := &imperatorv1alpha1.MachineNodePoolList{}
	// Only names are read: no deep copy of each pool per node event.
	if err := reader.List(ctx, pools, client.MatchingFields{PoolNodeNameKey: node}, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the MachineNodePools of a node failed", "node", node)
		return nil
	}
	var reqs []reconcile.Request
	for _, pool := range pools.Items {
		if pool.Name != except {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: pool.Name}})
		}
	}
	return reqs
}

// nodeChanged lets through node creations, deletions and the updates that
// can change a decision: labels, annotations or taints. Heartbeats and other
// status updates are dropped.
func nodeChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldNode, okOld := e.ObjectOld.(*corev1.Node)
			newNode, okNew := e.ObjectNew.(*corev1.Node)
			if !okOld || !okNew {
				return true
			}
			return !maps.Equal(oldNode.Labels, newNode.Labels) ||
				!maps.Equal(oldNode.Annotations, newNode.Annotations) ||
				!equality.Semantic.DeepEqual(oldNode.Spec.Taints, newNode.Spec.Taints)
		},
	}
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

// poolMembers are the nodes of pool (Members): its named nodes and the nodes
// of the cache its selector entries match.
func poolMembers(ctx context.Context, c client.Reader, pool *imperatorv1alpha1.MachineNodePool) ([]member, error) {
	selected, err := selectedNodes(ctx, c, pool.Spec.NodePool)
	if err != nil {
		return nil, err
	}
	return Members(pool.Spec.NodePool, selected), nil
}

// selectedNodes are the nodes read through c that the selector entries of
// entries match, with repetitions when several entries match a node.
func selectedNodes(ctx context.Context, c client.Reader, entries []imperatorv1alpha1.NodePool) ([]*corev1.Node, error) {
	var selected []*corev1.Node
	for i := range entries {
		selector := selectorOf(&entries[i])
		if selector == nil {
			continue
		}
		nodes := &corev1.NodeList{}
		// Only names and labels are read: no deep copy of every node.
		if err := c.List(ctx, nodes, client.MatchingLabelsSelector{Selector: selector}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing the nodes of spec.nodePool[%d].nodeSelector: %w", i, err)
		}
		for j := range nodes.Items {
			selected = append(selected, &nodes.Items[j])
		}
	}
	return selected, nil
}

// nodeResult is what happened to one node of the pool.
type nodeResult struct {
	status imperatorv1alpha1.NodePoolStatus
	// owner names the pool the node belongs to when it is not this one,
	// ownerMachine the Machine controlling that pool, if any, and
	// ownerReason why that pool keeps it (Owner).
	owner, ownerMachine, ownerReason string
	// failed is set when the node could not be written.
	failed bool
}

// configureNodes brings every listed node this pool owns to its desired state,
// up to nodeWorkers nodes at a time. requeue reports a lost optimistic-lock
// race.
func (r *Reconciler) configureNodes(ctx context.Context, c client.Client, pool *imperatorv1alpha1.MachineNodePool, members []member) ([]nodeResult, bool, error) {
	results := make([]nodeResult, len(members))
	conflicts := make([]bool, len(members))
	errs := make([]error, len(members))
	// Every node is tried even when ctx ends: each call fails on its own then.
	workqueue.ParallelizeUntil(context.Background(), nodeWorkers, len(members), func(i int) {
		results[i], conflicts[i], errs[i] = configureNode(ctx, c, pool, members[i].name, members[i].entry)
	})
	return results, slices.Contains(conflicts, true), errors.Join(errs...)
}

// configureNode brings node name of the pool, taken in by entry, to its
// desired state when this pool owns it, and says what became of it. conflict
// reports a lost optimistic-lock race. It reads pool and writes only the
// node: several run at once.
func configureNode(ctx context.Context, c client.Client, pool *imperatorv1alpha1.MachineNodePool, name string, entry imperatorv1alpha1.NodePool) (_ nodeResult, conflict bool, _ error) {
	result := nodeResult{status: imperatorv1alpha1.NodePoolStatus{Name: name}}
	if len(entry.MachineType) > 0 {
		result.status.MachineType = entry.MachineType[0].Name
	}

	node := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		result.status.Condition = imperatorv1alpha1.NodeConditionMissing
		if !apierrors.IsNotFound(err) {
			result.failed = true
			return result, false, fmt.Errorf("getting node %s: %w", name, err)
		}
		return result, false, nil
	}

	owner, err := ownerOf(ctx, c, node)
	if err != nil {
		// Without knowing the owner, writing the node could take it from
		// another pool: report its health and retry instead.
		result.failed = true
		result.status.Condition = conditionOf(Health(node, entry.Mode))
		return result, false, err
	}
	if owner != nil && owner.Name != pool.Name {
		result.owner = owner.Name
		result.ownerMachine = controllingMachine(owner)
		result.ownerReason = ownerReason(node, owner, pool)
		result.status.Condition = imperatorv1alpha1.NodeConditionConflict
		return result, false, nil
	}

	state := Health(node, entry.Mode)
	result.status.Condition = conditionOf(state)
	changed, err := patchNode(ctx, c, node, DesiredState(entry, pool.Spec.MachineGroup, state))
	switch {
	case apierrors.IsConflict(err):
		return result, true, nil
	case err != nil:
		result.failed = true
		return result, false, err
	case changed:
		ctrl.LoggerFrom(ctx).V(1).Info("Configured node", "node", klog.KObj(node), "machineNodePool", klog.KObj(pool), "state", state)
	}
	return result, false, nil
}

// releaseNodes takes everything this package put on a node off the nodes
// annotated with the pool's group that are not in keep and that no other live
// pool lists. When the pool is being deleted (keep is nil), the listed nodes,
// read through live, are released too.
func (r *Reconciler) releaseNodes(ctx context.Context, c client.Client, live client.Reader, pool *imperatorv1alpha1.MachineNodePool, keep map[string]bool) (bool, error) {
	group := pool.Spec.MachineGroup
	annotated := &corev1.NodeList{}
	if err := c.List(ctx, annotated, client.MatchingFields{NodeMachineGroupKey: group}); err != nil {
		return false, fmt.Errorf("listing the nodes of machine group %s: %w", group, err)
	}
	candidates := make(map[string]*corev1.Node, len(annotated.Items))
	for i := range annotated.Items {
		candidates[annotated.Items[i].Name] = &annotated.Items[i]
	}
	if keep == nil && live != nil {
		listed, err := liveMembers(ctx, live, pool)
		if err != nil {
			return false, err
		}
		for _, node := range listed {
			if group, ok := node.Annotations[imperatorv1alpha1.MachineGroupKey]; !ok || group == pool.Spec.MachineGroup {
				candidates[node.Name] = node
			}
		}
	}

	var release []*corev1.Node
	for name, node := range candidates {
		if !keep[name] {
			release = append(release, node)
		}
	}
	errs := make([]error, len(release))
	conflicts := make([]bool, len(release))
	workqueue.ParallelizeUntil(context.Background(), nodeWorkers, len(release), func(i int) {
		conflicts[i], errs[i] = releaseNode(ctx, c, pool, release[i])
	})
	return slices.Contains(conflicts, true), errors.Join(errs...)
}

// liveMembers reads the nodes of pool that exist from the API server: the
// named ones one by one, the selected ones by one list per selector entry.
func liveMembers(ctx context.Context, live client.Reader, pool *imperatorv1alpha1.MachineNodePool) ([]*corev1.Node, error) {
	var nodes []*corev1.Node
	for _, entry := range pool.Spec.NodePool {
		if entry.NodeSelector != nil {
			continue
		}
		node := &corev1.Node{}
		if err := live.Get(ctx, client.ObjectKey{Name: entry.Name}, node); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("getting node %s: %w", entry.Name, err)
		}
		nodes = append(nodes, node)
	}
	selected, err := selectedNodes(ctx, live, pool.Spec.NodePool)
	if err != nil {
		return nil, err
	}
	return append(nodes, selected...), nil
}

// releaseNode takes everything this package put on node off it unless
// another live pool owns it. conflict reports a lost optimistic-lock race.
func releaseNode(ctx context.Context, c client.Client, pool *imperatorv1alpha1.MachineNodePool, node *corev1.Node) (conflict bool, _ error) {
	owner, err := ownerOf(ctx, c, node)
	if err != nil {
		return false, err
	}
	if owner != nil && owner.Name != pool.Name {
		// The pool that owns the node now rewrites it.
		return false, nil
	}
	changed, err := patchNode(ctx, c, node, OwnedState{})
	switch {
	case apierrors.IsConflict(err):
		return true, nil
	case err != nil:
		return false, err
	case changed:
		ctrl.LoggerFrom(ctx).V(1).Info("Released node", "node", klog.KObj(node), "machineNodePool", klog.KObj(pool))
	}
	return false, nil
}

// ownerOf is the live pool that owns node (Owner) among the pools listing it
// and the pools with a selector entry, or nil when none claims it. The pool
// is the cache's own object: read it only.
func ownerOf(ctx context.Context, c client.Reader, node *corev1.Node) (*imperatorv1alpha1.MachineNodePool, error) {
	// Only read: the cache hands out its own objects instead of a deep copy
	// of every claiming pool (with a large spec and status) per node.
	listing := &imperatorv1alpha1.MachineNodePoolList{}
	if err := c.List(ctx, listing, client.MatchingFields{PoolNodeNameKey: node.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the MachineNodePools of node %s: %w", node.Name, err)
	}
	selecting := &imperatorv1alpha1.MachineNodePoolList{}
	if err := c.List(ctx, selecting, client.MatchingFields{PoolSelectorKey: PoolSelects}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the MachineNodePools with a node selector: %w", err)
	}
	claimants := make([]*imperatorv1alpha1.MachineNodePool, 0, len(listing.Items)+len(selecting.Items))
	for i := range listing.Items {
		claimants = append(claimants, &listing.Items[i])
	}
	for i := range selecting.Items {
		claimants = append(claimants, &selecting.Items[i])
	}
	return Owner(node, claimants), nil
}

// patchNode makes node carry desired among our keys, writing it only when
// something changes.
//
// One JSON merge patch carries the label, annotation and taint changes
// together with the node's resourceVersion. Labels and annotations are maps,
// so the patch names only the keys that change and foreign keys are never
// sent. spec.taints is an atomic list for a merge patch (and for server-side
// apply: an applier would own the whole list, foreign taints included), so
// the patch carries the whole list, ours appended to the foreign ones as they
// were read; the resourceVersion turns a concurrent taint change by the node
// lifecycle controller or an administrator into a conflict, retried with a
// fresh read, instead of a lost update.
func patchNode(ctx context.Context, c client.Client, node *corev1.Node, desired OwnedState) (bool, error) {
	original := node.DeepCopy()
	if !Apply(node, desired) {
		return false, nil
	}
	if err := c.Patch(ctx, node, client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			// Deleted meanwhile: its delete event brings the pool back.
			return false, nil
		}
		return false, fmt.Errorf("patching node %s: %w", node.Name, err)
	}
	return true, nil
}
