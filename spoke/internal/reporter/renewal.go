package reporter

import (
	"context"
	"crypto/x509"
	"fmt"
	"math/rand/v2"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/internal/pki"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// minRenewalSpacing is the least time between two renewals: a hub that
// issues certificates too short-lived to be used cannot make the agent spin.
const minRenewalSpacing = time.Second

// renewer renews the certificate in use once two thirds of its life have
// passed, or early once the hub serves with a newer CA than the one that
// signed it (carenewal.go), whether or not a Report stream is up, until ctx
// is done. A failed renewal is retried with capped exponential backoff while
// the certificate is valid; an expired one is left to the next session,
// which joins.
func (cr *hubCredentials) renewer(ctx context.Context) {
	failures := 0
	var lastRenewal time.Time
	// refused is set when the hub refused the certificate for good: only
	// joining again (the session's work) replaces it.
	refused := false
	var early caRenewal
	// gaveUpOn is the serving CA early renewals gave up on, logged once.
	var gaveUpOn string
	for {
		cur := cr.currentCredential()
		var leaf *x509.Certificate
		if cur != nil {
			leaf = cur.cert.Leaf
		}
		early = early.plan(leaf, cr.lastServingIssuer(), cr.trustedCAs(), time.Now(), caRenewalJitterDelay)
		if _, ok := early.due(); !ok && early.target != "" && early.target != gaveUpOn {
			gaveUpOn = early.target
			cr.log.Info("Early renewals did not move the hub client certificate to the CA the hub serves with; leaving it to the scheduled renewal", "attempts", early.attempts, "renewAt", cur.renewalTime())
		}
		var (
			due     <-chan time.Time
			timer   *time.Timer
			isEarly bool
		)
		if cur != nil && !refused && time.Now().Before(cur.cert.Leaf.NotAfter) {
			at := cur.renewalTime()
			if earlyAt, ok := early.due(); ok && earlyAt.Before(at) {
				at, isEarly = earlyAt, true
			}
			wait := time.Until(at)
			if failures > 0 {
				wait = cr.retryWait(failures)
			}
			wait = max(wait, time.Until(lastRenewal.Add(minRenewalSpacing)))
			timer = time.NewTimer(wait)
			due = timer.C
		}
		fired := false
		select {
		case <-ctx.Done():
		case <-cr.certChanged:
			failures, refused = 0, false
		case <-cr.servingChanged:
		case <-due:
			fired = true
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
		if !fired {
			continue
		}
		if isEarly {
			cr.log.Info("The hub serves with a newer CA than the one of the client certificate; renewing into it", "notAfter", notAfter(cur.cert), "attempt", early.attempts+1)
		}
		renewed, err := cr.renew(ctx, cur)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && refusedForGood(err):
			refused = true
			cr.log.Error(err, "The hub refused to renew the client certificate; waiting for the agent to join again", "notAfter", notAfter(cur.cert))
		case err != nil:
			failures++
			cr.log.Error(err, "Renewing the hub client certificate failed; retrying while it is valid", "notAfter", notAfter(cur.cert), "failures", failures)
		case renewed:
			failures = 0
			lastRenewal = time.Now()
			if isEarly {
				early = early.renewed(lastRenewal, caRenewalJitterDelay)
			}
		}
	}
}

// retryWait is the wait before the next attempt after failures failed
// ones: capped exponential backoff with jitter over [backoff/2, backoff].
func (cr *hubCredentials) retryWait(failures int) time.Duration {
	backoff := min(cr.opts.InitialBackoff<<min(max(failures, 1)-1, 20), cr.opts.MaxBackoff)
	return backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)+1))
}

// refusedForGood reports whether err is the hub's refusal of a certificate
// that belongs to no current registration (joinAgainAfter).
func refusedForGood(err error) bool {
	reason, ok := hubRefusal(err)
	return ok && joinAgainAfter(reason)
}

// renew exchanges cur and a CSR for a new certificate, makes it the
// certificate in use and stores both (or keeps them for the saver when the
// Secret cannot be written, see keep). It does nothing (false) when cur is no
// longer in use. The key is stored as the pending request before the call;
// when that write fails the renewal waits, retried, until
// cur.inMemoryRenewalTime and then goes ahead with a key kept in memory.
func (cr *hubCredentials) renew(ctx context.Context, cur *credential) (bool, error) {
	cr.writeMu.Lock()
	defer cr.writeMu.Unlock()
	if cr.currentCredential() != cur {
		return false, nil
	}
	key := client.ObjectKey{Namespace: cr.opts.Namespace, Name: cr.opts.Hub.CredentialsSecret}
	// A certificate still waiting to be stored goes first: storing the new
	// pending key would otherwise succeed while it stays unstored.
	if err := cr.saveUnsaved(ctx); err != nil {
		cr.log.V(1).Info("Still cannot store the hub client certificate in use", "err", err.Error())
	}
	csrPEM, keyPEM, err := cr.pendingRequest(ctx, key)
	if err != nil {
		if time.Now().Before(cur.inMemoryRenewalTime()) {
			return false, err
		}
		if csrPEM, keyPEM, err = cr.inMemoryRequest(); err != nil {
			return false, err
		}
		cr.log.Info("Cannot store the key of the next hub certificate; renewing with a key kept in memory", "notAfter", cur.cert.Leaf.NotAfter)
	}
	conn, err := cr.dial(cur.cert)
	if err != nil {
		return false, err
	}
	defer func() { _ = conn.Close() }()
	callCtx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	resp, err := federationv1.NewFederationClient(conn).Renew(callCtx, &federationv1.RenewRequest{Csr: csrPEM})
	if err != nil {
		return false, fmt.Errorf("renewing at the hub at %s: %w", cr.opts.Hub.Address, err)
	}
	cred, err := newCredential(resp.GetCertificate(), keyPEM, resp.GetCa(), time.Now())
	if err != nil {
		return false, err
	}
	cr.inMemoryPending = nil // answered
	// The hub has made cred the cluster's current certificate and keeps cur
	// good only for its renewal overlap: use cred at once, stored or not.
	cr.use(cred, true)
	cr.keep(ctx, key, cred)
	cr.log.Info("Renewed the hub client certificate", "notAfter", cred.cert.Leaf.NotAfter, "renewAt", cred.renewalTime())
	return true, nil
}

// inMemoryRequest is the key and CSR of a renewal whose key cannot be
// stored: the same on every retry, so that the certificate issued for it is
// of the key the agent holds.
func (cr *hubCredentials) inMemoryRequest() (csrPEM, keyPEM []byte, err error) {
	if p := cr.inMemoryPending; p != nil {
		return p.csrPEM, p.keyPEM, nil
	}
	if csrPEM, keyPEM, err = pki.NewCSR(cr.opts.Hub.ClusterName); err != nil {
		return nil, nil, fmt.Errorf("creating the key of the next hub certificate: %w", err)
	}
	cr.inMemoryPending = &pendingKey{csrPEM: csrPEM, keyPEM: keyPEM}
	return csrPEM, keyPEM, nil
}

// pendingKey is a key and CSR for the next certificate.
type pendingKey struct {
	csrPEM, keyPEM []byte
}
