package nodepool

import (
	"context"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mchandler "sigs.k8s.io/multicluster-runtime/pkg/handler"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

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
