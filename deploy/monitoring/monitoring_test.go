// Package monitoring holds the checks of the alerting rules and the Grafana
// dashboard; the files themselves are deployed with kustomize.
package monitoring

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"gopkg.in/yaml.v3"
)

// scrapeLabels are the labels Prometheus (and the Prometheus Operator's
// PodMonitor) adds to every series it scrapes.
var scrapeLabels = []string{"instance", "job", "namespace", "pod", "container", "endpoint", "service"}

// exported reads metrics.txt: the metrics the hub and the agent export,
// which the product module's promlint tests hold equal to what each binary
// registers.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for name := range exportedLabels(t) {
		out[name] = true
	}
	return out
}

// exportedLabels reads metrics.txt: every series name the hub and the agent
// export (a histogram's _bucket, _sum and _count included) with the label
// names a scraped series of it may have: the binary's, the scrape's, and a
// bucket's le.
func exportedLabels(t *testing.T) map[string]map[string]bool {
	t.Helper()
	f, err := os.Open("metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string]bool{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		if len(fields) != 4 {
			t.Fatalf("metrics.txt: %q: want <component> <name> <type> <labels, comma-separated, or ->", s.Text())
		}
		name, typ := fields[1], fields[2]
		allowed := func(extra ...string) map[string]bool {
			set := map[string]bool{labels.MetricName: true}
			if fields[3] != "-" {
				for _, l := range strings.Split(fields[3], ",") {
					set[l] = true
				}
			}
			for _, l := range append(extra, scrapeLabels...) {
				set[l] = true
			}
			return set
		}
		out[name] = allowed()
		if typ == "histogram" {
			out[name+"_bucket"] = allowed(labels.BucketLabel)
			out[name+"_sum"] = allowed()
			out[name+"_count"] = allowed()
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("metrics.txt lists no metric")
	}
	return out
}

// labelProblems parses expr as Prometheus does and returns every label it
// selects, groups or matches on that the metrics it reads do not have
// (known: metrics.txt's labels by series name): a selector on a label
// nobody exports matches nothing, a grouping by one gives a single series.
func labelProblems(expr string, known map[string]map[string]bool) ([]string, error) {
	parsed, err := parser.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var problems []string
	union := map[string]bool{}
	parser.Inspect(parsed, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		allowed := known[vs.Name]
		for l := range allowed {
			union[l] = true
		}
		for _, m := range vs.LabelMatchers {
			if allowed != nil && !allowed[m.Name] {
				problems = append(problems, fmt.Sprintf("%s has no label %s", vs.Name, m.Name))
			}
		}
		return nil
	})
	parser.Inspect(parsed, func(node parser.Node, _ []parser.Node) error {
		var used []string
		switch n := node.(type) {
		case *parser.AggregateExpr:
			if !n.Without {
				used = n.Grouping
			}
		case *parser.BinaryExpr:
			if n.VectorMatching != nil {
				used = append(used, n.VectorMatching.Include...)
				if n.VectorMatching.On {
					used = append(used, n.VectorMatching.MatchingLabels...)
				}
			}
		}
		for _, l := range used {
			if !union[l] {
				problems = append(problems, fmt.Sprintf("groups or matches on %s, which no metric it reads has", l))
			}
		}
		return nil
	})
	return problems, nil
}

// metricsOf parses expr as Prometheus does and returns the metric names its
// selectors read.
func metricsOf(expr string) ([]string, error) {
	parsed, err := parser.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(parsed, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
			names = append(names, name)
		}
		return nil
	})
	return names, nil
}

// prometheusRule is the part of a PrometheusRule the test reads.
type prometheusRule struct {
	APIVersion string    `yaml:"apiVersion"`
	Kind       string    `yaml:"kind"`
	Spec       yaml.Node `yaml:"spec"`
}

// readRule reads prometheusrule.yaml.
func readRule(t *testing.T) prometheusRule {
	t.Helper()
	data, err := os.ReadFile("prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rule prometheusRule
	if err := yaml.Unmarshal(data, &rule); err != nil {
		t.Fatal(err)
	}
	return rule
}

func TestAlertsParseAndUseOnlyExportedMetrics(t *testing.T) {
	rule := readRule(t)
	if rule.APIVersion != "monitoring.coreos.com/v1" || rule.Kind != "PrometheusRule" {
		t.Fatalf("prometheusrule.yaml is a %s %s, want a monitoring.coreos.com/v1 PrometheusRule", rule.APIVersion, rule.Kind)
	}
	// spec is a Prometheus rule file: rulefmt checks it as Prometheus does
	// on load (fields, durations, PromQL, label and annotation templates).
	spec, err := yaml.Marshal(&rule.Spec)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation)
	for _, err := range errs {
		t.Errorf("prometheusrule.yaml spec: %v", err)
	}
	if groups == nil {
		t.FailNow()
	}
	known := exported(t)
	knownLabels := exportedLabels(t)
	var alerts []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			name := r.Alert
			if name == "" {
				name = r.Record
			}
			alerts = append(alerts, name)
			names, err := metricsOf(r.Expr)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if len(names) == 0 {
				t.Errorf("%s reads no metric", name)
			}
			for _, m := range names {
				if !known[m] {
					t.Errorf("%s uses %s, which neither the hub nor the agent exports (metrics.txt)", name, m)
				}
			}
			problems, _ := labelProblems(r.Expr, knownLabels)
			for _, p := range problems {
				t.Errorf("%s: %s (metrics.txt)", name, p)
			}
			if r.Alert != "" {
				if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
					t.Errorf("%s: every alert needs a severity label and summary and description annotations", name)
				}
			}
		}
	}
	// The alerts issue 20 asks for, by name.
	for _, want := range []string{"ImperatorClusterOffline", "ImperatorSpokeReportsStale", "ImperatorSpokeCertificateExpiringSoon",
		"ImperatorWebhookFailing", "ImperatorMachineOverSubscribed", "ImperatorMachineInsufficientCapacity"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alert %s is missing", want)
		}
	}
}

// grafanaVariable is a dashboard variable in a query: $name, ${name}, [[name]].
var grafanaVariable = regexp.MustCompile(`\$\{?(__[a-z_]+|[A-Za-z0-9_]+)\}?|\[\[[A-Za-z0-9_]+\]\]`)

// withVariables gives the dashboard's variables values Prometheus can
// parse: an interval for Grafana's interval variables, a regex for the rest.
func withVariables(expr string) string {
	return grafanaVariable.ReplaceAllStringFunc(expr, func(v string) string {
		if strings.Contains(v, "__") && strings.Contains(v, "interval") || strings.Contains(v, "__range") {
			return "5m"
		}
		return ".*"
	})
}

type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

func TestDashboardQueriesParseAndUseOnlyExportedMetrics(t *testing.T) {
	data, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Error("dashboard.json needs a title and a uid (Grafana imports by uid)")
	}
	known := exported(t)
	knownLabels := exportedLabels(t)
	check := func(where, expr string) {
		names, err := metricsOf(withVariables(expr))
		if err != nil {
			t.Errorf("%s: %q: %v", where, expr, err)
			return
		}
		problems, _ := labelProblems(withVariables(expr), knownLabels)
		for _, p := range problems {
			t.Errorf("%s: %s (metrics.txt)", where, p)
		}
		for _, m := range names {
			if !known[m] {
				t.Errorf("%s uses %s, which neither the hub nor the agent exports (metrics.txt)", where, m)
			}
		}
	}
	var walk func([]panel)
	queries := 0
	walk = func(panels []panel) {
		for _, p := range panels {
			for _, target := range p.Targets {
				queries++
				check("panel "+p.Title, target.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	if queries == 0 {
		t.Fatal("dashboard.json has no queries")
	}
	// Variables: label_values(<metric>, <label>) reads a metric too.
	labelValues := regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)`)
	for _, v := range d.Templating.List {
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) != nil {
			continue
		}
		if m := labelValues.FindStringSubmatch(q.Query); m != nil && !known[m[1]] {
			t.Errorf("variable %s uses %s, which neither the hub nor the agent exports (metrics.txt)", v.Name, m[1])
		}
	}
	// The panels issue 20 asks for.
	var titles []string
	for _, p := range d.Panels {
		titles = append(titles, p.Title)
	}
	for _, want := range []string{"Fleet units by state", "Fleet GPUs by state", "Used and free units per cluster", "Units per machine type", "Cluster states", "Guest handover latency"} {
		if !slices.Contains(titles, want) {
			t.Errorf("panel %q is missing", want)
		}
	}
}
