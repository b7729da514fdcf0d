package nodepool

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// nodeConditions are the conditions poolNodes reports for every machine type
// of a pool, 0 when no node is in it.
var nodeConditions = []imperatorv1alpha1.NodeCondition{
	imperatorv1alpha1.NodeConditionReady, imperatorv1alpha1.NodeConditionNotReady,
	imperatorv1alpha1.NodeConditionMaintenance, imperatorv1alpha1.NodeConditionMissing,
	imperatorv1alpha1.NodeConditionConflict,
}

// poolNodes is status.nodePool of each MachineNodePool, counted by machine
// type and condition.
var poolNodes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "imperator_spoke_nodepool_nodes",
	Help: "Nodes listed in a MachineNodePool by machine type and condition (Ready, NotReady, Maintenance, Missing, Conflict), as its status reports them.",
}, []string{"cluster", "pool", "machine_group", "machine_type", "condition"})

func init() { metrics.Registry.MustRegister(poolNodes) }

// poolSeries replaces a pool's series after each reconcile, so that a
// deleted pool's series go.
type poolSeries struct{ mu sync.Mutex }

var nodeSeries poolSeries

// observe reports pool's nodes at the end of a reconcile of cluster's pool
// name: a pool that is gone (not found, nothing failed) or being deleted has
// no series; a failed read keeps the last ones.
func (s *poolSeries) observe(cluster, name string, pool *imperatorv1alpha1.MachineNodePool, reconcileErr error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pool.Name == "" && reconcileErr != nil {
		return
	}
	poolNodes.DeletePartialMatch(prometheus.Labels{"cluster": cluster, "pool": name})
	if pool.Name == "" || !pool.DeletionTimestamp.IsZero() {
		return
	}
	counts := map[string]map[imperatorv1alpha1.NodeCondition]int{}
	for _, n := range pool.Status.NodePool {
		if counts[n.MachineType] == nil {
			counts[n.MachineType] = map[imperatorv1alpha1.NodeCondition]int{}
		}
		counts[n.MachineType][n.Condition]++
	}
	for machineType, byCondition := range counts {
		for _, condition := range nodeConditions {
			poolNodes.WithLabelValues(cluster, name, pool.Spec.MachineGroup, machineType, string(condition)).Set(float64(byCondition[condition]))
		}
	}
}
