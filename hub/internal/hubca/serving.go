package hubca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/imperator-federation/imperator/internal/pki"
)

// DefaultServingValidity is the lifetime of the hub's serving certificate:
// 90 days, so that the rotation (at 2/3, every 60 days) runs several times a
// year in every installation instead of being a once-a-year surprise, while a
// hub whose CA Secret cannot be read still has weeks before a spoke notices.
const DefaultServingValidity = 90 * 24 * time.Hour

// MinServingValidity is the shortest serving certificate lifetime accepted
// (the fault suite uses 3 minutes).
const MinServingValidity = time.Minute

// ServingBackdate is how far before its issue a serving certificate is
// valid from. One hour (the client certificates' pki backdating is 5
// minutes) so that a spoke whose clock runs up to an hour behind the hub's
// still accepts a certificate issued a moment ago, after a hub restart or a
// rotation. The backdating does not count in the renewal time: a
// certificate is re-issued 2/3 of its validity after it was issued. Only the
// serving certificate is backdated this far; the CA's own NotBefore is pki's
// (5 minutes), which matters only in the CA's first hour.
const ServingBackdate = time.Hour

// ServingRotator hands out the hub's serving certificate through
// tls.Config.GetCertificate and re-issues it from the CA, without a restart,
// once 2/3 of its validity since issue have passed. Renewal happens in the
// handshake that finds it due (a P-256 key and one signature, well under a
// millisecond); when it fails, the current certificate is served while it is
// still valid, and renewal is tried again at the next handshake.
type ServingRotator struct {
	ca *pki.CA
	// intermediates follow the leaf in the chain presented (SetCA).
	intermediates [][]byte
	commonName    string
	hosts         []string
	validity      time.Duration
	clock         clock.PassiveClock

	mu      sync.Mutex
	current *tls.Certificate
	renewAt time.Time
	// onError, when set, hears of a failed renewal.
	onError func(error)
}

// NewServingRotator issues the first serving certificate for hosts (DNS
// names or IPs) from ca, valid for validity, and returns the rotator. clk is
// the clock (the real one when nil); onError, when set, hears of failed
// renewals while the current certificate is still served.
func NewServingRotator(ca *pki.CA, commonName string, hosts []string, validity time.Duration, clk clock.PassiveClock, onError func(error)) (*ServingRotator, error) {
	if ca == nil || ca.Cert == nil || ca.Key == nil {
		return nil, errors.New("creating serving certificate rotator: no CA")
	}
	if validity < MinServingValidity {
		return nil, fmt.Errorf("creating serving certificate rotator: validity %s is shorter than %s", validity, MinServingValidity)
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	r := &ServingRotator{ca: ca, commonName: commonName, hosts: hosts, validity: validity, clock: clk, onError: onError}
	if err := r.renew(clk.Now()); err != nil {
		return nil, err
	}
	return r, nil
}

// GetCertificate is a tls.Config.GetCertificate: the current serving
// certificate, renewed first when it is due.
func (r *ServingRotator) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !now.Before(r.renewAt) {
		if err := r.renew(now); err != nil {
			if r.onError != nil {
				r.onError(err)
			}
			if !now.Before(r.current.Leaf.NotAfter) {
				return nil, fmt.Errorf("serving certificate expired at %s and could not be renewed: %w", r.current.Leaf.NotAfter.UTC().Format(time.RFC3339), err)
			}
		}
	}
	return r.current, nil
}

// SetCA makes ca the CA serving certificates are issued from; when it is
// another CA than the one in use (a rotation was promoted), the next
// handshake re-issues the certificate from it.
//
// intermediates (DER) are presented after the leaf: during a promoted
// rotation, the current CA signed by the previous one.
func (r *ServingRotator) SetCA(ca *pki.CA, intermediates [][]byte) {
	if ca == nil || ca.Cert == nil || ca.Key == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ca.Cert.Equal(ca.Cert) && slices.EqualFunc(r.intermediates, intermediates, bytes.Equal) {
		return
	}
	r.ca, r.intermediates = ca, intermediates
	r.renewAt = time.Time{}
}

// renew issues a new certificate; r.mu is held (or r is not shared yet).
func (r *ServingRotator) renew(now time.Time) error {
	cert, err := r.issue(now)
	if err != nil {
		return fmt.Errorf("issuing serving certificate: %w", err)
	}
	r.current = cert
	// 2/3 of the life it really got (shorter than validity near the CA's end).
	r.renewAt = now.Add(cert.Leaf.NotAfter.Sub(now) * 2 / 3)
	return nil
}

func (r *ServingRotator) issue(now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating serial number: %w", err)
	}
	notAfter := now.Add(r.validity)
	if notAfter.After(r.ca.Cert.NotAfter) {
		// A leaf outliving its CA would be refused anyway once the CA expires.
		notAfter = r.ca.Cert.NotAfter
	}
	if !notAfter.After(now) {
		return nil, fmt.Errorf("the hub CA expired at %s", r.ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: r.commonName},
		NotBefore:    now.Add(-ServingBackdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range r.hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, r.ca.Cert, key.Public(), r.ca.Key)
	if err != nil {
		return nil, fmt.Errorf("signing certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the certificate just signed: %w", err)
	}
	chain := append([][]byte{der}, r.intermediates...)
	return &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}, nil
}
