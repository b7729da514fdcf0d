package nodepool

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

const (
	// PoolNodeNameKey indexes MachineNodePools by the names in spec.nodePool:
	// which pools list a node.
	PoolNodeNameKey = "spec.nodePool.name"
	// PoolSelectorKey indexes the MachineNodePools with a selector entry in
	// spec.nodePool under PoolSelects: the few pools whose selectors a node
	// event is matched against.
	PoolSelectorKey = "spec.nodePool.nodeSelector"
	// PoolSelects is the only value of PoolSelectorKey.
	PoolSelects = "true"
	// PoolMachineGroupKey indexes MachineNodePools by spec.machineGroup: the
	// pool that configured a node annotated with a group.
	PoolMachineGroupKey = "spec.machineGroup"
	// NodeMachineGroupKey indexes Nodes by their machine-group annotation: the
	// nodes a pool has configured, including those that have left it since.
	NodeMachineGroupKey = "metadata.annotations.machineGroup"
)

// SetupIndexer registers the indexes of the node-pool reconciler.
func SetupIndexer(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &imperatorv1alpha1.MachineNodePool{}, PoolNodeNameKey, indexPoolNodeNames); err != nil {
		return fmt.Errorf("indexing MachineNodePools by node name: %w", err)
	}
	if err := indexer.IndexField(ctx, &imperatorv1alpha1.MachineNodePool{}, PoolSelectorKey, indexPoolSelects); err != nil {
		return fmt.Errorf("indexing MachineNodePools by node selector: %w", err)
	}
	if err := indexer.IndexField(ctx, &imperatorv1alpha1.MachineNodePool{}, PoolMachineGroupKey, indexPoolMachineGroup); err != nil {
		return fmt.Errorf("indexing MachineNodePools by machine group: %w", err)
	}
	if err := indexer.IndexField(ctx, &corev1.Node{}, NodeMachineGroupKey, indexNodeMachineGroup); err != nil {
		return fmt.Errorf("indexing Nodes by machine group: %w", err)
	}
	return nil
}

func indexPoolNodeNames(obj client.Object) []string {
	pool, ok := obj.(*imperatorv1alpha1.MachineNodePool)
	if !ok {
		return nil
	}
	names := make([]string, 0, len(pool.Spec.NodePool))
	for _, entry := range pool.Spec.NodePool {
		if entry.NodeSelector == nil && entry.Name != "" {
			names = append(names, entry.Name)
		}
	}
	return names
}

func indexPoolSelects(obj client.Object) []string {
	pool, ok := obj.(*imperatorv1alpha1.MachineNodePool)
	if !ok || !HasSelector(pool.Spec.NodePool) {
		return nil
	}
	return []string{PoolSelects}
}

func indexPoolMachineGroup(obj client.Object) []string {
	pool, ok := obj.(*imperatorv1alpha1.MachineNodePool)
	if !ok || pool.Spec.MachineGroup == "" {
		return nil
	}
	return []string{pool.Spec.MachineGroup}
}

func indexNodeMachineGroup(obj client.Object) []string {
	group, ok := obj.GetAnnotations()[imperatorv1alpha1.MachineGroupKey]
	if !ok {
		return nil
	}
	return []string{group}
}
