package server

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/imperator-federation/imperator/internal/pki"
)

// A revoked client certificate is refused before the configuration's own
// VerifyConnection (the hub CA's record of which CA a spoke presents) sees
// it, so that a revoked certificate of the previous CA does not hold up
// `hub ca rotate --finish`; a certificate that is not revoked reaches it.
func TestRevokedCertificateRefusedBeforeVerifyConnection(t *testing.T) {
	metrics, err := NewMetrics(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	revokedCA, err := pki.NewCA("revoked", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	goodCA, err := pki.NewCA("good", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	r := &router{
		revoked: func(c *x509.Certificate) bool { return c.Equal(revokedCA.Cert) },
		metrics: metrics,
		log:     logr.Discard(),
	}
	var seen []string
	record := func(cs tls.ConnectionState) error {
		seen = append(seen, cs.VerifiedChains[0][0].Subject.CommonName)
		return nil
	}
	state := func(c *x509.Certificate) tls.ConnectionState {
		return tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{c}}}
	}
	direct := r.refusingRevoked(&tls.Config{VerifyConnection: record})
	perClient := r.refusingRevoked(&tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return &tls.Config{VerifyConnection: record}, nil
	}})
	perClientCfg, err := perClient.GetConfigForClient(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	for name, verify := range map[string]func(tls.ConnectionState) error{"VerifyConnection": direct.VerifyConnection, "GetConfigForClient": perClientCfg.VerifyConnection} {
		seen = nil
		if err := verify(state(revokedCA.Cert)); err == nil {
			t.Errorf("%s: a revoked certificate was accepted", name)
		}
		if err := verify(state(goodCA.Cert)); err != nil {
			t.Errorf("%s: a certificate not revoked was refused: %v", name, err)
		}
		if len(seen) != 1 || seen[0] != "good" {
			t.Errorf("%s: the configuration's VerifyConnection saw %q, want only the certificate not revoked", name, seen)
		}
	}
}
