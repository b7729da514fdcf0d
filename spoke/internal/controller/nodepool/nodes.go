package nodepool

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

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
