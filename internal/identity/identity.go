// Package identity holds the TLS settings and the identity rules that the hub
// and the spoke agents share: TLS 1.3 only, client certificates signed by the
// hub CA, and a spoke cluster's name read from its verified client
// certificate (common name) — never from a message.
package identity

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// SpokeOrganization is the organization (O) of every spoke client
// certificate the hub issues. Certificates of the same CA without it (e.g.
// for people or automation) do not identify a cluster.
const SpokeOrganization = "imperator.tenzen-y.io:spokes"

// ErrNoClientCertificate is returned when a connection carries no verified
// client certificate.
var ErrNoClientCertificate = errors.New("no verified client certificate")

// ServerTLS returns the hub's TLS configuration: TLS 1.3, the serving
// certificate from getCertificate, and client certificates verified against
// clientCAs when given. A client certificate is optional at the TLS layer
// because Join is called without one; every other call requires it.
func ServerTLS(getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error), clientCAs *x509.CertPool) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: getCertificate,
		ClientAuth:     tls.VerifyClientCertIfGiven,
		ClientCAs:      clientCAs,
		NextProtos:     []string{"h2"},
	}
}

// ClientTLS returns a spoke's TLS configuration: TLS 1.3, the hub verified
// against caPEM, and the client certificate when cert is not nil (Join is
// made without one).
func ClientTLS(caPEM []byte, cert *tls.Certificate, serverName string) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("reading hub CA bundle: no PEM certificate found")
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		RootCAs:    pool,
		ServerName: serverName,
	}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return cfg, nil
}

// ClusterFromCertificate returns the cluster a verified client certificate
// identifies: its common name, when it carries SpokeOrganization.
func ClusterFromCertificate(cert *x509.Certificate) (string, error) {
	if !slices.Contains(cert.Subject.Organization, SpokeOrganization) {
		return "", fmt.Errorf("client certificate %q is not a spoke certificate (organization %q missing)", cert.Subject.CommonName, SpokeOrganization)
	}
	if cert.Subject.CommonName == "" {
		return "", errors.New("client certificate has an empty common name")
	}
	return cert.Subject.CommonName, nil
}

// ClusterFromPeer returns the cluster identified by the verified client
// certificate of the gRPC call in ctx.
func ClusterFromPeer(ctx context.Context) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", ErrNoClientCertificate
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return "", ErrNoClientCertificate
	}
	return ClusterFromCertificate(info.State.VerifiedChains[0][0])
}

type clusterKey struct{}

// WithCluster returns ctx carrying the authenticated cluster name.
func WithCluster(ctx context.Context, cluster string) context.Context {
	return context.WithValue(ctx, clusterKey{}, cluster)
}

// ClusterFrom returns the authenticated cluster name stored by WithCluster.
func ClusterFrom(ctx context.Context) (string, bool) {
	c, ok := ctx.Value(clusterKey{}).(string)
	return c, ok && c != ""
}
