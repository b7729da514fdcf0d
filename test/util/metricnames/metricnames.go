// Package metricnames checks a binary's Prometheus registry against the
// conventions (promlint) and against deploy/monitoring/metrics.txt, the
// checked-in list of Imperator metrics that the alerting rules and the
// Grafana dashboard may use (deploy/monitoring's own module checks that they
// use no other): the list must name exactly what the binaries export.
package metricnames

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"google.golang.org/protobuf/proto"

	"github.com/imperator-federation/imperator/test/util/repo"
)

// ListPath is the list's path in the repository.
const ListPath = "deploy/monitoring/metrics.txt"

// Metric is one line of the list: which binary exports it, its name, type
// and label names.
type Metric struct {
	Component, Name, Type string
	// Labels are the label names of its series, sorted (a histogram's le
	// not counted).
	Labels []string
}

func (m Metric) String() string {
	labels := "-"
	if len(m.Labels) > 0 {
		labels = strings.Join(m.Labels, ",")
	}
	return m.Component + " " + m.Name + " " + m.Type + " " + labels
}

// Read reads the list: "<component> <name> <type> <labels>" lines (labels
// comma-separated, - for none), # comments.
func Read() ([]Metric, error) {
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(root, ListPath))
	if err != nil {
		return nil, fmt.Errorf("reading the metrics list: %w", err)
	}
	defer func() { _ = f.Close() }()
	var list []Metric
	scanner := bufio.NewScanner(f)
	for line := 1; scanner.Scan(); line++ {
		text := strings.TrimSpace(scanner.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 4 {
			return nil, fmt.Errorf("%s:%d: want \"<component> <name> <type> <labels, comma-separated, or ->\", got %q", ListPath, line, text)
		}
		var labels []string
		if fields[3] != "-" {
			labels = strings.Split(fields[3], ",")
			slices.Sort(labels)
		}
		list = append(list, Metric{Component: fields[0], Name: fields[1], Type: fields[2], Labels: labels})
	}
	return list, scanner.Err()
}

// Registry is what a binary serves its metrics from.
type Registry interface {
	prometheus.Registerer
	prometheus.Gatherer
}

// Check returns every problem of reg's metrics, component's in the list:
//   - a promlint problem of any metric reg gathers (the binary's own and the
//     libraries' alike), or of a listed metric of component that has no series
//     yet (linted from its list line: name and type);
//   - an imperator_ metric reg gathers that the list does not name for
//     component, or with another type, or a series of it with other label
//     names than the list's;
//   - a metric the list names for component that reg does not have
//     registered (a metric with no series yet counts when its name is taken
//     in reg).
func Check(component string, reg Registry) ([]string, error) {
	list, err := Read()
	if err != nil {
		return nil, err
	}
	families, err := reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("gathering metrics: %w", err)
	}
	listed := map[string]Metric{}
	for _, m := range list {
		if m.Component == component {
			listed[m.Name] = m
		}
	}
	problems := CheckFamilies(component, listed, families)
	gathered := map[string]bool{}
	for _, f := range families {
		gathered[f.GetName()] = true
	}
	// Listed metrics without series yet: linted from the list, and their
	// name must be taken in reg.
	for _, m := range slices.Sorted(maps.Keys(listed)) {
		if gathered[m] {
			continue
		}
		typ, ok := dto.MetricType_value[strings.ToUpper(listed[m].Type)]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: %s has unknown type %q", ListPath, m, listed[m].Type))
			continue
		}
		families = append(families, &dto.MetricFamily{Name: proto.String(m), Help: proto.String("listed"), Type: dto.MetricType(typ).Enum()})
		probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: m, Help: "probe of whether the name is registered"})
		if err := reg.Register(probe); err == nil {
			reg.Unregister(probe)
			problems = append(problems, fmt.Sprintf("%s is listed for %s in %s but not registered", m, component, ListPath))
		}
	}
	lint, err := promlint.NewWithMetricFamilies(families).Lint()
	if err != nil {
		return nil, err
	}
	for _, p := range lint {
		problems = append(problems, fmt.Sprintf("promlint: %s: %s", p.Metric, p.Text))
	}
	return problems, nil
}

// CheckFamilies returns a problem for every imperator_ family of families
// that listed (component's metrics by name) does not name, names with
// another type, or whose series have other label names than listed says.
func CheckFamilies(component string, listed map[string]Metric, families []*dto.MetricFamily) []string {
	var problems []string
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "imperator_") {
			continue
		}
		want, ok := listed[f.GetName()]
		typ := strings.ToLower(f.GetType().String())
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s (%s) is exported but not listed for %s in %s", f.GetName(), typ, component, ListPath))
			continue
		case want.Type != typ:
			problems = append(problems, fmt.Sprintf("%s is exported as a %s but listed as a %s in %s", f.GetName(), typ, want.Type, ListPath))
		}
		for _, m := range f.GetMetric() {
			var names []string
			for _, l := range m.GetLabel() {
				names = append(names, l.GetName())
			}
			slices.Sort(names)
			if !slices.Equal(names, want.Labels) {
				problems = append(problems, fmt.Sprintf("%s has a series with labels %v, listed with %v in %s", f.GetName(), names, want.Labels, ListPath))
				break
			}
		}
	}
	return problems
}
