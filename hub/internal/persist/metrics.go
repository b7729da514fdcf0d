package persist

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Results of persistDuration.
const (
	persistSucceeded = "success"
	persistConflict  = "conflict"
	persistFailed    = "error"
)

// persistDuration is how long writing one cluster to the hub cluster's API
// takes (the ManagedCluster's condition, the Lease, the ClusterInventory
// status), by result.
var persistDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name: "imperator_hub_inventory_persist_duration_seconds",
	Help: "Time to write one cluster (ManagedCluster condition, the cluster's Lease when its serving replica changes, ClusterInventory status) to the hub cluster's API, " +
		"by result: success, conflict (retried at once) or error.",
	Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 10),
}, []string{"result"})

func init() {
	for _, result := range []string{persistSucceeded, persistConflict, persistFailed} {
		persistDuration.WithLabelValues(result)
	}
	ctrlmetrics.Registry.MustRegister(persistDuration)
}

// timedSync is sync, timed in persistDuration.
func (p *Persister) timedSync(ctx context.Context, name string) error {
	start := time.Now()
	err := p.sync(ctx, name)
	result := persistSucceeded
	switch {
	case apierrors.IsConflict(err):
		result = persistConflict
	case err != nil:
		result = persistFailed
	}
	persistDuration.WithLabelValues(result).Observe(time.Since(start).Seconds())
	return err
}
