package reporter

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestReporterStateIsOneHot(t *testing.T) {
	for _, state := range reporterStates {
		setReporterState(state)
		got := map[string]float64{}
		for _, s := range reporterStates {
			got[s] = testutil.ToFloat64(reporterState.WithLabelValues(s))
		}
		want := map[string]float64{stateStandby: 0, stateConnecting: 0, stateReporting: 0}
		want[state] = 1
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("after %s, imperator_spoke_reporter_state (-want +got):\n%s", state, diff)
		}
	}
}

func TestCertificateExpiryIsTheCertificateInUse(t *testing.T) {
	notAfter := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	usingCertificate(&credential{cert: &tls.Certificate{Leaf: &x509.Certificate{NotAfter: notAfter}}})
	if got := testutil.ToFloat64(certificateExpiry); got != float64(notAfter.Unix()) {
		t.Errorf("imperator_spoke_certificate_expiry_timestamp_seconds = %v, want %v", got, notAfter.Unix())
	}
}

func TestLastReportMovesOnlyOnAStreamTheHubAnswered(t *testing.T) {
	lastReport.Set(0)
	answered := make(chan struct{})
	reportedIfAnswered(answered)
	if got := testutil.ToFloat64(lastReport); got != 0 {
		t.Fatalf("a heartbeat on a stream the hub never answered counted as a report (%v)", got)
	}
	close(answered)
	reportedIfAnswered(answered)
	if got := testutil.ToFloat64(lastReport); time.Since(time.Unix(int64(got), 0)) > time.Minute {
		t.Errorf("imperator_spoke_last_report_timestamp_seconds = %v after a report now", got)
	}
}
