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

// SetupIndexer registers the index of the validator.
func SetupIndexer(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &imperatorv1alpha1.Machine{}, MachineNodeNameKey, indexMachineNodeNames); err != nil {
		return fmt.Errorf("indexing Machines by node name: %w", err)
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
		names = append(names, entry.Name)
	}
	return names
}
