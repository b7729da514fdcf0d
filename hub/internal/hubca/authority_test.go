package hubca

import (
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/pki"
)

const testHubName = "hub.imperator.test"

// spokeCertificate is a spoke client certificate of cluster signed by ca.
func spokeCertificate(t *testing.T, ca *pki.CA, cluster string) *tls.Certificate {
	t.Helper()
	csrPEM, keyPEM, err := pki.NewCSR(cluster)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := ca.SignClientCSR(csrPEM, cluster, []string{identity.SpokeOrganization}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &pair
}

// handshake runs a TLS handshake, on loopback, between the hub's
// configuration and a client that verifies the hub with trustPEM and
// presents cert. hubErr says whether the hub took the client for the
// holder of a certificate of a trusted CA: a refused handshake, or one in
// which the client found no certificate of a CA the hub asked for (then the
// hub serves it as an anonymous caller: Join only).
func handshake(t *testing.T, hub *tls.Config, trustPEM []byte, cert *tls.Certificate) (hubErr, clientErr error) {
	t.Helper()
	clientCfg, err := identity.ClientTLS(trustPEM, cert, testHubName)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lis.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	done := make(chan error, 1)
	go func() {
		conn, err := lis.Accept()
		if err != nil {
			done <- err
			return
		}
		_ = conn.SetDeadline(deadline)
		server := tls.Server(conn, hub)
		defer func() { _ = server.Close() }()
		if err := server.Handshake(); err != nil {
			done <- err
			return
		}
		if len(server.ConnectionState().VerifiedChains) == 0 {
			done <- errors.New("no verified client certificate")
			return
		}
		_, err = server.Write([]byte{1})
		done <- err
	}()
	conn, err := net.DialTimeout("tcp", lis.Addr().String(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(deadline)
	client := tls.Client(conn, clientCfg)
	defer func() { _ = client.Close() }()
	clientErr = client.Handshake()
	hubErr = <-done
	return hubErr, clientErr
}

// TestDualTrustAcrossARotation: mid-rotation the hub accepts spokes'
// certificates of the old and of the new CA, and clients that trust only
// the old CA (not renewed yet) still verify the hub after the promotion;
// after the finish the old CA's certificates are refused.
func TestDualTrustAcrossARotation(t *testing.T) {
	f := newRotationFixture(t)
	serving, err := NewServingRotator(f.old, "imperator-hub", []string{testHubName}, time.Hour, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	stable, err := ParseTrust(f.stable)
	if err != nil {
		t.Fatal(err)
	}
	authority := NewAuthority(stable, AuthorityOptions{Serving: serving, Log: logr.Discard()})
	hub := authority.TLSConfig()
	oldSpoke, newSpoke := spokeCertificate(t, f.old, "spoke-old"), spokeCertificate(t, f.next, "spoke-new")

	type verdict struct{ HubAccepts, ClientAccepts bool }
	check := func(t *testing.T, trustPEM []byte, cert *tls.Certificate, want verdict) {
		t.Helper()
		hubErr, clientErr := handshake(t, hub, trustPEM, cert)
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
			if _, clientErr := handshake(t, hub, f.old.CertPEM, newSpoke); clientErr == nil {
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
