package monitoring

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"gopkg.in/yaml.v3"
)

// alertTests is alerts_test.yaml: the shape of Prometheus's rule unit
// tests (promtool test rules), without rule_files (the rules are
// prometheusrule.yaml's spec) and without promql_expr_test.
type alertTests struct {
	EvaluationInterval model.Duration `yaml:"evaluation_interval"`
	Tests              []alertTestGroup
}

type alertTestGroup struct {
	Name        string
	Interval    model.Duration
	InputSeries []struct {
		Series string
		Values string
	} `yaml:"input_series"`
	AlertRuleTests []alertTestCase `yaml:"alert_rule_test"`
}

type alertTestCase struct {
	EvalTime  model.Duration `yaml:"eval_time"`
	Alertname string
	ExpAlerts []struct {
		ExpLabels      map[string]string `yaml:"exp_labels"`
		ExpAnnotations map[string]string `yaml:"exp_annotations"`
	} `yaml:"exp_alerts"`
}

// ruleFile writes the spec of prometheusrule.yaml, a Prometheus rule file,
// into a temporary directory and returns its path.
func ruleFile(t *testing.T) string {
	t.Helper()
	rule := readRule(t)
	spec, err := yaml.Marshal(&rule.Spec)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "imperator.rules.yaml")
	if err := os.WriteFile(path, spec, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func readAlertTests(t *testing.T) alertTests {
	t.Helper()
	data, err := os.ReadFile("alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var tests alertTests
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&tests); err != nil {
		t.Fatalf("alerts_test.yaml: %v", err)
	}
	if tests.EvaluationInterval <= 0 {
		t.Fatal("alerts_test.yaml: evaluation_interval must be set")
	}
	return tests
}

// TestEveryAlertFiresOnItsSeriesAndStaysQuietOtherwise evaluates the alerts
// of prometheusrule.yaml with Prometheus's rule manager on the synthetic
// series of alerts_test.yaml: an alert that never fires, fires too early
// (its for: not honoured), fires with other labels or renders its
// annotations wrong would stay silent or mislead on a real fleet.
func TestEveryAlertFiresOnItsSeriesAndStaysQuietOtherwise(t *testing.T) {
	file := ruleFile(t)
	tests := readAlertTests(t)
	known := exportedLabels(t)

	// Which alerts the file has, and which the tests show firing and quiet.
	alertNames := map[string]bool{}
	{
		m := rules.NewManager(&rules.ManagerOptions{Logger: promslog.NewNopLogger(), Context: context.Background()})
		groups, errs := m.LoadGroups(time.Minute, labels.EmptyLabels(), "", nil, false, file)
		for _, err := range errs {
			t.Fatalf("loading the rules: %v", err)
		}
		for _, g := range groups {
			for _, r := range g.Rules() {
				if _, ok := r.(*rules.AlertingRule); ok {
					alertNames[r.Name()] = true
				}
			}
		}
	}
	fires, quiet := map[string]bool{}, map[string]bool{}

	for _, tg := range tests.Tests {
		t.Run(tg.Name, func(t *testing.T) {
			for _, s := range tg.InputSeries {
				lbls, _, err := parser.ParseSeriesDesc(s.Series + " " + s.Values)
				if err != nil {
					t.Fatalf("series %s %q: %v", s.Series, s.Values, err)
				}
				name := lbls.Get(labels.MetricName)
				allowed, ok := known[name]
				if !ok {
					t.Errorf("series %s: %s is not a metric the hub or the agent exports (metrics.txt)", s.Series, name)
				}
				lbls.Range(func(l labels.Label) {
					if ok && !allowed[l.Name] {
						t.Errorf("series %s: %s has no label %s (metrics.txt)", s.Series, name, l.Name)
					}
				})
			}
			for _, c := range tg.AlertRuleTests {
				if !alertNames[c.Alertname] {
					t.Errorf("alert_rule_test names %s, which prometheusrule.yaml does not have", c.Alertname)
				}
				if time.Duration(c.EvalTime)%time.Duration(tests.EvaluationInterval) != 0 {
					t.Errorf("%s: eval_time %s is not a multiple of evaluation_interval %s", c.Alertname, c.EvalTime, tests.EvaluationInterval)
				}
				if len(c.ExpAlerts) == 0 {
					quiet[c.Alertname] = true
				} else {
					fires[c.Alertname] = true
				}
			}
			if t.Failed() {
				return
			}
			runAlertTestGroup(t, file, time.Duration(tests.EvaluationInterval), tg)
		})
	}

	for _, name := range slices.Sorted(maps.Keys(alertNames)) {
		if !fires[name] {
			t.Errorf("alerts_test.yaml has no case where %s fires", name)
		}
		if !quiet[name] {
			t.Errorf("alerts_test.yaml has no case where %s stays quiet", name)
		}
	}
}

// runAlertTestGroup loads tg's series and evaluates every rule group of file
// every interval from time 0 to the last eval_time, as promtool test rules
// does, and compares the firing alerts at each eval_time.
func runAlertTestGroup(t *testing.T, file string, interval time.Duration, tg alertTestGroup) {
	t.Helper()
	seriesInterval := time.Duration(tg.Interval)
	if seriesInterval == 0 {
		seriesInterval = interval
	}
	var load strings.Builder
	fmt.Fprintf(&load, "load %s\n", model.Duration(seriesInterval))
	for _, s := range tg.InputSeries {
		fmt.Fprintf(&load, "  %s %s\n", s.Series, s.Values)
	}
	suite, err := promqltest.NewLazyLoader(load.String(), promqltest.LazyLoaderOpts{EnableAtModifier: true, EnableNegativeOffset: true})
	if err != nil {
		t.Fatalf("loading the series: %v", err)
	}
	defer func() {
		if err := suite.Close(); err != nil {
			t.Error(err)
		}
	}()
	suite.SubqueryInterval = interval

	m := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:  rules.EngineQueryFunc(suite.QueryEngine(), suite.Storage()),
		Appendable: suite.Storage(),
		Queryable:  suite.Storage(),
		Context:    context.Background(),
		NotifyFunc: func(context.Context, string, ...*rules.Alert) {},
		Logger:     promslog.NewNopLogger(),
	})
	groupsByName, errs := m.LoadGroups(interval, labels.EmptyLabels(), "", nil, false, file)
	for _, err := range errs {
		t.Fatalf("loading the rules: %v", err)
	}
	groups := slices.SortedFunc(maps.Values(groupsByName), func(a, b *rules.Group) int { return strings.Compare(a.Name(), b.Name()) })
	var alerting []*rules.AlertingRule
	for _, g := range groups {
		for _, r := range g.Rules() {
			if ar, ok := r.(*rules.AlertingRule); ok {
				// As after a restart with the for state restored: the ALERTS
				// series are written from the first evaluation on.
				ar.SetRestored(true)
				alerting = append(alerting, ar)
			}
		}
	}

	byTime := map[time.Duration][]alertTestCase{}
	var last time.Duration
	for _, c := range tg.AlertRuleTests {
		at := time.Duration(c.EvalTime)
		byTime[at] = append(byTime[at], c)
		last = max(last, at)
	}
	start := time.Unix(0, 0).UTC()
	for at := time.Duration(0); at <= last; at += interval {
		ts := start.Add(at)
		suite.WithSamplesTill(ts, func(err error) {
			if err != nil {
				t.Fatalf("appending the series up to %s: %v", at, err)
			}
			for _, g := range groups {
				g.Eval(suite.Context(), ts)
				for _, r := range g.Rules() {
					if err := r.LastError(); err != nil {
						t.Fatalf("evaluating %s at %s: %v", r.Name(), at, err)
					}
				}
			}
		})
		for _, c := range byTime[at] {
			checkFiring(t, at, c, alerting)
		}
	}
}

// checkFiring compares the alerts of c.Alertname firing at at with c's.
func checkFiring(t *testing.T, at time.Duration, c alertTestCase, alerting []*rules.AlertingRule) {
	t.Helper()
	var firing []*rules.Alert
	for _, ar := range alerting {
		if ar.Name() != c.Alertname {
			continue
		}
		for _, a := range ar.ActiveAlerts() {
			if a.State == rules.StateFiring {
				firing = append(firing, a)
			}
		}
	}
	for _, a := range firing {
		a.Annotations.Range(func(l labels.Label) {
			if strings.Contains(l.Value, "error expanding template") || strings.Contains(l.Value, "<no value>") {
				t.Errorf("%s at %s: annotation %s does not render: %s", c.Alertname, at, l.Name, l.Value)
			}
		})
	}
	want := map[string]map[string]string{} // labels string -> expected annotations
	for _, e := range c.ExpAlerts {
		lbls := map[string]string{labels.AlertName: c.Alertname}
		maps.Copy(lbls, e.ExpLabels)
		want[labels.FromMap(lbls).String()] = e.ExpAnnotations
	}
	got := map[string]*rules.Alert{}
	for _, a := range firing {
		got[a.Labels.String()] = a
	}
	for key, annotations := range want {
		a, ok := got[key]
		if !ok {
			t.Errorf("%s at %s: want %s firing, firing: %v", c.Alertname, at, key, slices.Sorted(maps.Keys(got)))
			continue
		}
		for name, value := range annotations {
			if have := a.Annotations.Get(name); have != value {
				t.Errorf("%s at %s: %s: annotation %s = %q, want %q", c.Alertname, at, key, name, have, value)
			}
		}
	}
	for key := range got {
		if _, ok := want[key]; !ok {
			t.Errorf("%s at %s: %s fires, not expected (expected: %v)", c.Alertname, at, key, slices.Sorted(maps.Keys(want)))
		}
	}
}
