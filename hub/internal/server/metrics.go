package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/imperator-federation/imperator/hub/internal/store"
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

// Metrics are the hub's Prometheus metrics.
type Metrics struct {
	connectedSpokes     prometheus.Gauge
	streamMessages      *prometheus.CounterVec
	rejectedConnections *prometheus.CounterVec
	ingestLatency       *prometheus.HistogramVec
	requests            *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them, with a collector of
// every cluster's heartbeat age read from st at scrape time, on reg.
func NewMetrics(reg prometheus.Registerer, st *store.Store) (*Metrics, error) {
	m := &Metrics{
		connectedSpokes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "imperator_hub_connected_spokes",
			Help: "Number of spoke clusters with an open Report stream on this hub replica.",
		}),
		streamMessages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "imperator_hub_stream_messages_total",
			Help: "Report stream messages by direction (received, sent) and type.",
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
	}
	for _, c := range []prometheus.Collector{m.connectedSpokes, m.streamMessages, m.rejectedConnections, m.ingestLatency, m.requests, heartbeatAgeCollector{st}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

var heartbeatAgeDesc = prometheus.NewDesc(
	"imperator_hub_cluster_heartbeat_age_seconds",
	"Seconds since the hub last heard from each spoke cluster.",
	[]string{"cluster"}, nil,
)

// heartbeatAgeCollector reports every cluster's heartbeat age at scrape time.
type heartbeatAgeCollector struct{ store *store.Store }

func (c heartbeatAgeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- heartbeatAgeDesc }

func (c heartbeatAgeCollector) Collect(ch chan<- prometheus.Metric) {
	for cluster, age := range c.store.HeartbeatAge() {
		ch <- prometheus.MustNewConstMetric(heartbeatAgeDesc, prometheus.GaugeValue, age.Seconds(), cluster)
	}
}
