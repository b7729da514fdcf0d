package machinevalidator

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// MachineNodeNameKey indexes Machines by the names in spec.nodePool: which
// Machines list a node.
const MachineNodeNameKey = "spec.nodePool.name"

// MachineSelectorKey indexes the Machines with a selector entry in
// spec.nodePool under MachineSelects: the few Machines whose selectors a
// node is matched against.
const MachineSelectorKey = "spec.nodePool.nodeSelector"

// MachineSelects is the only value of MachineSelectorKey.
const MachineSelects = "true"

// SetupIndexer registers the index of the validator.
func SetupIndexer(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &imperatorv1alpha1.Machine{}, MachineNodeNameKey, indexMachineNodeNames); err != nil {
		return fmt.Errorf("indexing Machines by node name: %w", err)
	}
	if err := indexer.IndexField(ctx, &imperatorv1alpha1.Machine{}, MachineSelectorKey, indexMachineSelects); err != nil {
		return fmt.Errorf("indexing Machines by node selector: %w", err)
	}
	return nil
}

func indexMachineNodeNames(obj client.Object) []string {
	machine, ok := obj.(*imperatorv1alpha1.Machine)
	if !ok {
		return nil
	}
	names := make([]string, 0, len(machine.Spec.NodePool))
	for _, entry := range machine.Spec.NodePool {
		if entry.NodeSelector == nil && entry.Name != "" {
			names = append(names, entry.Name)
		}
	}
	return names
}

func indexMachineSelects(obj client.Object) []string {
	machine, ok := obj.(*imperatorv1alpha1.Machine)
	if !ok {
		return nil
	}
	for _, entry := range machine.Spec.NodePool {
		if entry.NodeSelector != nil {
			return []string{MachineSelects}
		}
	}
	return nil
}
