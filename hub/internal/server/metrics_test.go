package server

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
	if _, err := NewMetrics(reg, st, func() bool { return false }); err != nil {
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
# HELP imperator_hub_leader 1 while this hub replica leads (publishes placement scores and marks silent clusters Unknown), else 0.
# TYPE imperator_hub_leader gauge
imperator_hub_leader 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "imperator_hub_cluster_state", "imperator_hub_leader"); err != nil {
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

func TestJoinsAreCountedByOutcome(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg, store.New(nil, time.Minute), nil)
	if err != nil {
		t.Fatal(err)
	}
	join := federationv1.Federation_Join_FullMethodName
	m.observeCall(join, time.Now(), nil)
	m.observeCall(join, time.Now(), status.Error(codes.Unauthenticated, "token expired"))
	m.observeCall(join, time.Now(), status.Error(codes.Unauthenticated, "token unknown"))
	m.observeCall(join, time.Now(), errors.New("plain error"))
	m.observeCall("/imperator.query.v1.Query/ListClusters", time.Now(), nil)
	for outcome, want := range map[string]float64{joinJoined: 1, joinBadToken: 2, joinError: 1, joinDenied: 0} {
		if got := testutil.ToFloat64(m.joins.WithLabelValues(outcome)); got != want {
			t.Errorf("imperator_hub_joins_total{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}
	if got := testutil.CollectAndCount(m.requestDuration, "imperator_hub_grpc_request_duration_seconds"); got == 0 {
		t.Error("no request duration series")
	}
}

// An operator sees how many Report streams are open and how long they
// lasted: a spoke that reconnects over and over shows as many short streams.
func TestReportStreamsAreCountedWhileOpenAndTimedWhenTheyEnd(t *testing.T) {
	h := startTestHub(t)
	report := federationv1.Federation_Report_FullMethodName
	stream := h.openReport(t, "a", validMachine("gpu", 3))
	if got := testutil.ToFloat64(h.server.metrics.openStreams.WithLabelValues(report)); got != 1 {
		t.Errorf("imperator_hub_grpc_open_streams{method=Report} = %v with one stream open, want 1", got)
	}
	// A second Hello ends the stream with InvalidArgument; its status
	// reaches the client once the interceptor has recorded the end.
	if err := streamEnd(t, stream, hello("a", 1)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("stream ended with %v, want InvalidArgument", err)
	}
	if got := testutil.ToFloat64(h.server.metrics.openStreams.WithLabelValues(report)); got != 0 {
		t.Errorf("imperator_hub_grpc_open_streams{method=Report} = %v after the stream ended, want 0", got)
	}
	var duration dto.Metric
	if err := h.server.metrics.streamDuration.WithLabelValues(report).(prometheus.Histogram).Write(&duration); err != nil {
		t.Fatal(err)
	}
	if got := duration.GetHistogram().GetSampleCount(); got != 1 {
		t.Errorf("imperator_hub_grpc_stream_duration_seconds{method=Report} counted %d streams, want 1", got)
	}
	if got := duration.GetHistogram().GetSampleSum(); got <= 0 || got > 60 {
		t.Errorf("imperator_hub_grpc_stream_duration_seconds{method=Report} sum = %vs, want the stream's few seconds at most", got)
	}
	if got := testutil.ToFloat64(h.server.metrics.requests.WithLabelValues(report, codes.InvalidArgument.String())); got != 1 {
		t.Errorf("imperator_hub_grpc_requests_total{method=Report,code=InvalidArgument} = %v, want 1", got)
	}
}
