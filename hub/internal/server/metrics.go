package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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

// NewMetrics creates the metrics and registers them on reg, with one read
// at scrape time: from leading whether this replica leads (nil: the only
// replica, always leading). The clusters' figures are capacity.NewCollector's.
// It is long on purpose: one definition per metric, a table kept in one
// place (deploy/monitoring/metrics.txt lists the same names).
func NewMetrics(reg prometheus.Registerer, leading func() bool) (*Metrics, error) {
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
		m.requests, m.requestDuration, m.openStreams, m.streamDuration, m.joins, leader} {
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
