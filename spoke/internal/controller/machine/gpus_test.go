package machine

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// TestCapacityConditionNamesPoolNodesWithoutGPUs: nodes without the type's
// GPU resource come first in InsufficientCapacity, named, and the other
// problems are still told.
func TestCapacityConditionNamesPoolNodesWithoutGPUs(t *testing.T) {
	machine := wrappers.GeneralMachine().Obj()
	state := &reconcileState{
		served: []string{"compute-medium", "compute-xlarge"},
		usage: map[string]*typeUsage{
			"compute-medium": {Usage: imperatorv1alpha1.Usage{Maximum: 4, Reserved: 4}, replicas: 4},
			"compute-xlarge": {Usage: imperatorv1alpha1.Usage{Maximum: 1}, replicas: 1, unschedulable: 1},
		},
		withoutGPUs: map[string][]string{"compute-xlarge": {"michiru"}},
	}
	cond := capacityCondition(machine, state)
	if cond.Status != metav1.ConditionTrue || cond.Reason != imperatorv1alpha1.ReasonPoolNodesWithoutGPUs {
		t.Fatalf("condition %s/%s, want True/%s: %s", cond.Status, cond.Reason, imperatorv1alpha1.ReasonPoolNodesWithoutGPUs, cond.Message)
	}
	for _, want := range []string{
		"compute-xlarge: ready pool nodes advertise 0 nvidia.com/gpu, so its reservation pods cannot be scheduled there: michiru",
		"docs/gpu-operator.md",
		"compute-xlarge: 1 of 1 reservation pods cannot be scheduled",
		"compute-large: no node of spec.nodePool serves it",
	} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("message %q lacks %q", cond.Message, want)
		}
	}

	state.withoutGPUs = nil
	if cond := capacityCondition(machine, state); cond.Reason != imperatorv1alpha1.ReasonReservationsUnschedulable || strings.Contains(cond.Message, "michiru") {
		t.Errorf("without such nodes: %s: %s", cond.Reason, cond.Message)
	}
}
