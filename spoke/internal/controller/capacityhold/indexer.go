package capacityhold

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// MachineGroupIndex indexes CapacityHolds by spec.machineGroup, so that a
// Machine's reconcile reads the holds of its group only.
const MachineGroupIndex = "spec.machineGroup"

// SetupIndexer registers the index of CapacityHolds. The Machine controller
// calls it.
func SetupIndexer(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &imperatorv1alpha1.CapacityHold{}, MachineGroupIndex, indexMachineGroup); err != nil {
		return fmt.Errorf("setting up index %s: %w", MachineGroupIndex, err)
	}
	return nil
}

func indexMachineGroup(obj client.Object) []string {
	if hold, ok := obj.(*imperatorv1alpha1.CapacityHold); ok && hold.Spec.MachineGroup != "" {
		return []string{hold.Spec.MachineGroup}
	}
	return nil
}
