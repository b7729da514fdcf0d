package wire

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// A protocol enum value the hub cannot store would turn into "" in the
// ClusterInventory and come back UNSPECIFIED after a hub restart.
func TestEveryProtocolEnumValueSurvivesTheHubStore(t *testing.T) {
	roundTrip(t, federationv1.NodeCondition_name, NodeConditionToAPI, NodeCondition)
	roundTrip(t, federationv1.ConditionStatus_name, ConditionStatusToAPI, ConditionStatus)
}

// roundTrip checks that every value of a protocol enum but 0 (UNSPECIFIED)
// has an API value that converts back to it.
func roundTrip[P ~int32, A ~string](t *testing.T, names map[int32]string, toAPI func(P) A, fromAPI func(A) P) {
	t.Helper()
	for v, name := range names {
		if v == 0 {
			continue
		}
		api := toAPI(P(v))
		if api == "" {
			t.Errorf("%s has no API value", name)
			continue
		}
		if got := fromAPI(api); got != P(v) {
			t.Errorf("%s -> %q -> %d", name, api, got)
		}
	}
}

func TestUnknownValuesAreUnspecifiedNotAnotherState(t *testing.T) {
	if got := NodeCondition("Exploded"); got != federationv1.NodeCondition_NODE_CONDITION_UNSPECIFIED {
		t.Errorf("NodeCondition(Exploded) = %s, want UNSPECIFIED", got)
	}
	if got := ConditionStatus(metav1.ConditionStatus("Maybe")); got != federationv1.ConditionStatus_CONDITION_STATUS_UNSPECIFIED {
		t.Errorf("ConditionStatus(Maybe) = %s, want UNSPECIFIED", got)
	}
	if got := NodeConditionToAPI(federationv1.NodeCondition(99)); got != "" {
		t.Errorf("NodeConditionToAPI(99) = %q, want empty", got)
	}
	if got := ConditionStatusToAPI(federationv1.ConditionStatus(99)); got != "" {
		t.Errorf("ConditionStatusToAPI(99) = %q, want empty", got)
	}
}

func TestGPUUsageAndNodeCountsRoundTrip(t *testing.T) {
	gpu := &imperatorv1alpha1.GPUSpec{Type: "nvidia.com/gpu", Num: 8, Product: "H100", Family: "hopper", Machine: "dgx"}
	if diff := cmp.Diff(gpu, GPUToAPI(GPU(gpu))); diff != "" {
		t.Errorf("GPU round trip (-want +got):\n%s", diff)
	}
	usage := &imperatorv1alpha1.Usage{Maximum: 6, Reserved: 5, Used: 4, Waiting: 3, Queued: 2, Unplaceable: 1, Held: 1}
	if diff := cmp.Diff(usage, UsageToAPI(Usage(usage))); diff != "" {
		t.Errorf("Usage round trip (-want +got):\n%s", diff)
	}
	counts := imperatorv1alpha1.NodeCounts{Ready: 5, NotReady: 4, Maintenance: 3, Missing: 2, Conflict: 1}
	if diff := cmp.Diff(counts, NodeCountsToAPI(NodeCounts(counts))); diff != "" {
		t.Errorf("NodeCounts round trip (-want +got):\n%s", diff)
	}
	if GPU(nil) != nil || GPUToAPI(nil) != nil || Usage(nil) != nil || UsageToAPI(nil) != nil {
		t.Error("a missing GPU or usage must stay missing")
	}
	if diff := cmp.Diff(imperatorv1alpha1.NodeCounts{}, NodeCountsToAPI(nil)); diff != "" {
		t.Errorf("NodeCountsToAPI(nil) (-want +got):\n%s", diff)
	}
}
