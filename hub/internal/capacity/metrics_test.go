package capacity

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/imperator-federation/imperator/hub/internal/store"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

func TestClusterMetricsShowStateAndUnitsAsQueriesDo(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	st := store.New(clk, time.Minute)
	st.Connect("east", &federationv1.Hello{ClusterName: "east", Epoch: 1})
	usage := func(maximum, reserved, used, waiting, queued int32) *federationv1.Usage {
		return &federationv1.Usage{Maximum: maximum, Reserved: reserved, Used: used, Waiting: waiting, Queued: queued}
	}
	res := st.ApplySnapshot("east", 1, &federationv1.Snapshot{Generation: 1, Machines: []*federationv1.Machine{
		{Name: "m1", Group: "training", Types: []*federationv1.MachineType{
			{Name: "a100", Cpu: "96", Memory: "1Ti", Gpu: &federationv1.GPU{Type: "nvidia.com/gpu", Num: 8}, Available: 4, Usage: usage(4, 2, 1, 1, 1)},
		}},
		// A second Machine of the group with the type: summed.
		{Name: "m2", Group: "training", Types: []*federationv1.MachineType{
			{Name: "a100", Cpu: "96", Memory: "1Ti", Gpu: &federationv1.GPU{Type: "nvidia.com/gpu", Num: 8}, Available: 2, Usage: usage(2, 2, 0, 0, 0)},
		}},
		// A CPU-only type.
		{Name: "cpu", Group: "batch", Types: []*federationv1.MachineType{{Name: "cpu-small", Cpu: "4", Memory: "8Gi", Available: 1}}},
	}})
	if res.Refused != nil {
		t.Fatalf("snapshot refused: %v", res.Refused)
	}
	st.Connect("west", &federationv1.Hello{ClusterName: "west", Epoch: 1})
	clk.Step(2 * time.Minute) // both silent past the grace period
	st.Heartbeat("east", 1, &federationv1.Heartbeat{Generation: 1})
	st.EvaluateLiveness()

	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewCollector(st)); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP imperator_hub_cluster_state 1 for the state each spoke cluster is in (Available, Stale, Offline, as imperatorctl get clusters shows it), 0 for the others.
# TYPE imperator_hub_cluster_state gauge
imperator_hub_cluster_state{cluster="east",state="Available"} 1
imperator_hub_cluster_state{cluster="east",state="Offline"} 0
imperator_hub_cluster_state{cluster="east",state="Stale"} 0
imperator_hub_cluster_state{cluster="west",state="Available"} 0
imperator_hub_cluster_state{cluster="west",state="Offline"} 1
imperator_hub_cluster_state{cluster="west",state="Stale"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "imperator_hub_cluster_state"); err != nil {
		t.Error(err)
	}
	// GPUs per unit, for GPU figures by state (units times GPUs).
	wantGPUs := `
# HELP imperator_hub_type_gpus GPUs in one unit of each machine type of each cluster (the type's gpu.num; 0 for a CPU-only type). GPUs by state: imperator_hub_cluster_units * on (cluster, group, type) group_left imperator_hub_type_gpus.
# TYPE imperator_hub_type_gpus gauge
imperator_hub_type_gpus{cluster="east",group="batch",type="cpu-small"} 0
imperator_hub_type_gpus{cluster="east",group="training",type="a100"} 8
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(wantGPUs), "imperator_hub_type_gpus"); err != nil {
		t.Error(err)
	}
	units := map[string]float64{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "imperator_hub_cluster_units" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			units[labels["cluster"]+"/"+labels["group"]+"/"+labels["type"]+"/"+labels["state"]] = m.GetGauge().GetValue()
		}
	}
	// free = min(reserved, maximum-used-waiting) per Machine: min(2,2)+min(2,2).
	wantUnits := map[string]float64{
		"east/training/a100/maximum": 6, "east/training/a100/reserved": 4, "east/training/a100/used": 1,
		"east/training/a100/waiting": 1, "east/training/a100/queued": 1, "east/training/a100/held": 0, "east/training/a100/free": 4,
		"east/batch/cpu-small/maximum": 1, "east/batch/cpu-small/reserved": 0, "east/batch/cpu-small/used": 0,
		"east/batch/cpu-small/waiting": 0, "east/batch/cpu-small/queued": 0, "east/batch/cpu-small/held": 0, "east/batch/cpu-small/free": 0,
	}
	for k, v := range wantUnits {
		if units[k] != v {
			t.Errorf("imperator_hub_cluster_units %s = %v, want %v", k, units[k], v)
		}
	}
	if len(units) != len(wantUnits) {
		t.Errorf("imperator_hub_cluster_units has %d series, want %d: %v", len(units), len(wantUnits), units)
	}
}
