package nodepool

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

func TestPoolNodesCountTheStatusAndGoWithThePool(t *testing.T) {
	pool := &imperatorv1alpha1.MachineNodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-node-pool"},
		Spec:       imperatorv1alpha1.MachineNodePoolSpec{MachineGroup: "training"},
		Status: imperatorv1alpha1.MachineNodePoolStatus{NodePool: []imperatorv1alpha1.NodePoolStatus{
			{Name: "n1", Condition: imperatorv1alpha1.NodeConditionReady, MachineType: "a100"},
			{Name: "n2", Condition: imperatorv1alpha1.NodeConditionReady, MachineType: "a100"},
			{Name: "n3", Condition: imperatorv1alpha1.NodeConditionMaintenance, MachineType: "a100"},
			{Name: "n4", Condition: imperatorv1alpha1.NodeConditionMissing, MachineType: "h100"},
		}},
	}
	nodeSeries.observe("", "gpu-node-pool", pool, nil)
	got := map[string]float64{}
	for _, key := range [][2]string{{"a100", "Ready"}, {"a100", "Maintenance"}, {"a100", "NotReady"}, {"h100", "Missing"}, {"h100", "Ready"}} {
		got[key[0]+"/"+key[1]] = testutil.ToFloat64(poolNodes.WithLabelValues("", "gpu-node-pool", "training", key[0], key[1]))
	}
	want := map[string]float64{"a100/Ready": 2, "a100/Maintenance": 1, "a100/NotReady": 0, "h100/Missing": 1, "h100/Ready": 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("imperator_spoke_nodepool_nodes (-want +got):\n%s", diff)
	}

	// A failed read keeps the series; the pool gone drops them.
	nodeSeries.observe("", "gpu-node-pool", &imperatorv1alpha1.MachineNodePool{}, errors.New("API server unreachable"))
	if n := testutil.CollectAndCount(poolNodes); n != 10 {
		t.Errorf("after a failed read: %d series, want the 10 kept", n)
	}
	nodeSeries.observe("", "gpu-node-pool", &imperatorv1alpha1.MachineNodePool{}, nil)
	if n := testutil.CollectAndCount(poolNodes); n != 0 {
		t.Errorf("after the pool was deleted: %d series, want 0", n)
	}
}
