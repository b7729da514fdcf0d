package hubca

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A cluster's newest handshake across the replicas' reports decides: a
// spoke that connected to hub-1 with a certificate of the previous CA,
// renewed and now connects to hub-2 with one of the current CA does not
// hold up the finish; one whose newest handshake is with the previous CA
// does, whichever replica saw it; a handshake reported only by a stale
// report does not count.
func TestOldCAClustersNewestHandshakeWins(t *testing.T) {
	f := newRotationFixture(t)
	trust, err := ParseTrust(f.promoted)
	if err != nil {
		t.Fatal(err)
	}
	previous := Fingerprint(trust.Previous)
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	report := func(at time.Time, clusters map[string]clusterObservation) []byte {
		b, err := json.Marshal(observation{At: at, Previous: previous, Clusters: clusters})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	data := cloneData(f.promoted)
	data[observationKey("hub-1")] = report(now.Add(-5*time.Second), map[string]clusterObservation{
		"spoke-renewed":   {PreviousCA: true, At: now.Add(-10 * time.Minute)},
		"spoke-went-back": {PreviousCA: false, At: now.Add(-10 * time.Minute)},
	})
	data[observationKey("hub-2")] = report(now.Add(-8*time.Second), map[string]clusterObservation{
		"spoke-renewed":   {PreviousCA: false, At: now.Add(-2 * time.Minute)},
		"spoke-went-back": {PreviousCA: true, At: now.Add(-3 * time.Minute)},
	})
	data[observationKey("hub-gone")] = report(now.Add(-time.Hour), map[string]clusterObservation{
		"spoke-renewed": {PreviousCA: true, At: now.Add(-time.Hour)},
		"spoke-stale":   {PreviousCA: true, At: now.Add(-time.Hour)},
	})
	clusters, reporting, err := OldCAClusters(data, now, ObservationMaxAge)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"spoke-went-back"}, clusters); diff != "" {
		t.Errorf("clusters presenting the previous CA (-want +got):\n%s", diff)
	}
	if reporting != 2 {
		t.Errorf("%d replicas reporting, want 2", reporting)
	}
}

// A replica's report removes the reports of other replicas older than
// ObservationMaxAge (and unreadable ones), keeps the fresh ones and writes
// its own.
func TestReportRemovesStaleReports(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	at := func(t *testing.T, when time.Time) []byte {
		b, err := json.Marshal(observation{At: when, Previous: "p"})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	own := observationKey("hub-self")
	data := map[string][]byte{
		"tls.crt":                       []byte("x"),
		own:                             at(t, now.Add(-time.Hour)),
		observationKey("hub-fresh"):     at(t, now.Add(-ObservationMaxAge/2)),
		observationKey("hub-old"):       at(t, now.Add(-ObservationMaxAge-time.Second)),
		observationKey("hub-gibberish"): []byte("{"),
	}
	value := at(t, now)
	got := reportChanges(data, own, value, now)
	want := map[string]any{
		own:                             value,
		observationKey("hub-old"):       nil,
		observationKey("hub-gibberish"): nil,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("merge patch data (-want +got):\n%s", diff)
	}
	patch, err := json.Marshal(map[string]any{"data": got})
	if err != nil {
		t.Fatal(err)
	}
	var decoded struct {
		Data map[string]*string `json:"data"`
	}
	if err := json.Unmarshal(patch, &decoded); err != nil {
		t.Fatal(err)
	}
	if v, ok := decoded.Data[observationKey("hub-old")]; !ok || v != nil {
		t.Errorf("the merge patch does not remove the stale report: %s", patch)
	}
}

// A cross-signed certificate that changed, with the same CAs, is a changed
// trust (the hub presents the new one).
func TestSameTrustComparesCross(t *testing.T) {
	f := newRotationFixture(t)
	a, err := ParseTrust(f.promoted)
	if err != nil {
		t.Fatal(err)
	}
	cross, err := f.old.CrossSign(f.next.Cert)
	if err != nil {
		t.Fatal(err)
	}
	data := cloneData(f.promoted)
	data[CrossCertKey] = cross
	b, err := ParseTrust(data)
	if err != nil {
		t.Fatal(err)
	}
	if a.Cross.Equal(b.Cross) {
		t.Fatal("the fixture's second cross-signed certificate equals the first")
	}
	if sameTrust(a, b) {
		t.Error("a trust whose cross-signed certificate changed is taken for the same")
	}
	if !sameTrust(a, a) {
		t.Error("a trust differs from itself")
	}
	again, err := ParseTrust(f.promoted)
	if err != nil {
		t.Fatal(err)
	}
	if !sameTrust(a, again) {
		t.Error("the same Secret data parsed twice gives different trusts")
	}
}
