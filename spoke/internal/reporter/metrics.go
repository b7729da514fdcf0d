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

var (
	// reporterState is 1 for the state the hub reporter is in.
	reporterState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "imperator_spoke_reporter_state",
		Help: "1 for the state of this agent's hub reporter, 0 for the others: standby (another replica leads), " +
			"connecting (joining, dialing, or waiting to reconnect) or reporting (a Report stream is up).",
	}, []string{"state"})

	// lastReport is when the hub last took a message of this agent.
	lastReport = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "imperator_spoke_last_report_timestamp_seconds",
		Help: "Unix time at which the hub last answered this agent, or this agent last sent a heartbeat on a Report stream the hub answered; 0 before the first.",
	})

	// certificateExpiry is the NotAfter of the client certificate in use.
	certificateExpiry = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "imperator_spoke_certificate_expiry_timestamp_seconds",
		Help: "Unix time at which the hub client certificate this agent uses expires (renewed at two thirds of its life); 0 before the agent holds one.",
	})
)

// init adds the reporter's metrics to controller-runtime's registry, served
// on the agent's metrics endpoint; the reporter starts in standby.
func init() {
	setReporterState(stateStandby)
	metrics.Registry.MustRegister(reporterState, lastReport, certificateExpiry)
}

// setReporterState makes state the reporter's one state.
func setReporterState(state string) {
	for _, s := range reporterStates {
		value := 0.0
		if s == state {
			value = 1
		}
		reporterState.WithLabelValues(s).Set(value)
	}
}

// reported records that the hub took a message now.
func reported() { lastReport.SetToCurrentTime() }

// reportedIfAnswered records a message sent on a stream the hub has
// answered (answered is closed): the hub took the stream as the cluster's.
func reportedIfAnswered(answered <-chan struct{}) {
	select {
	case <-answered:
		reported()
	default:
	}
}

// usingCertificate records the expiry of the client certificate in use.
func usingCertificate(c *credential) {
	if c != nil && c.cert != nil && c.cert.Leaf != nil {
		certificateExpiry.Set(float64(c.cert.Leaf.NotAfter.Unix()))
	}
}
