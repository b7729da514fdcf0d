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
	"github.com/imperator-federation/imperator/spoke/internal/controller/conditions"
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
	return conditions.FirstFailing{
		Type:               imperatorv1alpha1.NodePoolConditionReady,
		ObservedGeneration: generation,
		Failing:            metav1.ConditionFalse,
		Problems: []conditions.Problem{
			{Reason: imperatorv1alpha1.NodePoolReasonNodeUpdateFailed, Parts: nodesPart("nodes not updated yet: ", failed)},
			{Reason: imperatorv1alpha1.NodePoolReasonNodeConflict, Parts: nodesPart("nodes owned by another MachineNodePool, left to it: ", conflicting)},
			{Reason: imperatorv1alpha1.NodePoolReasonNodeMissing, Parts: nodesPart("nodes that do not exist: ", missing)},
		},
		OKReason:  imperatorv1alpha1.NodePoolReasonNodesConfigured,
		OKMessage: fmt.Sprintf("%d nodes configured", listed),
	}.Condition()
}

// nodesPart is the message part "<prefix><names>" of a problem, or none
// when no node has it.
func nodesPart(prefix string, names []string) []string {
	if len(names) == 0 {
		return nil
	}
	return []string{prefix + nameList(names)}
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
