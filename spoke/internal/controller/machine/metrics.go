package machine

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// Metric label names.
const (
	labelCluster      = "cluster"
	labelMachineGroup = "machine_group"
	labelMachineType  = "machine_type"
	labelState        = "state"
)

// The states of machineTypeUnits, one per field of the Machine's usage.
const (
	stateMaximum  = "maximum"
	stateReserved = "reserved"
	stateUsed     = "used"
	stateWaiting  = "waiting"
	stateQueued   = "queued"
	stateHeld     = "held"
	// stateUnplaceable: queued guests no ready node of the type can take.
	stateUnplaceable = "unplaceable"
)

var (
	// machineTypeUnits is status.availableMachines[].usage as a gauge.
	machineTypeUnits = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "imperator",
		Subsystem: "machine",
		Name:      "type_units",
		Help: "Units of a machine type by state: maximum (available), reserved (bound reservation pods), " +
			"used (bound guest pods), waiting (guest pods not yet bound), queued (those of waiting held at the slot gate), " +
			"unplaceable (those of queued no ready node can take, which hold no unit) and held (set aside for capacity holds).",
	}, []string{labelCluster, labelMachineGroup, labelMachineType, labelState})

	// guestHandoverSeconds is the time from a guest pod's creation until the
	// agent sees it Running.
	guestHandoverSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "imperator",
		Subsystem: "machine",
		Name:      "guest_handover_seconds",
		Help:      "Time from the creation of a guest pod until it runs (the creation time has a resolution of one second).",
		Buckets:   []float64{0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300},
	}, []string{labelCluster, labelMachineGroup, labelMachineType})

	// machineCondition is the Machine's conditions as 0/1 gauges, for
	// alerts on capacity that stays short or oversubscribed.
	machineCondition = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "imperator",
		Subsystem: "machine",
		Name:      "condition",
		Help:      "1 while a condition of a Machine (Ready, InsufficientCapacity, OverSubscribed, StrayGuests) is True, else 0.",
	}, []string{labelMachineGroup, labelMachine, labelCondition})

	registerMetrics sync.Once
)

// Label names of machineCondition.
const (
	labelMachine   = "machine"
	labelCondition = "condition"
)

// The agent's registry has the Machine metrics from the start, also on a
// replica that does not lead (it serves the webhooks and the metrics).
func init() { register() }

// register adds the Machine controller's metrics to controller-runtime's
// registry, served on the agent's metrics endpoint.
func register() {
	registerMetrics.Do(func() {
		metrics.Registry.MustRegister(machineTypeUnits, guestHandoverSeconds, machineCondition)
	})
}

// seriesKey names the gauge series of one machine type.
type seriesKey struct{ cluster, group, machineType string }

// usageSeries remembers which series each Machine reported, so that the
// series of a removed type or a deleted Machine disappear.
type usageSeries struct {
	mu       sync.Mutex
	reported map[string]map[seriesKey]struct{} // by cluster/machine name
}

// set reports the usage of every type of a Machine and drops the series it
// reported before and no longer has. A nil usage drops them all.
func (s *usageSeries) set(machineKey string, cluster, group string, usage []imperatorv1alpha1.AvailableMachine) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reported == nil {
		s.reported = map[string]map[seriesKey]struct{}{}
	}
	current := make(map[seriesKey]struct{}, len(usage))
	for _, m := range usage {
		key := seriesKey{cluster, group, m.Name}
		current[key] = struct{}{}
		for state, value := range map[string]int32{
			stateMaximum: m.Usage.Maximum, stateReserved: m.Usage.Reserved,
			stateUsed: m.Usage.Used, stateWaiting: m.Usage.Waiting, stateQueued: m.Usage.Queued, stateHeld: m.Usage.Held,
			stateUnplaceable: m.Usage.Unplaceable,
		} {
			machineTypeUnits.WithLabelValues(cluster, group, m.Name, state).Set(float64(value))
		}
	}
	for key := range s.reported[machineKey] {
		if _, ok := current[key]; !ok {
			machineTypeUnits.DeletePartialMatch(prometheus.Labels{
				labelCluster: key.cluster, labelMachineGroup: key.group, labelMachineType: key.machineType,
			})
		}
	}
	if len(usage) == 0 && cluster == "" && group == "" {
		// The Machine is gone: so are its conditions.
		machineCondition.DeletePartialMatch(prometheus.Labels{labelMachine: machineKey[strings.LastIndex(machineKey, "/")+1:]})
	}
	if len(current) == 0 {
		delete(s.reported, machineKey)
		return
	}
	s.reported[machineKey] = current
}
