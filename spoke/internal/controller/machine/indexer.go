package machine

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// PodMachineGroupIndex indexes pods by their machine-group label, so that a
// reconcile reads the pods of one group from the cache without going through
// every pod of the cluster.
const PodMachineGroupIndex = "metadata.labels.machineGroup"

// SetupIndexer registers the indexes of the Machine controller.
func SetupIndexer(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &corev1.Pod{}, PodMachineGroupIndex, indexPodMachineGroup); err != nil {
		return fmt.Errorf("setting up index %s: %w", PodMachineGroupIndex, err)
	}
	return nil
}

func indexPodMachineGroup(obj client.Object) []string {
	if group := obj.GetLabels()[imperatorv1alpha1.MachineGroupKey]; group != "" {
		return []string{group}
	}
	return nil
}
