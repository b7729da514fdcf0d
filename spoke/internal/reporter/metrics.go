package reporter

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The states of reporterState.
const (
	// stateStandby: this replica does not lead; another one reports.
	stateStandby = "standby"
	// stateConnecting: joining, dialing or opening a Report stream, or
	// waiting to reconnect after one ended.
	stateConnecting = "connecting"
	// stateReporting: a Report stream is up and the hub has its Snapshot.
	stateReporting = "reporting"
)

var reporterStates = []string{stateStandby, stateConnecting, stateReporting}

// clusterLabel names the cluster a reporter reports for (its name at the
// hub): an in-cluster agent has one reporter, a hosted agent one per member,
// each with series of its own.
const clusterLabel = "cluster"

var (
	// reporterState is 1 for the state a cluster's hub reporter is in.
	reporterState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "imperator_spoke_reporter_state",
		Help: "1 for the state of the hub reporter of cluster (the agent's own, or each member of a hosted agent), 0 for the others: standby (another replica leads), " +
			"connecting (joining, dialing, or waiting to reconnect) or reporting (a Report stream is up).",
	}, []string{clusterLabel, "state"})

	// lastReport is when the hub last took a message of a cluster.
	lastReport = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "imperator_spoke_last_report_timestamp_seconds",
		Help: "Unix time at which the hub last answered the reporter of cluster, or it last sent a heartbeat on a Report stream the hub answered; 0 before the first.",
	}, []string{clusterLabel})

	// certificateExpiry is the NotAfter of a cluster's client certificate
	// in use.
	certificateExpiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "imperator_spoke_certificate_expiry_timestamp_seconds",
		Help: "Unix time at which the hub client certificate of cluster expires (renewed at two thirds of its life); 0 before its reporter holds one.",
	}, []string{clusterLabel})
)

// init adds the reporter's metrics to controller-runtime's registry, served
// on the agent's metrics endpoint.
func init() {
	metrics.Registry.MustRegister(reporterState, lastReport, certificateExpiry)
}

// clusterMetrics are the series of one reporter, labelled with its cluster.
type clusterMetrics struct {
	cluster string
}

// metricsFor returns the series of cluster's reporter, which starts in
// standby, with no report and no certificate yet.
func metricsFor(cluster string) *clusterMetrics {
	m := &clusterMetrics{cluster: cluster}
	m.setState(stateStandby)
	lastReport.WithLabelValues(cluster).Set(0)
	certificateExpiry.WithLabelValues(cluster).Set(0)
	return m
}

// setState makes state the reporter's one state.
func (m *clusterMetrics) setState(state string) {
	for _, s := range reporterStates {
		value := 0.0
		if s == state {
			value = 1
		}
		reporterState.WithLabelValues(m.cluster, s).Set(value)
	}
}

// reported records that the hub took a message now.
func (m *clusterMetrics) reported() { lastReport.WithLabelValues(m.cluster).SetToCurrentTime() }

// reportedIfAnswered records a message sent on a stream the hub has
// answered (answered is closed): the hub took the stream as the cluster's.
func (m *clusterMetrics) reportedIfAnswered(answered <-chan struct{}) {
	select {
	case <-answered:
		m.reported()
	default:
	}
}

// usingCertificate records the expiry of the client certificate in use.
func (m *clusterMetrics) usingCertificate(c *credential) {
	if c != nil && c.cert != nil && c.cert.Leaf != nil {
		certificateExpiry.WithLabelValues(m.cluster).Set(float64(c.cert.Leaf.NotAfter.Unix()))
	}
}

// forget deletes the cluster's series once its reporter stopped: a member
// a hosted agent no longer serves must not show as standing by, nor keep a
// certificate expiry that alerts.
func (m *clusterMetrics) forget() {
	labels := prometheus.Labels{clusterLabel: m.cluster}
	reporterState.DeletePartialMatch(labels)
	lastReport.DeletePartialMatch(labels)
	certificateExpiry.DeletePartialMatch(labels)
}
