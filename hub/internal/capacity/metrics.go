package capacity

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/imperator-federation/imperator/hub/internal/store"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// The states of clusterUnits: a machine type's usage and its free units.
var unitStates = []string{"maximum", "reserved", "used", "waiting", "queued", "held", "free"}

// clusterStates are the values of imperator_hub_cluster_state's state label:
// the query API's cluster states as imperatorctl prints them.
var clusterStates = []queryv1.ClusterState{
	queryv1.ClusterState_CLUSTER_STATE_AVAILABLE,
	queryv1.ClusterState_CLUSTER_STATE_STALE,
	queryv1.ClusterState_CLUSTER_STATE_OFFLINE,
}

// clusterStateName is the state label of s: Available, Stale, Offline.
func clusterStateName(s queryv1.ClusterState) string {
	switch s {
	case queryv1.ClusterState_CLUSTER_STATE_AVAILABLE:
		return "Available"
	case queryv1.ClusterState_CLUSTER_STATE_STALE:
		return "Stale"
	case queryv1.ClusterState_CLUSTER_STATE_OFFLINE:
		return "Offline"
	default:
		return "Unspecified"
	}
}

var (
	heartbeatAgeDesc = prometheus.NewDesc(
		"imperator_hub_cluster_heartbeat_age_seconds",
		"Seconds since the hub last heard from each spoke cluster.",
		[]string{"cluster"}, nil,
	)
	clusterStateDesc = prometheus.NewDesc(
		"imperator_hub_cluster_state",
		"1 for the state each spoke cluster is in (Available, Stale, Offline, as imperatorctl get clusters shows it), 0 for the others.",
		[]string{"cluster", "state"}, nil,
	)
	clusterUnitsDesc = prometheus.NewDesc(
		"imperator_hub_cluster_units",
		"Units of each machine type of each cluster (summed over the cluster's Machines of the group) by state: "+
			"maximum, reserved, used, waiting, queued (of waiting, held at the slot gate), held (set aside for capacity holds) and free (what a query offers when the cluster is Available). "+
			"The figures last reported, also while the cluster is Stale or Offline.",
		[]string{"cluster", "group", "type", "state"}, nil,
	)
	typeGPUsDesc = prometheus.NewDesc(
		"imperator_hub_type_gpus",
		"GPUs in one unit of each machine type of each cluster (the type's gpu.num; 0 for a CPU-only type). "+
			"GPUs by state: imperator_hub_cluster_units * on (cluster, group, type) group_left imperator_hub_type_gpus.",
		[]string{"cluster", "group", "type"}, nil,
	)
)

// clusterCollector reports, at scrape time from the store, every cluster's
// state, heartbeat age, units and GPUs per unit. Series of a deregistered
// cluster go with it.
//
// Cardinality of imperator_hub_cluster_units: 7 series per distinct
// (group, type) of each cluster, and one of imperator_hub_type_gpus; the
// hub's ingest limits cap a cluster at MaxTypes (50,000) types, a fleet is
// typically a few dozen per cluster. The GPUs per unit are a gauge of their
// own rather than a state of units so that GPU figures cost one series per
// type, not seven.
type clusterCollector struct{ store *store.Store }

// NewCollector returns the collector of every cluster's state, heartbeat
// age, units and GPUs per unit in st, read at scrape time.
func NewCollector(st *store.Store) prometheus.Collector { return clusterCollector{st} }

func (c clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- heartbeatAgeDesc
	ch <- clusterStateDesc
	ch <- clusterUnitsDesc
	ch <- typeGPUsDesc
}

// typeKey names the units series of one machine type of a cluster.
type typeKey struct{ group, name string }

func (c clusterCollector) Collect(ch chan<- prometheus.Metric) {
	for cluster, age := range c.store.HeartbeatAge() {
		ch <- prometheus.MustNewConstMetric(heartbeatAgeDesc, prometheus.GaugeValue, age.Seconds(), cluster)
	}
	for _, cl := range c.store.List() {
		current := StateOf(cl)
		for _, s := range clusterStates {
			value := 0.0
			if s == current {
				value = 1
			}
			ch <- prometheus.MustNewConstMetric(clusterStateDesc, prometheus.GaugeValue, value, cl.Name, clusterStateName(s))
		}
		units := map[typeKey][]int64{}
		// GPUs per unit; Machines of one group define a type once (the
		// validator refuses a second Machine of a group), the largest
		// count if a spoke reported two anyway.
		gpus := map[typeKey]int32{}
		for _, m := range cl.Machines {
			for _, t := range m.GetTypes() {
				key := typeKey{m.GetGroup(), t.GetName()}
				gpus[key] = max(gpus[key], t.GetGpu().GetNum())
				sums, ok := units[key]
				if !ok {
					sums = make([]int64, len(unitStates))
					units[key] = sums
				}
				u := t.GetUsage()
				maximum := int64(u.GetMaximum())
				if u == nil {
					maximum = int64(t.GetAvailable())
				}
				for i, v := range []int64{maximum, int64(u.GetReserved()), int64(u.GetUsed()), int64(u.GetWaiting()),
					int64(u.GetQueued()), int64(u.GetHeld()), int64(Free(t))} {
					sums[i] += v
				}
			}
		}
		for key, sums := range units {
			for i, state := range unitStates {
				ch <- prometheus.MustNewConstMetric(clusterUnitsDesc, prometheus.GaugeValue, float64(sums[i]), cl.Name, key.group, key.name, state)
			}
			ch <- prometheus.MustNewConstMetric(typeGPUsDesc, prometheus.GaugeValue, float64(gpus[key]), cl.Name, key.group, key.name)
		}
	}
}
