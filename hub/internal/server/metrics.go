package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/imperator-federation/imperator/hub/internal/capacity"
	"github.com/imperator-federation/imperator/hub/internal/store"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// Rejection reasons of rejectedConnections.
const (
	rejectNoCertificate  = "no_client_certificate"
	rejectBadCertificate = "not_a_spoke_certificate"
	rejectWrongCluster   = "cluster_mismatch"
	rejectNotAccepted    = "hub_does_not_accept_client"
	rejectProtocol       = "protocol_violation"
	rejectRevoked        = "certificate_revoked"
	// Anonymous surface and connection limits.
	rejectHandshake         = "tls_handshake_failed"
	rejectTooManyAnonymous  = "too_many_anonymous_connections"
	rejectTooManyFromSource = "too_many_unverified_connections_from_source"
	rejectAnonymousMethod   = "anonymous_method_not_allowed"
	rejectJoinRateLimited   = "join_rate_limited"
	// Authenticated connections and handshakes over their limits.
	rejectTooManyHandshakes              = "too_many_handshakes"
	rejectTooManyForCertificate          = "too_many_connections_for_certificate"
	rejectTooManyAuthenticatedFromSource = "too_many_authenticated_connections_from_source"
)

// rejectReasons are every reason of rejectedConnections, whose series start
// at 0 so that rate() and increase() see the first refusal.
var rejectReasons = []string{
	rejectNoCertificate, rejectBadCertificate, rejectWrongCluster, rejectNotAccepted, rejectProtocol, rejectRevoked,
	rejectHandshake, rejectTooManyAnonymous, rejectTooManyFromSource, rejectAnonymousMethod, rejectJoinRateLimited,
	rejectTooManyHandshakes, rejectTooManyForCertificate, rejectTooManyAuthenticatedFromSource,
	rejectInvalidInventory, rejectMessageRate,
}

// Outcomes of joins.
const (
	joinJoined         = "joined"
	joinBadToken       = "bad_token"
	joinDenied         = "denied"
	joinInvalidRequest = "invalid_request"
	joinThrottled      = "throttled"
	joinError          = "error"
)

// joinOutcome names the outcome of a Join call by its status code.
func joinOutcome(err error) string {
	switch status.Code(err) {
	case codes.OK:
		return joinJoined
	case codes.Unauthenticated:
		return joinBadToken
	case codes.PermissionDenied:
		return joinDenied
	case codes.InvalidArgument:
		return joinInvalidRequest
	case codes.ResourceExhausted, codes.DeadlineExceeded:
		return joinThrottled
	default:
		return joinError
	}
}

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

// Metrics are the hub's Prometheus metrics.
type Metrics struct {
	connectedSpokes     prometheus.Gauge
	streamMessages      *prometheus.CounterVec
	rejectedConnections *prometheus.CounterVec
	ingestLatency       *prometheus.HistogramVec
	requests            *prometheus.CounterVec
	requestDuration     *prometheus.HistogramVec
	openStreams         *prometheus.GaugeVec
	streamDuration      *prometheus.HistogramVec
	joins               *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them on reg, with collectors
// read at scrape time: from st every cluster's state, heartbeat age and
// units, and from leading whether this replica leads (nil: the only replica,
// always leading).
func NewMetrics(reg prometheus.Registerer, st *store.Store, leading func() bool) (*Metrics, error) {
	m := &Metrics{
		connectedSpokes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "imperator_hub_connected_spokes",
			Help: "Number of spoke clusters with an open Report stream on this hub replica.",
		}),
		streamMessages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "imperator_hub_stream_messages_total",
			Help: "Report stream messages by direction (received, sent, dropped) and type.",
		}, []string{"direction", "type"}),
		rejectedConnections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "imperator_hub_rejected_connections_total",
			Help: "Calls and streams refused, by reason.",
		}, []string{"reason"}),
		ingestLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "imperator_hub_ingest_duration_seconds",
			Help:    "Time from receiving a Snapshot or Delta to its figures being queryable in the index.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10),
		}, []string{"type"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "imperator_hub_grpc_requests_total",
			Help: "gRPC calls and streams handled, by method and status code.",
		}, []string{"method", "code"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "imperator_hub_grpc_request_duration_seconds",
			Help:    "Time to answer a unary gRPC call (queries, Join, Renew), by method, from its authentication to its answer.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"method"}),
		openStreams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "imperator_hub_grpc_open_streams",
			Help: "gRPC streams open on this hub replica after their authentication, by method (spokes' Report, clients' Watch).",
		}, []string{"method"}),
		streamDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "imperator_hub_grpc_stream_duration_seconds",
			Help: "How long a gRPC stream was open, from its authentication to its end, by method: Report streams that end after seconds mean spokes reconnecting over and over (their end codes: imperator_hub_grpc_requests_total).",
			// 1 s to 3 days: a healthy Report stream lasts as long as the
			// hub replica or the agent runs.
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}, []string{"method"}),
		joins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "imperator_hub_joins_total",
			Help: "Join calls by outcome: joined, bad_token, denied, invalid_request, throttled, error.",
		}, []string{"outcome"}),
	}
	// Series of known label values start at 0.
	for _, reason := range rejectReasons {
		m.rejectedConnections.WithLabelValues(reason)
	}
	for _, outcome := range []string{joinJoined, joinBadToken, joinDenied, joinInvalidRequest, joinThrottled, joinError} {
		m.joins.WithLabelValues(outcome)
	}
	for _, kind := range []string{"snapshot", "delta"} {
		m.ingestLatency.WithLabelValues(kind)
	}
	for _, dm := range [][2]string{{"received", "hello"}, {"received", "snapshot"}, {"received", "delta"}, {"received", "heartbeat"},
		{"received", "hold_response"}, {"sent", "ack"}, {"sent", "resync"}, {"sent", "hold_request"}, {"dropped", "heartbeat"}} {
		m.streamMessages.WithLabelValues(dm[0], dm[1])
	}
	for _, desc := range []grpc.ServiceDesc{federationv1.Federation_ServiceDesc, queryv1.Query_ServiceDesc} {
		for _, method := range desc.Methods {
			m.requestDuration.WithLabelValues("/" + desc.ServiceName + "/" + method.MethodName)
			m.requests.WithLabelValues("/"+desc.ServiceName+"/"+method.MethodName, codes.OK.String())
		}
		for _, stream := range desc.Streams {
			m.openStreams.WithLabelValues("/" + desc.ServiceName + "/" + stream.StreamName)
			m.streamDuration.WithLabelValues("/" + desc.ServiceName + "/" + stream.StreamName)
		}
	}
	if leading == nil {
		leading = func() bool { return true }
	}
	leader := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "imperator_hub_leader",
		Help: "1 while this hub replica leads (publishes placement scores and marks silent clusters Unknown), else 0.",
	}, func() float64 {
		if leading() {
			return 1
		}
		return 0
	})
	for _, c := range []prometheus.Collector{m.connectedSpokes, m.streamMessages, m.rejectedConnections, m.ingestLatency,
		m.requests, m.requestDuration, m.openStreams, m.streamDuration, m.joins, leader, clusterCollector{st}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observeCall records a unary call's status and how long it took.
func (m *Metrics) observeCall(method string, start time.Time, err error) {
	m.requests.WithLabelValues(method, status.Code(err).String()).Inc()
	m.requestDuration.WithLabelValues(method).Observe(time.Since(start).Seconds())
	if method == federationv1.Federation_Join_FullMethodName {
		m.joins.WithLabelValues(joinOutcome(err)).Inc()
	}
}

// streamOpened counts an authenticated stream of method as open; the
// returned func records its end: its status code and how long it was open.
func (m *Metrics) streamOpened(method string, start time.Time) (closed func(err error)) {
	m.openStreams.WithLabelValues(method).Inc()
	return func(err error) {
		m.openStreams.WithLabelValues(method).Dec()
		m.requests.WithLabelValues(method, status.Code(err).String()).Inc()
		m.streamDuration.WithLabelValues(method).Observe(time.Since(start).Seconds())
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
		current := capacity.StateOf(cl)
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
					int64(u.GetQueued()), int64(u.GetHeld()), int64(capacity.Free(t))} {
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
