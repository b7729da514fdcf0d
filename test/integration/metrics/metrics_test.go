// Package metrics runs the hub and the agents as binaries on a local fleet
// and reads their /metrics endpoints as Prometheus scrapes them: every
// family passes promlint, every metric the alerts and the dashboard use
// (deploy/monitoring/metrics.txt) is served by a running hub or agent, the
// figures agree with the fleet, and a stopped agent turns its cluster
// Offline as ImperatorClusterOffline expects.
package metrics

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	"github.com/imperator-federation/imperator/test/e2e"
	"github.com/imperator-federation/imperator/test/util/fleet"
	"github.com/imperator-federation/imperator/test/util/metricnames"
	"github.com/imperator-federation/imperator/test/util/repo"
)

// scrape reads url as Prometheus does.
func scrape(url string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

// value is the value of name's series with labels (a subset), and whether
// there is one.
func value(families map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f, ok := families[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// eventually polls check every half second until it returns nil or timeout
// passes, and returns its last error.
func eventually(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func TestRunningHubAndAgentsServeTheMetricsTheAlertsAndDashboardUse(t *testing.T) {
	if os.Getenv("IMPERATOR_K8S_BIN") == "" {
		t.Skip("IMPERATOR_K8S_BIN is not set: make test sets it (hack/k8s-bin.sh dir)")
	}
	// The harness logs through controller-runtime.
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	binDir, err := repo.Binaries(ctx, t.TempDir(), "hub", "spoke", "imperatorctl")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f, err := fleet.Start(ctx, fleet.Options{Dir: dir, BinDir: binDir, GracePeriod: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := f.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Log(f.Logs(40))
		}
	}()
	env, err := e2e.NewEnvFromFleet(f, binDir, root)
	if err != nil {
		t.Fatal(err)
	}
	machine, err := e2e.ReadMachine(env.Sample("general-machine.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Spoke("spoke-a").Client.Create(ctx, machine); err != nil {
		t.Fatalf("creating the sample Machine on spoke-a: %v", err)
	}
	group := machine.Labels["imperator.tenzen-y.io/machine-group"]
	firstType := machine.Spec.MachineTypes[0].Name
	var firstTypeGPUs float64
	if gpu := machine.Spec.MachineTypes[0].Spec.GPU; gpu != nil {
		firstTypeGPUs = float64(gpu.Num)
	}

	hubURL, agentURL := f.HubMetricsURL(), f.AgentMetricsURL("spoke-a")
	var hub, agent map[string]*dto.MetricFamily
	err = eventually(2*time.Minute, func() error {
		if hub, err = scrape(hubURL); err != nil {
			return err
		}
		if agent, err = scrape(agentURL); err != nil {
			return err
		}
		checks := []struct {
			what     string
			families map[string]*dto.MetricFamily
			name     string
			labels   map[string]string
			ok       func(float64) bool
		}{
			{"spoke-a Available on the hub", hub, "imperator_hub_cluster_state", map[string]string{"cluster": "spoke-a", "state": "Available"}, func(v float64) bool { return v == 1 }},
			{"spoke-b Available on the hub", hub, "imperator_hub_cluster_state", map[string]string{"cluster": "spoke-b", "state": "Available"}, func(v float64) bool { return v == 1 }},
			{"the sample's first type's maximum on the hub", hub, "imperator_hub_cluster_units",
				map[string]string{"cluster": "spoke-a", "group": group, "type": firstType, "state": "maximum"}, func(v float64) bool { return v == float64(machine.Spec.MachineTypes[0].Available) }},
			{"the GPUs of one unit of the sample's first type on the hub", hub, "imperator_hub_type_gpus",
				map[string]string{"cluster": "spoke-a", "group": group, "type": firstType}, func(v float64) bool { return v == firstTypeGPUs }},
			{"both spokes' Report streams open on the hub", hub, "imperator_hub_grpc_open_streams",
				map[string]string{"method": federationv1.Federation_Report_FullMethodName}, func(v float64) bool { return v == 2 }},
			{"the hub leads", hub, "imperator_hub_leader", nil, func(v float64) bool { return v == 1 }},
			{"a join counted", hub, "imperator_hub_joins_total", map[string]string{"outcome": "joined"}, func(v float64) bool { return v >= 1 }},
			{"the agent reporting", agent, "imperator_spoke_reporter_state", map[string]string{"state": "reporting"}, func(v float64) bool { return v == 1 }},
			{"a recent report", agent, "imperator_spoke_last_report_timestamp_seconds", nil, func(v float64) bool { return time.Since(time.Unix(int64(v), 0)) < time.Minute }},
			{"a certificate valid for a while", agent, "imperator_spoke_certificate_expiry_timestamp_seconds", nil, func(v float64) bool { return time.Until(time.Unix(int64(v), 0)) > time.Hour }},
			{"the Machine Ready", agent, "imperator_machine_condition", map[string]string{"machine": machine.Name, "condition": "Ready"}, func(v float64) bool { return v == 1 }},
			{"the Machine's node pool", agent, "imperator_spoke_nodepool_nodes", map[string]string{"machine_group": group, "condition": "Ready"}, func(v float64) bool { return v >= 1 }},
		}
		var failed []string
		for _, c := range checks {
			v, ok := value(c.families, c.name, c.labels)
			if !ok || !c.ok(v) {
				failed = append(failed, fmt.Sprintf("%s: %s%v = %v (present %v)", c.what, c.name, c.labels, v, ok))
			}
		}
		if len(failed) > 0 {
			return fmt.Errorf("not yet:\n  %s", strings.Join(failed, "\n  "))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Conventions, on what the binaries really serve.
	for name, families := range map[string]map[string]*dto.MetricFamily{"hub": hub, "agent": agent} {
		var list []*dto.MetricFamily
		for _, f := range families {
			list = append(list, f)
		}
		problems, err := promlint.NewWithMetricFamilies(list).Lint()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("%s: promlint: %s: %s", name, p.Metric, p.Text)
		}
	}
	// Every listed metric that has series once a cluster reports is
	// served: those of events that did not happen (refusals, failures,
	// handovers) may have none yet.
	listed, err := metricnames.Read()
	if err != nil {
		t.Fatal(err)
	}
	// The labels the rules and the dashboard rely on are the served ones.
	for component, families := range map[string]map[string]*dto.MetricFamily{"hub": hub, "spoke": agent} {
		byName := map[string]metricnames.Metric{}
		for _, m := range listed {
			if m.Component == component {
				byName[m.Name] = m
			}
		}
		for _, p := range metricnames.CheckFamilies(component, byName, slices.Collect(maps.Values(families))) {
			t.Errorf("served by the running %s: %s", component, p)
		}
	}
	eventOnly := map[string]bool{
		"imperator_hub_inventory_persist_failures_total": true, "imperator_hub_cluster_inventory_not_current": true,
		"imperator_machine_guest_handover_seconds": true,
	}
	for _, m := range listed {
		served := hub
		if m.Component == "spoke" {
			served = agent
		}
		if _, ok := served[m.Name]; !ok && !eventOnly[m.Name] {
			t.Errorf("%s is listed for the %s in %s but the running %s does not serve it", m.Name, m.Component, metricnames.ListPath, m.Component)
		}
	}

	// ImperatorClusterOffline: max by (cluster) (imperator_hub_cluster_state{state="Offline"}) == 1.
	if err := f.StopAgent("spoke-b"); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	err = eventually(time.Minute, func() error {
		if hub, err = scrape(hubURL); err != nil {
			return err
		}
		if v, _ := value(hub, "imperator_hub_cluster_state", map[string]string{"cluster": "spoke-b", "state": "Offline"}); v != 1 {
			return fmt.Errorf("spoke-b not Offline on the hub's metrics %s after its agent stopped", time.Since(stopped).Round(time.Second))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ImperatorClusterOffline's expression held for spoke-b %s after its agent stopped (grace period %s); the alert fires 5m later", time.Since(stopped).Round(time.Second), f.GracePeriod())
	if v, _ := value(hub, "imperator_hub_cluster_state", map[string]string{"cluster": "spoke-a", "state": "Available"}); v != 1 {
		t.Errorf("spoke-a is not Available while spoke-b is Offline")
	}
}
