package hubca

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/imperator-federation/imperator/hub/internal/hubca/hubcatest"
)

// TestDualTrustAcrossARotation: mid-rotation the hub accepts spokes'
// certificates of the old and of the new CA, and clients that trust only
// the old CA (not renewed yet) still verify the hub after the promotion;
// after the finish the old CA's certificates are refused.
func TestDualTrustAcrossARotation(t *testing.T) {
	f := newRotationFixture(t)
	serving, err := NewServingRotator(f.old, "imperator-hub", []string{hubcatest.HubName}, time.Hour, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	stable, err := ParseTrust(f.stable)
	if err != nil {
		t.Fatal(err)
	}
	authority := NewAuthority(stable, AuthorityOptions{Serving: serving, Log: logr.Discard()})
	hub := authority.TLSConfig()
	oldSpoke, newSpoke := hubcatest.SpokeCertificate(t, f.old, "spoke-old"), hubcatest.SpokeCertificate(t, f.next, "spoke-new")

	type verdict struct{ HubAccepts, ClientAccepts bool }
	check := func(t *testing.T, trustPEM []byte, cert *tls.Certificate, want verdict) {
		t.Helper()
		hubErr, clientErr := hubcatest.Handshake(t, hub, trustPEM, cert)
		got := verdict{HubAccepts: hubErr == nil, ClientAccepts: clientErr == nil}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("handshake (-want +got):\n%s\nhub: %v\nclient: %v", diff, hubErr, clientErr)
		}
	}
	steps := []struct {
		name string
		data map[string][]byte
		run  func(t *testing.T)
	}{
		{name: "staged", data: f.staged, run: func(t *testing.T) {
			bundle := authority.TrustBundle()
			check(t, bundle, oldSpoke, verdict{true, true})
			check(t, bundle, newSpoke, verdict{true, true})
			check(t, f.old.CertPEM, oldSpoke, verdict{true, true})
		}},
		{name: "promoted", data: f.promoted, run: func(t *testing.T) {
			bundle := authority.TrustBundle()
			check(t, bundle, oldSpoke, verdict{true, true})
			check(t, bundle, newSpoke, verdict{true, true})
			// Not renewed since the stage: trusts only the old CA.
			check(t, f.old.CertPEM, oldSpoke, verdict{true, true})
			check(t, f.next.CertPEM, newSpoke, verdict{true, true})
			var previous []string
			for cluster, o := range authority.observed(Fingerprint(f.old.Cert)) {
				if o.PreviousCA {
					previous = append(previous, cluster)
				}
			}
			if diff := cmp.Diff([]string{"spoke-old"}, previous); diff != "" {
				t.Errorf("clusters presenting the previous CA (-want +got):\n%s", diff)
			}
		}},
		{name: "finished", data: f.finished, run: func(t *testing.T) {
			bundle := authority.TrustBundle()
			check(t, bundle, oldSpoke, verdict{false, true})
			check(t, bundle, newSpoke, verdict{true, true})
			if _, clientErr := hubcatest.Handshake(t, hub, f.old.CertPEM, newSpoke); clientErr == nil {
				t.Error("a client trusting only the dropped CA still verifies the hub")
			}
		}},
	}
	for _, step := range steps {
		trust, err := ParseTrust(step.data)
		if err != nil {
			t.Fatal(err)
		}
		authority.set(trust)
		t.Run(step.name, step.run)
	}
}
