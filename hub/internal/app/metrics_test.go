package app

import (
	"testing"
	"time"

	"k8s.io/utils/clock"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/imperator-federation/imperator/hub/internal/store"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	"github.com/imperator-federation/imperator/test/util/metricnames"
)

// TestHubMetricsFollowConventionsAndMatchTheList gathers the registry the hub
// binary serves (controller-runtime's, where Run registers the hub's metrics
// and the persister its own), with one reporting cluster in the store, and
// fails on any promlint problem, and unless the imperator_ metrics are
// exactly the hub's lines of deploy/monitoring/metrics.txt: an alert or a
// dashboard panel on a metric the hub does not export would stay silent.
func TestHubMetricsFollowConventionsAndMatchTheList(t *testing.T) {
	st := store.New(clock.RealClock{}, time.Minute)
	st.Connect("gpu-east", &federationv1.Hello{ClusterName: "gpu-east", Epoch: 1})
	st.ApplySnapshot("gpu-east", 1, &federationv1.Snapshot{Generation: 1, Machines: []*federationv1.Machine{{
		Name: "a100", Group: "training",
		Types: []*federationv1.MachineType{{Name: "a100-x8", Cpu: "96", Memory: "1Ti", Available: 4,
			Usage: &federationv1.Usage{Maximum: 4, Reserved: 2, Used: 1, Waiting: 1, Queued: 1}}},
	}}})
	if _, err := registerMetrics(ctrlmetrics.Registry, st, nil); err != nil {
		t.Fatalf("registering the hub's metrics: %v", err)
	}
	problems, err := metricnames.Check("hub", ctrlmetrics.Registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
