package hubca

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/imperator-federation/imperator/internal/pki"
)

// rotationFixture is a CA Secret's data in each phase of one rotation from
// CA "old" to CA "new".
type rotationFixture struct {
	old, next *pki.CA
	stable    map[string][]byte
	staged    map[string][]byte
	promoted  map[string][]byte
	finished  map[string][]byte
}

func newRotationFixture(t *testing.T) rotationFixture {
	t.Helper()
	f := rotationFixture{old: newTestCA(t, "old"), next: newTestCA(t, "new")}
	f.stable = caData(t, f.old)
	out, err := Stage(f.stable, func() (*pki.CA, error) { return f.next, nil })
	if err != nil {
		t.Fatalf("Stage: %v", err)
	}
	f.staged = out.Data
	if out, err = Promote(f.staged); err != nil {
		t.Fatalf("Promote: %v", err)
	}
	f.promoted = out.Data
	if out, err = Finish(f.promoted, nil, false); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	f.finished = out.Data
	return f
}

func newTestCA(t *testing.T, name string) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func caData(t *testing.T, ca *pki.CA) map[string][]byte {
	t.Helper()
	key, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{corev1.TLSCertKey: ca.CertPEM, corev1.TLSPrivateKeyKey: key}
}

// commonNames names the CAs of a trust: signing CA, then every trusted one.
func commonNames(t *testing.T, data map[string][]byte) []string {
	t.Helper()
	trust, err := ParseTrust(data)
	if err != nil {
		t.Fatalf("ParseTrust: %v", err)
	}
	names := []string{string(trust.Phase), "signs:" + trust.Current.Cert.Subject.CommonName}
	for _, c := range trust.Trusted {
		names = append(names, c.Subject.CommonName)
	}
	return names
}

// TestRotationPhases: each step from each phase, as the runbook promises:
// what the Secret then says (phase, signing CA, trusted CAs), that a step run
// twice changes nothing, and that a step out of order is refused with the
// step to run first.
func TestRotationPhases(t *testing.T) {
	f := newRotationFixture(t)
	cases := map[string]struct {
		from        map[string][]byte
		step        func(map[string][]byte) (Outcome, error)
		wantErr     error
		wantErrText string
		// wantCAs is commonNames of the result; nil when nothing changes.
		wantCAs []string
	}{
		"stage from stable adds the next CA, the current one still signs": {
			from: f.stable, step: stage(f.next), wantCAs: []string{"Staged", "signs:old", "old", "new"},
		},
		"stage again changes nothing": {
			from: f.staged, step: stage(f.next),
		},
		"stage while promoted is refused": {
			from: f.promoted, step: stage(f.next), wantErr: ErrWrongOrder, wantErrText: "--finish",
		},
		"promote from stable is refused": {
			from: f.stable, step: Promote, wantErr: ErrWrongOrder, wantErrText: "run `hub ca rotate` first",
		},
		"promote makes the next CA sign, the previous stays trusted": {
			from: f.staged, step: Promote, wantCAs: []string{"Promoted", "signs:new", "new", "old"},
		},
		"promote again changes nothing": {
			from: f.promoted, step: Promote,
		},
		"finish while staged is refused": {
			from: f.staged, step: finish(nil, false), wantErr: ErrWrongOrder, wantErrText: "--promote",
		},
		"finish drops the previous CA": {
			from: f.promoted, step: finish(nil, false), wantCAs: []string{"Stable", "signs:new", "new"},
		},
		"finish refused while spokes present the previous CA, naming them": {
			from: f.promoted, step: finish([]string{"spoke-a", "spoke-b"}, false), wantErr: ErrOldCAInUse, wantErrText: "spoke-a, spoke-b",
		},
		"finish forced although spokes present the previous CA": {
			from: f.promoted, step: finish([]string{"spoke-a"}, true), wantCAs: []string{"Stable", "signs:new", "new"},
		},
		"finish again changes nothing": {
			from: f.finished, step: finish(nil, false),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			out, err := tc.step(tc.from)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantErrText) {
					t.Fatalf("error %v, want %v mentioning %q", err, tc.wantErr, tc.wantErrText)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if out.Message == "" {
				t.Error("no message for the operator")
			}
			if tc.wantCAs == nil {
				if out.Data != nil {
					t.Errorf("a repeated step changed the Secret: %v", commonNames(t, out.Data))
				}
				return
			}
			if diff := cmp.Diff(tc.wantCAs, commonNames(t, out.Data)); diff != "" {
				t.Errorf("CAs after the step (-want +got):\n%s", diff)
			}
		})
	}
}

func stage(next *pki.CA) func(map[string][]byte) (Outcome, error) {
	return func(data map[string][]byte) (Outcome, error) {
		return Stage(data, func() (*pki.CA, error) { return next, nil })
	}
}

func finish(clusters []string, force bool) func(map[string][]byte) (Outcome, error) {
	return func(data map[string][]byte) (Outcome, error) { return Finish(data, clusters, force) }
}

// A repeated stage makes no CA: no stray CA ever appears.
func TestStageTwiceMakesNoSecondCA(t *testing.T) {
	f := newRotationFixture(t)
	made := 0
	if _, err := Stage(f.staged, func() (*pki.CA, error) { made++; return nil, errors.New("must not be called") }); err != nil {
		t.Fatal(err)
	}
	if made != 0 {
		t.Errorf("a stage of a staged rotation made %d CAs", made)
	}
}

// Promotion drops the previous CA's key (nothing may sign with it), and the
// Secret reads back with the cross-signed current CA.
func TestPromotionDropsThePreviousKey(t *testing.T) {
	f := newRotationFixture(t)
	for _, key := range []string{NextCertKey, NextKeyKey} {
		if _, ok := f.promoted[key]; ok {
			t.Errorf("promoted Secret still holds %s", key)
		}
	}
	trust, err := ParseTrust(f.promoted)
	if err != nil {
		t.Fatal(err)
	}
	if err := trust.Cross.CheckSignatureFrom(f.old.Cert); err != nil {
		t.Errorf("cross.crt is not signed by the previous CA: %v", err)
	}
	for key := range f.finished {
		if key != corev1.TLSCertKey && key != corev1.TLSPrivateKeyKey {
			t.Errorf("finished Secret still holds %s", key)
		}
	}
}

// A damaged Secret is refused with the key at fault named.
func TestParseTrustNamesTheKeyAtFault(t *testing.T) {
	f := newRotationFixture(t)
	with := func(base map[string][]byte, key string, value []byte) map[string][]byte {
		out := cloneData(base)
		out[key] = value
		return out
	}
	cases := map[string]struct {
		data     map[string][]byte
		wantText string
	}{
		"no current CA":           {data: map[string][]byte{}, wantText: "tls.crt/tls.key"},
		"next certificate broken": {data: with(f.staged, NextCertKey, []byte("junk")), wantText: "next.crt/next.key"},
		"previous broken":         {data: with(f.promoted, PreviousCertKey, []byte("junk")), wantText: "previous.crt"},
		"cross of another CA":     {data: with(f.promoted, CrossCertKey, f.next.CertPEM), wantText: "cross.crt"},
		"staged and promoted":     {data: with(f.promoted, NextCertKey, f.next.CertPEM), wantText: "both"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseTrust(tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.wantText) {
				t.Fatalf("error %v, want one naming %q", err, tc.wantText)
			}
		})
	}
}

// OldCAClusters unites fresh reports about the previous CA in force and
// ignores stale ones and reports about another rotation.
func TestOldCAClusters(t *testing.T) {
	f := newRotationFixture(t)
	trust, err := ParseTrust(f.promoted)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	report := func(at time.Time, previous string, clusters ...string) []byte {
		seen := map[string]clusterObservation{}
		for _, c := range clusters {
			seen[c] = clusterObservation{PreviousCA: true, At: at}
		}
		b, err := json.Marshal(observation{At: at, Previous: previous, Clusters: seen})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	data := cloneData(f.promoted)
	data[observationKey("hub-1")] = report(now.Add(-5*time.Second), Fingerprint(trust.Previous), "spoke-b", "spoke-a")
	data[observationKey("hub-2")] = report(now.Add(-10*time.Second), Fingerprint(trust.Previous), "spoke-a")
	data[observationKey("hub-gone")] = report(now.Add(-time.Hour), Fingerprint(trust.Previous), "spoke-stale")
	data[observationKey("hub-other")] = report(now, Fingerprint(f.next.Cert), "spoke-other")
	clusters, reporting, err := OldCAClusters(data, now, ObservationMaxAge)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"spoke-a", "spoke-b"}, clusters); diff != "" {
		t.Errorf("clusters (-want +got):\n%s", diff)
	}
	if reporting != 2 {
		t.Errorf("%d replicas reporting, want 2", reporting)
	}
	out, err := Finish(data, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	for key := range out.Data {
		if strings.HasPrefix(key, observationPrefix) {
			t.Errorf("finish keeps the report %s", key)
		}
	}
}
