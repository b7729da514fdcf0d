package machine

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// The gauges follow the Machine's types: a removed type's series go, and a
// deleted Machine leaves neither series nor bookkeeping behind.
func TestUsageSeries(t *testing.T) {
	var s usageSeries
	types := func(names ...string) []imperatorv1alpha1.AvailableMachine {
		out := make([]imperatorv1alpha1.AvailableMachine, 0, len(names))
		for _, name := range names {
			out = append(out, imperatorv1alpha1.AvailableMachine{Name: name, Usage: imperatorv1alpha1.Usage{Maximum: 4, Reserved: 3, Used: 1}})
		}
		return out
	}
	const states = 7 // maximum, reserved, used, waiting, queued, unplaceable, held
	steps := []struct {
		name       string
		usage      []imperatorv1alpha1.AvailableMachine
		wantSeries int
	}{
		{"two types", types("compute-medium", "compute-xlarge"), 2 * states},
		{"a type removed", types("compute-medium"), states},
		{"the Machine deleted", nil, 0},
	}
	for _, step := range steps {
		s.set("local/general-machine", "local", group, step.usage)
		if got := seriesCount(); got != step.wantSeries {
			t.Errorf("%s: %d series, want %d", step.name, got, step.wantSeries)
		}
	}
	if len(s.reported) != 0 {
		t.Errorf("series still remembered after the Machine was deleted: %v", s.reported)
	}
}

// seriesCount is the number of series of the usage gauge.
func seriesCount() int {
	ch := make(chan prometheus.Metric, 64)
	machineTypeUnits.Collect(ch)
	close(ch)
	return len(ch)
}
