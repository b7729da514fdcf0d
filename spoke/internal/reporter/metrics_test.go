package reporter

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

func TestReporterStateIsOneHot(t *testing.T) {
	m := metricsFor("one-hot")
	t.Cleanup(m.forget)
	for _, state := range reporterStates {
		m.setState(state)
		got := map[string]float64{}
		for _, s := range reporterStates {
			got[s] = testutil.ToFloat64(reporterState.WithLabelValues("one-hot", s))
		}
		want := map[string]float64{stateStandby: 0, stateConnecting: 0, stateReporting: 0}
		want[state] = 1
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("after %s, imperator_spoke_reporter_state (-want +got):\n%s", state, diff)
		}
	}
}

// A hosted agent runs a reporter per member in one process: one member's
// state, report time and certificate must not overwrite another's.
func TestMembersOfAHostedAgentKeepTheirOwnSeries(t *testing.T) {
	alpha, beta := metricsFor("alpha"), metricsFor("beta")
	t.Cleanup(alpha.forget)
	t.Cleanup(beta.forget)
	alpha.setState(stateReporting)
	beta.setState(stateConnecting)
	notAfter := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	alpha.usingCertificate(&credential{cert: &tls.Certificate{Leaf: &x509.Certificate{NotAfter: notAfter}}})
	alpha.reported()

	got := map[string]float64{}
	for _, cluster := range []string{"alpha", "beta"} {
		for _, s := range reporterStates {
			got[cluster+"/"+s] = testutil.ToFloat64(reporterState.WithLabelValues(cluster, s))
		}
		got[cluster+"/certificate"] = testutil.ToFloat64(certificateExpiry.WithLabelValues(cluster))
		got[cluster+"/reported"] = min(testutil.ToFloat64(lastReport.WithLabelValues(cluster)), 1)
	}
	want := map[string]float64{
		"alpha/standby": 0, "alpha/connecting": 0, "alpha/reporting": 1, "alpha/certificate": float64(notAfter.Unix()), "alpha/reported": 1,
		"beta/standby": 0, "beta/connecting": 1, "beta/reporting": 0, "beta/certificate": 0, "beta/reported": 0,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("series per member (-want +got):\n%s", diff)
	}

	beta.forget()
	if n := seriesOf(t, reporterState, "beta"); n != 0 {
		t.Errorf("after beta's reporter stopped, imperator_spoke_reporter_state still has %d series of beta", n)
	}
	if n := seriesOf(t, reporterState, "alpha"); n != len(reporterStates) {
		t.Errorf("after beta's reporter stopped, imperator_spoke_reporter_state has %d series of alpha, want %d", n, len(reporterStates))
	}
	if got := testutil.ToFloat64(reporterState.WithLabelValues("alpha", stateReporting)); got != 1 {
		t.Errorf("alpha's reporting series = %v after beta was forgotten, want 1", got)
	}
}

func TestCertificateExpiryIsTheCertificateInUse(t *testing.T) {
	m := metricsFor("expiry")
	t.Cleanup(m.forget)
	notAfter := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	m.usingCertificate(&credential{cert: &tls.Certificate{Leaf: &x509.Certificate{NotAfter: notAfter}}})
	if got := testutil.ToFloat64(certificateExpiry.WithLabelValues("expiry")); got != float64(notAfter.Unix()) {
		t.Errorf("imperator_spoke_certificate_expiry_timestamp_seconds = %v, want %v", got, notAfter.Unix())
	}
}

func TestLastReportMovesOnlyOnAStreamTheHubAnswered(t *testing.T) {
	m := metricsFor("answered")
	t.Cleanup(m.forget)
	answered := make(chan struct{})
	m.reportedIfAnswered(answered)
	if got := testutil.ToFloat64(lastReport.WithLabelValues("answered")); got != 0 {
		t.Fatalf("a heartbeat on a stream the hub never answered counted as a report (%v)", got)
	}
	close(answered)
	m.reportedIfAnswered(answered)
	if got := testutil.ToFloat64(lastReport.WithLabelValues("answered")); time.Since(time.Unix(int64(got), 0)) > time.Minute {
		t.Errorf("imperator_spoke_last_report_timestamp_seconds = %v after a report now", got)
	}
}

// seriesOf counts the series of gauges labelled with cluster.
func seriesOf(t *testing.T, gauges *prometheus.GaugeVec, cluster string) int {
	t.Helper()
	ch := make(chan prometheus.Metric)
	go func() {
		gauges.Collect(ch)
		close(ch)
	}()
	n := 0
	for metric := range ch {
		var out dto.Metric
		if err := metric.Write(&out); err != nil {
			t.Fatal(err)
		}
		for _, label := range out.GetLabel() {
			if label.GetName() == clusterLabel && label.GetValue() == cluster {
				n++
			}
		}
	}
	return n
}
