package reporter

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"math/rand/v2"
	"time"
)

// The hub signs its serving certificate and every client certificate with
// the same CA, the current one of its CA Secret. When a CA rotation is
// promoted, the hub re-issues its serving certificate from the new CA (and
// presents the new CA cross-signed by the old one after it): from then on,
// a hub whose serving certificate is not of the CA that signed the agent's
// client certificate tells the agent that a renewal would move it to the CA
// the hub now signs with. The agent then renews early, within
// caRenewalJitter, instead of at two thirds of its certificate's life, so
// that `hub ca rotate --finish` can go ahead. The signal is what every TLS
// handshake with the hub already shows (its Report stream, recycled at the
// hub's --max-connection-age, and every renewal): no new field, no new call.
//
// The agent never renews in a loop on it: once its certificate is of the
// serving CA the signal is gone; it renews only towards a CA newer than the
// one of its certificate (a hub replica that has not followed the promotion
// yet serves with the CA being retired); and at most caRenewalAttempts
// renewals per serving CA that did not move it there, further and further
// apart, before it leaves the move to the scheduled renewal.

// caRenewalJitter is the window over which the agent renews after it saw the
// hub serve with another CA than its certificate's: a fleet's agents, which
// see the promotion within the same --max-connection-age, do not renew at
// once.
const caRenewalJitter = time.Minute

// caRenewalAttempts bounds the early renewals towards one serving CA that
// did not give a certificate of it (a renewal answered by a replica that has
// not followed the promotion yet).
const caRenewalAttempts = 3

// caRenewal is the early renewal planned towards the CA the hub serves with.
type caRenewal struct {
	// target is the fingerprint of the public key of the CA that signed the
	// hub's serving certificate, empty when no early renewal is planned.
	target string
	// at is when to renew.
	at time.Time
	// attempts counts renewals towards target that gave a certificate of
	// another CA.
	attempts int
}

// due reports whether an early renewal is planned, and when.
func (p caRenewal) due() (time.Time, bool) {
	return p.at, p.target != "" && p.attempts < caRenewalAttempts
}

// plan is the early renewal to make for the client certificate client, now,
// given servingIssuer (the CA certificate, or the cross-signed copy, that
// signed the serving certificate the hub presented last; nil when none was
// seen) and trusted (the CA certificates the agent verifies the hub with,
// where the CA of client is looked up). jitter picks the delay in
// [0, caRenewalJitter) for a new target.
func (p caRenewal) plan(client, servingIssuer *x509.Certificate, trusted []*x509.Certificate, now time.Time, jitter func() time.Duration) caRenewal {
	if !renewsIntoServingCA(client, servingIssuer, trusted) {
		return caRenewal{}
	}
	target := keyFingerprint(servingIssuer)
	if target == p.target {
		return p
	}
	return caRenewal{target: target, at: now.Add(jitter())}
}

// renewed is p after an early renewal: should the new certificate still not
// be of the target CA (plan keeps p then), the next attempt waits longer,
// caRenewalJitter doubled at each attempt, plus jitter.
func (p caRenewal) renewed(now time.Time, jitter func() time.Duration) caRenewal {
	if p.target == "" {
		return p
	}
	p.attempts++
	p.at = now.Add(caRenewalJitter<<min(p.attempts, 10) + jitter())
	return p
}

// renewsIntoServingCA reports whether renewing client would move it to the
// CA the hub serves with: servingIssuer did not sign client and is newer
// (later NotBefore) than the trusted CA that did. When the CA of client is
// not among trusted (the agent no longer trusts it), the serving CA counts
// as newer.
func renewsIntoServingCA(client, servingIssuer *x509.Certificate, trusted []*x509.Certificate) bool {
	if client == nil || servingIssuer == nil {
		return false
	}
	if client.CheckSignatureFrom(servingIssuer) == nil {
		return false
	}
	for _, ca := range trusted {
		if client.CheckSignatureFrom(ca) == nil {
			return servingIssuer.NotBefore.After(ca.NotBefore)
		}
	}
	return true
}

// keyFingerprint names a CA by its public key, which its cross-signed copy
// shares.
func keyFingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return hex.EncodeToString(sum[:])
}

// caRenewalJitterDelay is a delay in [0, caRenewalJitter).
func caRenewalJitterDelay() time.Duration {
	return time.Duration(rand.Int64N(int64(caRenewalJitter)))
}

// observeServing is the client TLS configuration's VerifyConnection: it
// remembers the CA that signed the hub's serving certificate (the second
// certificate of the verified chain) and wakes the renewer when it changed.
// It never fails the handshake.
func (cr *hubCredentials) observeServing(cs tls.ConnectionState) error {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) < 2 {
		return nil
	}
	issuer := cs.VerifiedChains[0][1]
	cr.servingMu.Lock()
	changed := cr.servingIssuer == nil || keyFingerprint(cr.servingIssuer) != keyFingerprint(issuer)
	cr.servingIssuer = issuer
	cr.servingMu.Unlock()
	if changed {
		notify(cr.servingChanged)
	}
	return nil
}

// lastServingIssuer is the CA that signed the serving certificate the hub
// presented last, nil before the first handshake.
func (cr *hubCredentials) lastServingIssuer() *x509.Certificate {
	cr.servingMu.Lock()
	defer cr.servingMu.Unlock()
	return cr.servingIssuer
}

// trustedCAs is the CA certificates of trustBundle; those that do not parse
// are skipped (the bundle was checked when it was loaded).
func (cr *hubCredentials) trustedCAs() []*x509.Certificate {
	var cas []*x509.Certificate
	rest := cr.trustBundle()
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return cas
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if ca, err := x509.ParseCertificate(block.Bytes); err == nil {
			cas = append(cas, ca)
		}
	}
}
