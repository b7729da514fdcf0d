// Package hubcatest holds what the hub CA's unit and integration tests share:
// spoke client certificates signed by a given CA, and a TLS handshake on
// loopback between a hub's TLS configuration and a spoke.
package hubcatest

import (
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/pki"
)

// HubName is the name the hub's serving certificate is issued for and
// clients verify it with.
const HubName = "hub.imperator.test"

// handshakeTimeout bounds each side of Handshake.
const handshakeTimeout = 10 * time.Second

// SpokeCertificate is a spoke client certificate of cluster signed by ca,
// valid for an hour.
func SpokeCertificate(t testing.TB, ca *pki.CA, cluster string) *tls.Certificate {
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

// Handshake runs a TLS handshake, on loopback, between the hub's
// configuration and a spoke that verifies the hub (as HubName) with trustPEM
// and presents cert. hubErr says whether the hub took the spoke for the
// holder of a certificate of a trusted CA: a refused handshake, or one in
// which the spoke found no certificate of a CA the hub asked for (then the
// hub serves it as an anonymous caller: Join only). clientErr is the spoke's
// side.
func Handshake(t testing.TB, hub *tls.Config, trustPEM []byte, cert *tls.Certificate) (hubErr, clientErr error) {
	t.Helper()
	clientCfg, err := identity.ClientTLS(trustPEM, cert, HubName)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lis.Close() }()
	deadline := time.Now().Add(handshakeTimeout)
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
			done <- errors.New("the hub verified no client certificate")
			return
		}
		_, err = server.Write([]byte{1})
		done <- err
	}()
	conn, err := net.DialTimeout("tcp", lis.Addr().String(), handshakeTimeout)
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
