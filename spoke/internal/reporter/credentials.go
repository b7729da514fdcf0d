package reporter

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/internal/pki"
)

// hubCredentials is the agent's hub client certificate: the one in use, the
// credentials Secret that stores it, joining with the bootstrap token,
// renewing before expiry, and storing again a certificate whose first write
// failed. The Reporter's sessions take their certificate from it and dial
// the hub through it.
type hubCredentials struct {
	opts    *Options
	log     logr.Logger
	metrics *clusterMetrics
	// caPEM is the hub CA bundle and serverName the name the hub's serving
	// certificate must have.
	caPEM      []byte
	serverName string
	// refused is the stored certificate the hub refused for a reason that
	// calls for joining again (joinAgainAfter); certificate joins instead of
	// using it. Only the Reporter's Start goroutine uses it.
	refused *refusedCertificate

	// writeMu serializes what reads a certificate and writes the
	// credentials Secret: a join (Start goroutine), a renewal (renewer) and
	// the saver; it guards unsaved and inMemoryPending.
	writeMu sync.Mutex
	// unsaved is the certificate the hub last issued, in use, while writing
	// it to the credentials Secret fails; unsavedChanged wakes the saver,
	// which retries the write.
	unsaved        *credential
	unsavedChanged chan struct{}
	// inMemoryPending is the key and CSR of a renewal whose key could not be
	// stored, sent again on every retry until the hub answers.
	inMemoryPending *pendingKey
	// current is the certificate in use, guarded by mu; certChanged wakes
	// the renewer when a join or the Secret replaced it, rotated tells the
	// stream that the renewer replaced it.
	mu          sync.Mutex
	current     *credential
	certChanged chan struct{}
	rotated     chan struct{}
	// servingIssuer is the CA that signed the serving certificate the hub
	// presented last (observeServing), guarded by servingMu;
	// servingChanged wakes the renewer when it changed.
	servingMu      sync.Mutex
	servingIssuer  *x509.Certificate
	servingChanged chan struct{}
}

// newCredentials returns the credentials of the Reporter with opts.
func newCredentials(opts *Options, caPEM []byte, serverName string, metrics *clusterMetrics) *hubCredentials {
	return &hubCredentials{
		opts:           opts,
		log:            opts.Log,
		metrics:        metrics,
		caPEM:          caPEM,
		serverName:     serverName,
		unsavedChanged: make(chan struct{}, 1),
		certChanged:    make(chan struct{}, 1),
		rotated:        make(chan struct{}, 1),
		servingChanged: make(chan struct{}, 1),
	}
}

// credential is a client certificate (its Leaf parsed), the PEMs it was
// loaded from (to store it later when the first write fails) and when the
// agent obtained it.
type credential struct {
	cert                   *tls.Certificate
	certPEM, keyPEM, caPEM []byte
	obtained               time.Time
}

// newCredential loads the certificate the hub issued for keyPEM, obtained
// at obtained.
func newCredential(certPEM, keyPEM, caPEM []byte, obtained time.Time) (*credential, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("loading the certificate the hub issued: %w", err)
	}
	if pair.Leaf, err = pki.ParseCertificate(certPEM); err != nil {
		return nil, fmt.Errorf("loading the certificate the hub issued: %w", err)
	}
	return &credential{cert: &pair, certPEM: certPEM, keyPEM: keyPEM, caPEM: caPEM, obtained: obtained}, nil
}

// renewalTime is when two thirds of c's life have passed. Its life starts
// when the agent obtained it, not at NotBefore, which the hub backdates to
// tolerate clock skew: counted from NotBefore, a short-lived certificate
// would be due for renewal as soon as it is issued.
func (c *credential) renewalTime() time.Time {
	leaf := c.cert.Leaf
	start := leaf.NotBefore
	if c.obtained.After(start) && c.obtained.Before(leaf.NotAfter) {
		start = c.obtained
	}
	return start.Add(leaf.NotAfter.Sub(start) * 2 / 3)
}

// inMemoryRenewalTime is when a renewal whose key cannot be stored in the
// credentials Secret goes ahead with a key kept in memory: halfway between
// renewalTime and expiry. Until then the agent keeps retrying to store the
// key first, because an agent restarted while the renewed certificate lives
// only in its memory can recover only within the hub's renewal overlap
// (see hubCredentials.keep); past it, the certificate would expire, which is
// worse.
func (c *credential) inMemoryRenewalTime() time.Time {
	renewal := c.renewalTime()
	return renewal.Add(c.cert.Leaf.NotAfter.Sub(renewal) / 2)
}

// currentCredential is the credential in use, nil before the first.
func (cr *hubCredentials) currentCredential() *credential {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	return cr.current
}

// currentCertificate is the certificate in use, nil before the first.
func (cr *hubCredentials) currentCertificate() *tls.Certificate {
	if c := cr.currentCredential(); c != nil {
		return c.cert
	}
	return nil
}

// use makes c the credential in use, unless it holds the certificate in use
// already, and returns the certificate in use. A renewal tells the stream to
// move to it; any other change tells the renewer to time its next renewal.
func (cr *hubCredentials) use(c *credential, renewed bool) *tls.Certificate {
	cr.mu.Lock()
	if cr.current != nil && bytes.Equal(cr.current.cert.Certificate[0], c.cert.Certificate[0]) {
		cert := cr.current.cert
		cr.mu.Unlock()
		return cert
	}
	cr.current = c
	cr.mu.Unlock()
	cr.metrics.usingCertificate(c)
	if renewed {
		notify(cr.rotated)
	} else {
		notify(cr.certChanged)
	}
	return c.cert
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// certificate returns the client certificate from the credentials Secret,
// joining the hub first when the Secret holds none (or one for another
// cluster, or an expired one, or one the hub refused for good). A refused
// certificate stays in the Secret until a join replaces it. When the Secret
// cannot be read (the cluster's API server is down, the hub may well be up)
// the certificate in use serves on while it is valid. A certificate the hub
// issued that is not stored yet (unsaved) comes first: the hub made it the
// cluster's current one, and the one still in the Secret is replaced.
func (cr *hubCredentials) certificate(ctx context.Context) (*tls.Certificate, error) {
	cr.writeMu.Lock()
	defer cr.writeMu.Unlock()
	if u := cr.unsaved; u != nil {
		if time.Now().Before(u.cert.Leaf.NotAfter) && !cr.refused.is(u.cert) {
			return cr.use(u, false), nil
		}
		// Expired or refused for good: storing it is pointless, and the
		// join below stores what replaces it.
		cr.log.Info("Dropping the unstored hub client certificate; it is expired or refused", "notAfter", u.cert.Leaf.NotAfter)
		cr.unsaved = nil
	}
	key := client.ObjectKey{Namespace: cr.opts.Namespace, Name: cr.opts.Hub.CredentialsSecret}
	var secret corev1.Secret
	getCtx, cancel := context.WithTimeout(ctx, secretTimeout)
	err := cr.opts.Client.Get(getCtx, key, &secret)
	cancel()
	if err != nil && !apierrors.IsNotFound(err) {
		if cur := cr.currentCredential(); cur != nil && time.Now().Before(cur.cert.Leaf.NotAfter) && !cr.refused.is(cur.cert) {
			cr.log.V(1).Info("Cannot read the hub credentials secret; using the certificate in use", "err", err.Error())
			return cur.cert, nil
		}
		return nil, fmt.Errorf("reading hub credentials secret %s: %w", key, err)
	}
	if err == nil {
		cred, reason := cr.usableCertificate(&secret)
		switch {
		case cred != nil && cr.refused.is(cred.cert):
			// session logged the refusal once; joining again is retried
			// until an operator gives a new token.
			cr.log.V(2).Info("Stored hub certificate refused by the hub; joining", "reason", cr.refused.reason)
		case cred != nil:
			cr.refused = nil // someone stored another certificate
			return cr.use(cred, false), nil
		default:
			cr.log.Info("Stored hub certificate not usable; joining", "reason", reason)
		}
	}
	cred, err := cr.join(ctx, key)
	if err != nil {
		if cr.refused != nil {
			return nil, &joinAgainError{reason: cr.refused.reason, err: err}
		}
		return nil, err
	}
	cr.refused = nil
	return cr.use(cred, false), nil
}

// notAfter is the expiry of cert, zero when unknown.
func notAfter(cert *tls.Certificate) time.Time {
	if cert == nil || cert.Leaf == nil {
		return time.Time{}
	}
	return cert.Leaf.NotAfter
}
