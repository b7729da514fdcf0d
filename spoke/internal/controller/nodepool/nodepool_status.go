package nodepool

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// maxNamesInMessage bounds how many node names a condition message lists.
const maxNamesInMessage = 10

// setStatus records the per-node results and the Ready condition on pool.
func setStatus(pool *imperatorv1alpha1.MachineNodePool, results []nodeResult) {
	pool.Status.ObservedGeneration = pool.Generation
	pool.Status.NodePool = make([]imperatorv1alpha1.NodePoolStatus, 0, len(results))
	var failed, conflicting, missing []string
	for _, result := range results {
		pool.Status.NodePool = append(pool.Status.NodePool, result.status)
		switch {
		case result.failed:
			failed = append(failed, result.status.Name)
		case result.status.Condition == imperatorv1alpha1.NodeConditionConflict:
			conflicting = append(conflicting, fmt.Sprintf("%s (in %s)", result.status.Name, result.owner))
		case result.status.Condition == imperatorv1alpha1.NodeConditionMissing:
			missing = append(missing, result.status.Name)
		}
	}
	if len(pool.Status.NodePool) == 0 {
		pool.Status.NodePool = nil
	}
	meta.SetStatusCondition(&pool.Status.Conditions, readyCondition(pool.Generation, len(results), failed, conflicting, missing))
}

// readyCondition is True when every listed node exists, belongs to this pool
// and carries what it should; otherwise False with the most pressing reason
// and a message naming the nodes.
func readyCondition(generation int64, listed int, failed, conflicting, missing []string) metav1.Condition {
	condition := metav1.Condition{
		Type:               imperatorv1alpha1.NodePoolConditionReady,
		Status:             metav1.ConditionFalse,
		ObservedGeneration: generation,
	}
	var problems []string
	if len(failed) > 0 {
		problems = append(problems, "nodes not updated yet: "+nameList(failed))
	}
	if len(conflicting) > 0 {
		problems = append(problems, "nodes listed by an older MachineNodePool, left to it: "+nameList(conflicting))
	}
	if len(missing) > 0 {
		problems = append(problems, "nodes that do not exist: "+nameList(missing))
	}
	switch {
	case len(failed) > 0:
		condition.Reason = imperatorv1alpha1.NodePoolReasonNodeUpdateFailed
	case len(conflicting) > 0:
		condition.Reason = imperatorv1alpha1.NodePoolReasonNodeConflict
	case len(missing) > 0:
		condition.Reason = imperatorv1alpha1.NodePoolReasonNodeMissing
	default:
		condition.Status = metav1.ConditionTrue
		condition.Reason = imperatorv1alpha1.NodePoolReasonNodesConfigured
		condition.Message = fmt.Sprintf("%d nodes configured", listed)
		return condition
	}
	condition.Message = strings.Join(problems, "; ")
	return condition
}

func nameList(names []string) string {
	if len(names) <= maxNamesInMessage {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:maxNamesInMessage], ", "), len(names)-maxNamesInMessage)
}

// patchStatus writes the status of pool when it differs from original's.
func patchStatus(ctx context.Context, c client.Client, original, pool *imperatorv1alpha1.MachineNodePool) error {
	if equality.Semantic.DeepEqual(original.Status, pool.Status) {
		return nil
	}
	if err := c.Status().Patch(ctx, pool, client.MergeFrom(original)); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("patching the status of MachineNodePool %s: %w", pool.Name, err))
	}
	return nil
}
