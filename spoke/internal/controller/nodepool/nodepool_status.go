package nodepool

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
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

// patchStatus writes the status of pool when it differs from original's and
// reports whether it did. The patch carries original's resourceVersion: when
// the pool changed since the cache gave it (or the cache has not seen our
// last write yet), nothing is written and the newer version, whose event
// queues the pool again, is reconciled instead. So what is compared with is
// what was last written, and a change is written, and reported, once.
func patchStatus(ctx context.Context, c client.Client, original, pool *imperatorv1alpha1.MachineNodePool) (bool, error) {
	if equality.Semantic.DeepEqual(original.Status, pool.Status) {
		return false, nil
	}
	if err := c.Status().Patch(ctx, pool, client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			ctrl.LoggerFrom(ctx).V(1).Info("MachineNodePool changed while reconciling, status left to the next reconcile", "machineNodePool", klog.KObj(pool))
			return false, nil
		}
		return false, client.IgnoreNotFound(fmt.Errorf("patching the status of MachineNodePool %s: %w", pool.Name, err))
	}
	return true, nil
}
