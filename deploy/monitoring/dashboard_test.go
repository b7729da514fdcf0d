package monitoring

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
)

// fleetSeries is a small fleet as two hub replicas and one agent export it:
// east has 2 units of a100-x8 (8 GPUs each), 1 used and 1 free, and 3 units
// of cpu-small; west has 1 unit of a100-x8, used.
const fleetSeries = `
load 1m
  imperator_hub_cluster_units{instance="hub-0",cluster="east",group="training",type="a100-x8",state="maximum"} 2x10
  imperator_hub_cluster_units{instance="hub-0",cluster="east",group="training",type="a100-x8",state="used"} 1x10
  imperator_hub_cluster_units{instance="hub-0",cluster="east",group="training",type="a100-x8",state="free"} 1x10
  imperator_hub_cluster_units{instance="hub-1",cluster="east",group="training",type="a100-x8",state="maximum"} 2x10
  imperator_hub_cluster_units{instance="hub-1",cluster="east",group="training",type="a100-x8",state="used"} 1x10
  imperator_hub_cluster_units{instance="hub-1",cluster="east",group="training",type="a100-x8",state="free"} 1x10
  imperator_hub_cluster_units{instance="hub-0",cluster="east",group="batch",type="cpu-small",state="maximum"} 3x10
  imperator_hub_cluster_units{instance="hub-0",cluster="east",group="batch",type="cpu-small",state="used"} 0x10
  imperator_hub_cluster_units{instance="hub-0",cluster="east",group="batch",type="cpu-small",state="free"} 3x10
  imperator_hub_cluster_units{instance="hub-0",cluster="west",group="training",type="a100-x8",state="maximum"} 1x10
  imperator_hub_cluster_units{instance="hub-0",cluster="west",group="training",type="a100-x8",state="used"} 1x10
  imperator_hub_cluster_units{instance="hub-0",cluster="west",group="training",type="a100-x8",state="free"} 0x10
  imperator_hub_type_gpus{instance="hub-0",cluster="east",group="training",type="a100-x8"} 8x10
  imperator_hub_type_gpus{instance="hub-1",cluster="east",group="training",type="a100-x8"} 8x10
  imperator_hub_type_gpus{instance="hub-0",cluster="east",group="batch",type="cpu-small"} 0x10
  imperator_hub_type_gpus{instance="hub-0",cluster="west",group="training",type="a100-x8"} 8x10
  imperator_hub_cluster_state{instance="hub-0",cluster="east",state="Available"} 1x10
  imperator_hub_cluster_state{instance="hub-0",cluster="west",state="Available"} 1x10
  imperator_hub_cluster_heartbeat_age_seconds{instance="hub-0",cluster="east"} 3x10
  imperator_hub_grpc_request_duration_seconds_bucket{instance="hub-0",method="/imperator.query.v1.Query/FindCapacity",le="0.01"} 0+10x10
  imperator_hub_grpc_request_duration_seconds_bucket{instance="hub-0",method="/imperator.query.v1.Query/FindCapacity",le="+Inf"} 0+10x10
  imperator_machine_guest_handover_seconds_bucket{instance="agent-0",machine_group="training",machine_type="a100-x8",le="1"} 0+5x10
  imperator_machine_guest_handover_seconds_bucket{instance="agent-0",machine_group="training",machine_type="a100-x8",le="+Inf"} 0+5x10
  imperator_spoke_webhook_admissions_total{instance="agent-0",webhook="pod-injector",outcome="allowed",reason="Patched"} 0+5x10
  imperator_spoke_certificate_expiry_timestamp_seconds{instance="agent-0",cluster="east"} 86400x10
  imperator_spoke_certificate_expiry_timestamp_seconds{instance="hosted-0",cluster="edge-1"} 86400x10
  imperator_spoke_certificate_expiry_timestamp_seconds{instance="hosted-0",cluster="edge-2"} 172800x10
  imperator_machine_condition{instance="agent-0",machine_group="training",machine="a100",condition="OverSubscribed"} 0x10
`

// TestDashboardQueriesAnswerOnAFleet runs every query of the dashboard as
// Grafana would (variables set to All, a 5m rate interval) on a small
// fleet's series: a query that parses but fails when run (a many-to-many
// match between hub replicas, say) or answers nothing shows an empty
// panel. The GPU panel must count each type's units times its GPUs, once
// however many hub replicas export them.
func TestDashboardQueriesAnswerOnAFleet(t *testing.T) {
	data, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	suite, err := promqltest.NewLazyLoader(fleetSeries, promqltest.LazyLoaderOpts{EnableAtModifier: true, EnableNegativeOffset: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := suite.Close(); err != nil {
			t.Error(err)
		}
	}()
	at := time.Unix(0, 0).UTC().Add(10 * time.Minute)
	suite.WithSamplesTill(at, func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	})
	query := func(expr string) (promql.Vector, error) {
		q, err := suite.QueryEngine().NewInstantQuery(suite.Context(), suite.Queryable(), nil, withVariables(expr), at)
		if err != nil {
			return nil, err
		}
		defer q.Close()
		res := q.Exec(suite.Context())
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Vector()
	}
	var walk func([]panel)
	walk = func(panels []panel) {
		for _, p := range panels {
			for _, target := range p.Targets {
				v, err := query(target.Expr)
				switch {
				case err != nil:
					t.Errorf("panel %s: %s: %v", p.Title, target.Expr, err)
				case len(v) == 0:
					t.Errorf("panel %s: %s answers nothing on the fleet's series", p.Title, target.Expr)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)

	// The fleet's series are ones the binaries export, with their labels.
	known := exportedLabels(t)
	for _, line := range strings.Split(fleetSeries, "\n") {
		fields := strings.Fields(line)
		if len(fields) != 2 || fields[0] == "load" {
			continue
		}
		lbls, err := parser.ParseMetric(fields[0])
		if err != nil {
			t.Fatalf("fleet series %s: %v", fields[0], err)
		}
		allowed, ok := known[lbls.Get(labels.MetricName)]
		if !ok {
			t.Errorf("fleet series %s: not a metric the hub or the agent exports (metrics.txt)", fields[0])
			continue
		}
		lbls.Range(func(l labels.Label) {
			if !allowed[l.Name] {
				t.Errorf("fleet series %s: no label %s (metrics.txt)", fields[0], l.Name)
			}
		})
	}

	for _, p := range d.Panels {
		if p.Title != "Fleet GPUs by state" {
			continue
		}
		v, err := query(p.Targets[0].Expr)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, s := range v {
			got[s.Metric.Get("state")] = s.F
		}
		// east: 2 units × 8 GPUs, west: 1 × 8; cpu-small counts 0.
		want := map[string]float64{"maximum": 24, "used": 16, "free": 8}
		for state, n := range want {
			if got[state] != n {
				t.Errorf("Fleet GPUs by state: %s = %v, want %v (all: %v)", state, got[state], n, got)
			}
		}
		if len(got) != len(want) {
			t.Errorf("Fleet GPUs by state: states %v, want %v", got, want)
		}
		return
	}
	t.Error("the dashboard has no panel Fleet GPUs by state")
}
