package persist

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

func TestMachinesRoundTrip(t *testing.T) {
	cases := map[string][]*federationv1.Machine{
		"gpu type with usage and nodes": {{
			Name: "general", Group: "general", Ready: federationv1.ConditionStatus_CONDITION_STATUS_TRUE,
			Types: []*federationv1.MachineType{{
				Name: "compute-xlarge", Cpu: "40", Memory: "128Gi", Available: 2,
				Gpu:   &federationv1.GPU{Type: "nvidia.com/gpu", Num: 2, Product: "NVIDIA-GeForce-RTX-3090"},
				Usage: &federationv1.Usage{Maximum: 2, Reserved: 1, Used: 1, Waiting: 3},
				Nodes: &federationv1.NodeCounts{Ready: 1, Maintenance: 1},
			}},
			Nodes: []*federationv1.PoolNode{
				{Name: "n1", MachineType: "compute-xlarge", Condition: federationv1.NodeCondition_NODE_CONDITION_READY},
				{Name: "n2", MachineType: "compute-xlarge", Condition: federationv1.NodeCondition_NODE_CONDITION_MAINTENANCE},
			},
		}},
		"queued guests survive the inventory": {{
			Name: "general", Group: "general", Ready: federationv1.ConditionStatus_CONDITION_STATUS_TRUE,
			Types: []*federationv1.MachineType{{
				Name: "compute-xlarge", Cpu: "40", Memory: "128Gi", Available: 1,
				Usage: &federationv1.Usage{Maximum: 1, Used: 1, Waiting: 2, Queued: 2},
				Nodes: &federationv1.NodeCounts{Ready: 1},
			}},
		}},
		"cpu-only type": {{
			Name: "cpu", Group: "cpu", Ready: federationv1.ConditionStatus_CONDITION_STATUS_FALSE,
			Types: []*federationv1.MachineType{
				{Name: "small", Cpu: "2", Memory: "4Gi", Available: 5, Usage: &federationv1.Usage{}, Nodes: &federationv1.NodeCounts{}},
				{Name: "not-counted-yet", Cpu: "2", Memory: "4Gi", Available: 1, Nodes: &federationv1.NodeCounts{}},
			},
		}},
	}
	for name, machines := range cases {
		t.Run(name, func(t *testing.T) {
			got := machinesFromAPI(machinesToAPI(machines))
			if diff := cmp.Diff(machines, got, protocmp.Transform()); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}
