// Package identity holds the TLS settings and the identity rules that the hub
// and the spoke agents share: TLS 1.3 only, client certificates signed by the
// hub CA, and a spoke cluster's name read from its verified client
// certificate (common name) — never from a message — together with the
// registration (ManagedCluster UID) the certificate was issued for.
package identity

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

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

// ClientTLS returns a spoke's (and imperatorctl's) TLS configuration: TLS
// 1.3, the hub verified against every CA of the bundle caPEM, and the client
// certificate when cert is not nil (Join is made without one). During a hub
// CA rotation the bundle holds the current and the next (or previous) CA,
// so that the hub is trusted whichever of them signed its serving
// certificate.
func ClientTLS(caPEM []byte, cert *tls.Certificate, serverName string) (*tls.Config, error) {
	pool, err := TrustPool(caPEM)
	if err != nil {
		return nil, err
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

// TrustPool reads the CA certificates of one or more PEM bundles into a
// pool. Blocks of other types (a key pasted by mistake) are refused, as is
// a certificate that does not parse; at least one certificate is required.
func TrustPool(bundles ...[]byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for _, bundle := range bundles {
		rest := bundle
		for {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil {
				break
			}
			n++
			if block.Type != "CERTIFICATE" {
				return nil, fmt.Errorf("reading hub CA bundle: PEM block %d is a %s, want CERTIFICATE", n, block.Type)
			}
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("reading hub CA bundle: certificate %d: %w", n, err)
			}
			pool.AddCert(cert)
		}
	}
	if n == 0 {
		return nil, errors.New("reading hub CA bundle: no PEM certificate found")
	}
	return pool, nil
}

// Registration URIs: every spoke certificate the hub issues carries exactly
// one URI SAN imperator://cluster/<cluster>/<uid>, where uid is the UID of
// the ManagedCluster the certificate was issued for. A ManagedCluster that is
// deleted and created again has a new UID, so the certificates of the
// earlier registration stop identifying a registered cluster.
const (
	registrationScheme = "imperator"
	registrationHost   = "cluster"
)

// Spoke is the identity a verified spoke client certificate carries.
type Spoke struct {
	// Cluster is the cluster name, the certificate's common name.
	Cluster string
	// RegistrationUID is the UID of the ManagedCluster the certificate was
	// issued for; empty for a certificate without a registration URI
	// (issued before the hub recorded registrations).
	RegistrationUID string
	// Serial is the certificate's serial number (SerialOf): the hub records
	// which serials of a registration are current (registry.Admission).
	Serial string
	// NotBefore is the start of the certificate's validity.
	NotBefore time.Time
}

// SerialOf is the serial number of cert in lowercase hex, as the hub
// records and revokes it.
func SerialOf(cert *x509.Certificate) string {
	if cert == nil || cert.SerialNumber == nil {
		return ""
	}
	return cert.SerialNumber.Text(16)
}

// RegistrationURI is the URI SAN that binds a spoke certificate to the
// registration (ManagedCluster UID) uid of cluster.
func RegistrationURI(cluster, uid string) *url.URL {
	return &url.URL{Scheme: registrationScheme, Host: registrationHost, Path: "/" + cluster + "/" + uid}
}

// SpokeFromCertificate returns the spoke a verified client certificate
// identifies: its common name, when it carries SpokeOrganization, and the
// registration of its registration URI. A certificate with a malformed
// registration URI, one naming another cluster or more than one is refused.
func SpokeFromCertificate(cert *x509.Certificate) (Spoke, error) {
	if cert == nil {
		return Spoke{}, ErrNoClientCertificate
	}
	if !slices.Contains(cert.Subject.Organization, SpokeOrganization) {
		return Spoke{}, fmt.Errorf("client certificate %q is not a spoke certificate (organization %q missing)", cert.Subject.CommonName, SpokeOrganization)
	}
	spoke := Spoke{Cluster: cert.Subject.CommonName, Serial: SerialOf(cert), NotBefore: cert.NotBefore}
	if spoke.Cluster == "" {
		return Spoke{}, errors.New("client certificate has an empty common name")
	}
	for _, u := range cert.URIs {
		if u == nil || u.Scheme != registrationScheme {
			continue
		}
		if spoke.RegistrationUID != "" {
			return Spoke{}, fmt.Errorf("client certificate of cluster %q has more than one registration URI", spoke.Cluster)
		}
		uid, err := registrationUID(u, spoke.Cluster)
		if err != nil {
			return Spoke{}, fmt.Errorf("client certificate of cluster %q: %w", spoke.Cluster, err)
		}
		spoke.RegistrationUID = uid
	}
	return spoke, nil
}

// registrationUID reads the UID of a registration URI of cluster.
func registrationUID(u *url.URL, cluster string) (string, error) {
	name, uid, ok := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	if u.Host != registrationHost || u.Opaque != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" ||
		!strings.HasPrefix(u.Path, "/") || !ok || uid == "" || strings.Contains(uid, "/") {
		return "", fmt.Errorf("malformed registration URI %q: want %s://%s/<cluster>/<uid>", u.String(), registrationScheme, registrationHost)
	}
	if name != cluster {
		return "", fmt.Errorf("registration URI %q names cluster %q", u.String(), name)
	}
	return uid, nil
}

// VerifiedCertificate returns the verified client certificate of the gRPC
// call in ctx, or ErrNoClientCertificate.
func VerifiedCertificate(ctx context.Context) (*x509.Certificate, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, ErrNoClientCertificate
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil, ErrNoClientCertificate
	}
	return info.State.VerifiedChains[0][0], nil
}

// SpokeFromPeer returns the spoke identified by the verified client
// certificate of the gRPC call in ctx.
func SpokeFromPeer(ctx context.Context) (Spoke, error) {
	cert, err := VerifiedCertificate(ctx)
	if err != nil {
		return Spoke{}, err
	}
	return SpokeFromCertificate(cert)
}

type spokeKey struct{}

// WithSpoke returns ctx carrying the authenticated spoke.
func WithSpoke(ctx context.Context, spoke Spoke) context.Context {
	return context.WithValue(ctx, spokeKey{}, spoke)
}

// SpokeFrom returns the authenticated spoke stored by WithSpoke.
func SpokeFrom(ctx context.Context) (Spoke, bool) {
	s, ok := ctx.Value(spokeKey{}).(Spoke)
	return s, ok && s.Cluster != ""
}
