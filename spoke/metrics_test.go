package main

import (
	"testing"

	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/imperator-federation/imperator/test/util/metricnames"
)

// TestAgentMetricsFollowConventionsAndMatchTheList gathers the registry the
// agent serves (controller-runtime's: the agent's packages register their
// metrics there when the binary starts) and fails on any promlint problem,
// and unless the imperator_ metrics are exactly the spoke's lines of
// deploy/monitoring/metrics.txt: an alert or a dashboard panel on a metric
// the agent does not export would stay silent.
func TestAgentMetricsFollowConventionsAndMatchTheList(t *testing.T) {
	problems, err := metricnames.Check("spoke", ctrlmetrics.Registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
