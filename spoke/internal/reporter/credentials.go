package reporter

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/pki"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// joinTimeout bounds the Join and Renew calls.
const joinTimeout = 30 * time.Second

// Keys of the credentials Secret besides tls.crt, tls.key and ca.crt:
// the key and CSR of a Join or Renew under way, stored before the call and
// sent again on every retry until a certificate for them is stored, and the
// annotation saying when the agent obtained the stored certificate, as
// "<RFC 3339 time> for serial <hex serial>" so that it is not taken for the
// time of another certificate someone stored in its place.
const (
	pendingKeyKey        = "pending.key"
	pendingCSRKey        = "pending.csr"
	obtainedAtAnnotation = imperatorv1alpha1.Prefix + "certificate-obtained-at"
)

// minRenewalSpacing is the least time between two renewals: a hub that
// issues certificates too short-lived to be used cannot make the agent spin.
const minRenewalSpacing = time.Second

// errNoToken means the agent has no usable certificate and no token to join.
var errNoToken = errors.New("no usable hub client certificate in the credentials Secret and no bootstrap token (--join-token-file or $IMPERATOR_JOIN_TOKEN)")

// secretTimeout bounds every read and write of the credentials Secret, so
// that an API server that does not answer holds neither a renewal nor the
// stream's next session.
const secretTimeout = 15 * time.Second

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
// (see Reporter.keep); past it, the certificate would expire, which is
// worse.
func (c *credential) inMemoryRenewalTime() time.Time {
	renewal := c.renewalTime()
	return renewal.Add(c.cert.Leaf.NotAfter.Sub(renewal) / 2)
}

// currentCredential is the credential in use, nil before the first.
func (r *Reporter) currentCredential() *credential {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.current
}

// currentCertificate is the certificate in use, nil before the first.
func (r *Reporter) currentCertificate() *tls.Certificate {
	if c := r.currentCredential(); c != nil {
		return c.cert
	}
	return nil
}

// use makes c the credential in use, unless it holds the certificate in use
// already, and returns the certificate in use. A renewal tells the stream to
// move to it; any other change tells the renewer to time its next renewal.
func (r *Reporter) use(c *credential, renewed bool) *tls.Certificate {
	r.mu.Lock()
	if r.current != nil && bytes.Equal(r.current.cert.Certificate[0], c.cert.Certificate[0]) {
		cert := r.current.cert
		r.mu.Unlock()
		return cert
	}
	r.current = c
	r.mu.Unlock()
	r.metrics.usingCertificate(c)
	if renewed {
		notify(r.rotated)
	} else {
		notify(r.certChanged)
	}
	return c.cert
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// credentials returns the client certificate from the credentials Secret,
// joining the hub first when the Secret holds none (or one for another
// cluster, or an expired one, or one the hub refused for good). A refused
// certificate stays in the Secret until a join replaces it. When the Secret
// cannot be read (the cluster's API server is down, the hub may well be up)
// the certificate in use serves on while it is valid. A certificate the hub
// issued that is not stored yet (unsaved) comes first: the hub made it the
// cluster's current one, and the one still in the Secret is replaced.
func (r *Reporter) credentials(ctx context.Context) (*tls.Certificate, error) {
	r.credentialsMu.Lock()
	defer r.credentialsMu.Unlock()
	if u := r.unsaved; u != nil {
		if time.Now().Before(u.cert.Leaf.NotAfter) && !r.refused.is(u.cert) {
			return r.use(u, false), nil
		}
		// Expired or refused for good: storing it is pointless, and the
		// join below stores what replaces it.
		r.log.Info("Dropping the unstored hub client certificate; it is expired or refused", "notAfter", u.cert.Leaf.NotAfter)
		r.unsaved = nil
	}
	key := client.ObjectKey{Namespace: r.opts.Namespace, Name: r.opts.Hub.CredentialsSecret}
	var secret corev1.Secret
	getCtx, cancel := context.WithTimeout(ctx, secretTimeout)
	err := r.opts.Client.Get(getCtx, key, &secret)
	cancel()
	if err != nil && !apierrors.IsNotFound(err) {
		if cur := r.currentCredential(); cur != nil && time.Now().Before(cur.cert.Leaf.NotAfter) && !r.refused.is(cur.cert) {
			r.log.V(1).Info("Cannot read the hub credentials secret; using the certificate in use", "err", err.Error())
			return cur.cert, nil
		}
		return nil, fmt.Errorf("reading hub credentials secret %s: %w", key, err)
	}
	if err == nil {
		cred, reason := r.usableCertificate(&secret)
		switch {
		case cred != nil && r.refused.is(cred.cert):
			// session logged the refusal once; joining again is retried
			// until an operator gives a new token.
			r.log.V(2).Info("Stored hub certificate refused by the hub; joining", "reason", r.refused.reason)
		case cred != nil:
			r.refused = nil // someone stored another certificate
			return r.use(cred, false), nil
		default:
			r.log.Info("Stored hub certificate not usable; joining", "reason", reason)
		}
	}
	cred, err := r.join(ctx, key)
	if err != nil {
		if r.refused != nil {
			return nil, &joinAgainError{reason: r.refused.reason, err: err}
		}
		return nil, err
	}
	r.refused = nil
	return r.use(cred, false), nil
}

// notAfter is the expiry of cert, zero when unknown.
func notAfter(cert *tls.Certificate) time.Time {
	if cert == nil || cert.Leaf == nil {
		return time.Time{}
	}
	return cert.Leaf.NotAfter
}

// renewer renews the certificate in use once two thirds of its life have
// passed, whether or not a Report stream is up, until ctx is done. A failed
// renewal is retried with capped exponential backoff while the certificate
// is valid; an expired one is left to the next session, which joins.
func (r *Reporter) renewer(ctx context.Context) {
	failures := 0
	var lastRenewal time.Time
	// refused is set when the hub refused the certificate for good: only
	// joining again (the session's work) replaces it.
	refused := false
	for {
		cur := r.currentCredential()
		var (
			due   <-chan time.Time
			timer *time.Timer
		)
		if cur != nil && !refused && time.Now().Before(cur.cert.Leaf.NotAfter) {
			wait := time.Until(cur.renewalTime())
			if failures > 0 {
				wait = r.retryWait(failures)
			}
			wait = max(wait, time.Until(lastRenewal.Add(minRenewalSpacing)))
			timer = time.NewTimer(wait)
			due = timer.C
		}
		fired := false
		select {
		case <-ctx.Done():
		case <-r.certChanged:
			failures, refused = 0, false
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
		renewed, err := r.renew(ctx, cur)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && refusedForGood(err):
			refused = true
			r.log.Error(err, "The hub refused to renew the client certificate; waiting for the agent to join again", "notAfter", notAfter(cur.cert))
		case err != nil:
			failures++
			r.log.Error(err, "Renewing the hub client certificate failed; retrying while it is valid", "notAfter", notAfter(cur.cert), "failures", failures)
		case renewed:
			failures = 0
			lastRenewal = time.Now()
		}
	}
}

// retryWait is the wait before the next attempt after failures failed
// ones: capped exponential backoff with jitter over [backoff/2, backoff].
func (r *Reporter) retryWait(failures int) time.Duration {
	backoff := min(r.opts.InitialBackoff<<min(max(failures, 1)-1, 20), r.opts.MaxBackoff)
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
func (r *Reporter) renew(ctx context.Context, cur *credential) (bool, error) {
	r.credentialsMu.Lock()
	defer r.credentialsMu.Unlock()
	if r.currentCredential() != cur {
		return false, nil
	}
	key := client.ObjectKey{Namespace: r.opts.Namespace, Name: r.opts.Hub.CredentialsSecret}
	// A certificate still waiting to be stored goes first: storing the new
	// pending key would otherwise succeed while it stays unstored.
	if err := r.saveUnsaved(ctx); err != nil {
		r.log.V(1).Info("Still cannot store the hub client certificate in use", "err", err.Error())
	}
	csrPEM, keyPEM, err := r.pendingRequest(ctx, key)
	if err != nil {
		if time.Now().Before(cur.inMemoryRenewalTime()) {
			return false, err
		}
		if csrPEM, keyPEM, err = r.inMemoryRequest(); err != nil {
			return false, err
		}
		r.log.Info("Cannot store the key of the next hub certificate; renewing with a key kept in memory", "notAfter", cur.cert.Leaf.NotAfter)
	}
	conn, err := r.dial(cur.cert)
	if err != nil {
		return false, err
	}
	defer func() { _ = conn.Close() }()
	callCtx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	resp, err := federationv1.NewFederationClient(conn).Renew(callCtx, &federationv1.RenewRequest{Csr: csrPEM})
	if err != nil {
		return false, fmt.Errorf("renewing at the hub at %s: %w", r.opts.Hub.Address, err)
	}
	cred, err := newCredential(resp.GetCertificate(), keyPEM, resp.GetCa(), time.Now())
	if err != nil {
		return false, err
	}
	r.inMemoryPending = nil // answered
	// The hub has made cred the cluster's current certificate and keeps cur
	// good only for its renewal overlap: use cred at once, stored or not.
	r.use(cred, true)
	r.keep(ctx, key, cred)
	r.log.Info("Renewed the hub client certificate", "notAfter", cred.cert.Leaf.NotAfter, "renewAt", cred.renewalTime())
	return true, nil
}

// inMemoryRequest is the key and CSR of a renewal whose key cannot be
// stored: the same on every retry, so that the certificate issued for it is
// of the key the agent holds.
func (r *Reporter) inMemoryRequest() (csrPEM, keyPEM []byte, err error) {
	if p := r.inMemoryPending; p != nil {
		return p.csrPEM, p.keyPEM, nil
	}
	if csrPEM, keyPEM, err = pki.NewCSR(r.opts.Hub.ClusterName); err != nil {
		return nil, nil, fmt.Errorf("creating the key of the next hub certificate: %w", err)
	}
	r.inMemoryPending = &pendingKey{csrPEM: csrPEM, keyPEM: keyPEM}
	return csrPEM, keyPEM, nil
}

// pendingKey is a key and CSR for the next certificate.
type pendingKey struct {
	csrPEM, keyPEM []byte
}

// keep stores cred, the certificate in use that the hub just issued, in the
// credentials Secret; when the write fails it keeps cred in memory as
// unsaved, and the saver retries the write with backoff until it succeeds.
// credentialsMu must be held.
//
// An agent that restarts before the write succeeds finds in the Secret the
// certificate cred replaced and, as pending request, cred's key (when even
// that could not be stored, no pending key or an older one). Its renewal is
// long due, so it renews at once with the replaced certificate and the
// stored pending key. Within the hub's renewal overlap (10 minutes after the
// renewal that issued cred) the hub accepts the replaced certificate, both
// for the stream and for that Renew, and issues a new certificate, which the
// agent stores: it recovers by itself, and cred is retired unused. Past the
// overlap the hub refuses the replaced certificate for the stream but still
// answers its Renew for the pending key, which is cred's key: the CSR's
// signature proves the agent holds the current certificate's key. Only an
// agent that could not even store the pending key (its API server down at
// the renewal, then a restart) needs a new bootstrap token once the overlap
// has passed.
func (r *Reporter) keep(ctx context.Context, key client.ObjectKey, cred *credential) {
	r.unsaved = cred
	if err := r.saveUnsaved(ctx); err != nil {
		r.log.Error(err, "Cannot store the hub client certificate; using it from memory and retrying the write", "secret", key, "notAfter", cred.cert.Leaf.NotAfter)
		notify(r.unsavedChanged)
	}
}

// saveUnsaved stores the unsaved certificate, if any; nil when there is
// none (any more). credentialsMu must be held.
func (r *Reporter) saveUnsaved(ctx context.Context) error {
	cred := r.unsaved
	if cred == nil {
		return nil
	}
	key := client.ObjectKey{Namespace: r.opts.Namespace, Name: r.opts.Hub.CredentialsSecret}
	if err := r.storeCredentials(ctx, key, cred); err != nil {
		return err
	}
	r.unsaved = nil
	return nil
}

// saver retries storing the unsaved certificate, with capped exponential
// backoff, until it is stored (or replaced, or dropped), each time keep
// could not store one, until ctx is done.
func (r *Reporter) saver(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.unsavedChanged:
		}
		for failures := 1; ; failures++ {
			timer := time.NewTimer(r.retryWait(failures))
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
			r.credentialsMu.Lock()
			stored := r.unsaved
			err := r.saveUnsaved(ctx)
			r.credentialsMu.Unlock()
			if err == nil {
				if stored != nil {
					r.log.Info("Stored the hub client certificate in use", "notAfter", stored.cert.Leaf.NotAfter, "failures", failures)
				}
				break
			}
			if ctx.Err() != nil {
				return
			}
			r.log.V(1).Info("Storing the hub client certificate failed; retrying", "err", err.Error(), "failures", failures)
		}
	}
}

// usableCertificate returns the secret's certificate when the agent can use
// it: for this cluster, not expired, with its key. Otherwise it says why not.
func (r *Reporter) usableCertificate(secret *corev1.Secret) (*credential, string) {
	certPEM, keyPEM := secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey]
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return nil, "no certificate"
	}
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		return nil, "unreadable certificate: " + err.Error()
	}
	if cert.Subject.CommonName != r.opts.Hub.ClusterName {
		return nil, "certificate is for cluster " + cert.Subject.CommonName
	}
	if !time.Now().Before(cert.NotAfter) {
		return nil, "certificate expired at " + cert.NotAfter.String()
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, "unusable key pair: " + err.Error()
	}
	pair.Leaf = cert
	return &credential{cert: &pair, certPEM: certPEM, keyPEM: keyPEM, caPEM: secret.Data["ca.crt"],
		obtained: obtainedAt(secret.Annotations[obtainedAtAnnotation], cert)}, ""
}

// obtainedAtValue is the obtained-at annotation of cert obtained at t.
func obtainedAtValue(t time.Time, cert *x509.Certificate) string {
	return t.UTC().Format(time.RFC3339Nano) + " for serial " + cert.SerialNumber.Text(16)
}

// obtainedAt reads an obtained-at annotation: zero unless it is of cert.
func obtainedAt(value string, cert *x509.Certificate) time.Time {
	at, serial, ok := strings.Cut(value, " for serial ")
	if !ok || serial != cert.SerialNumber.Text(16) {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return time.Time{}
	}
	return t
}

// join exchanges the bootstrap token and the pending CSR for a certificate
// and stores both in the credentials Secret, or keeps them for the saver
// when the write fails (keep). Unlike a renewal, a join never goes ahead
// with a key it could not store: the token is spent on the key sent, and an
// agent restarted without it could not join again.
func (r *Reporter) join(ctx context.Context, key client.ObjectKey) (*credential, error) {
	token, err := r.opts.Token()
	if err != nil {
		return nil, err
	}
	if token == "" {
		return nil, errNoToken
	}
	csrPEM, keyPEM, err := r.pendingRequest(ctx, key)
	if err != nil {
		return nil, err
	}
	conn, err := r.dial(nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	callCtx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	resp, err := federationv1.NewFederationClient(conn).Join(callCtx, &federationv1.JoinRequest{
		ClusterName:  r.opts.Hub.ClusterName,
		Token:        token,
		Csr:          csrPEM,
		AgentVersion: r.opts.AgentVersion,
	})
	if err != nil {
		return nil, fmt.Errorf("joining the hub at %s: %w", r.opts.Hub.Address, err)
	}
	cred, err := newCredential(resp.GetCertificate(), keyPEM, resp.GetCa(), time.Now())
	if err != nil {
		return nil, err
	}
	r.keep(ctx, key, cred)
	r.log.Info("Joined the hub", "hub", r.opts.Hub.Address, "notAfter", cred.cert.Leaf.NotAfter)
	return cred, nil
}

// pendingRequest returns the key and CSR stored in the credentials Secret
// for the next Join or Renew, creating and storing them first when there
// are none for this cluster: a Join is made only with a key that is stored
// (a Renew too, unless it is late: see renew), and a retry sends the same
// CSR.
func (r *Reporter) pendingRequest(ctx context.Context, key client.ObjectKey) (csrPEM, keyPEM []byte, err error) {
	ctx, cancel := context.WithTimeout(ctx, secretTimeout)
	defer cancel()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.opts.Client, secret, func() error {
		if secret.CreationTimestamp.IsZero() {
			secret.Type = corev1.SecretTypeTLS // immutable once created
		}
		if secret.Data == nil {
			secret.Data = map[string][]byte{}
		}
		if secret.Type == corev1.SecretTypeTLS {
			// A kubernetes.io/tls Secret needs both keys, if empty.
			for _, k := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey} {
				if _, ok := secret.Data[k]; !ok {
					secret.Data[k] = []byte{}
				}
			}
		}
		if pendingRequestValid(secret.Data[pendingCSRKey], secret.Data[pendingKeyKey], r.opts.Hub.ClusterName) {
			csrPEM, keyPEM = secret.Data[pendingCSRKey], secret.Data[pendingKeyKey]
			return nil
		}
		var err error
		if csrPEM, keyPEM, err = pki.NewCSR(r.opts.Hub.ClusterName); err != nil {
			return err
		}
		secret.Data[pendingCSRKey], secret.Data[pendingKeyKey] = csrPEM, keyPEM
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("storing the key of the next hub certificate in secret %s: %w", key, err)
	}
	return csrPEM, keyPEM, nil
}

// pendingRequestValid reports whether csrPEM is a well-signed request for
// cluster whose public key is that of keyPEM.
func pendingRequestValid(csrPEM, keyPEM []byte, cluster string) bool {
	if len(csrPEM) == 0 || len(keyPEM) == 0 {
		return false
	}
	csr, err := pki.ParseCSR(csrPEM)
	if err != nil || csr.Subject.CommonName != cluster {
		return false
	}
	signer, err := pki.ParsePrivateKey(keyPEM)
	if err != nil {
		return false
	}
	pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(csr.PublicKey)
}

// storeCredentials writes cred's certificate, key and hub CA into the
// credentials Secret, with the time the agent obtained it, dropping the
// pending request they answer.
func (r *Reporter) storeCredentials(ctx context.Context, key client.ObjectKey, cred *credential) error {
	ctx, cancel := context.WithTimeout(ctx, secretTimeout)
	defer cancel()
	// Update, not patch: the whole Secret is ours, and the resourceVersion
	// CreateOrUpdate read guards against a concurrent writer.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.opts.Client, secret, func() error {
		if secret.CreationTimestamp.IsZero() {
			secret.Type = corev1.SecretTypeTLS // immutable once created
		}
		metav1.SetMetaDataAnnotation(&secret.ObjectMeta, obtainedAtAnnotation, obtainedAtValue(cred.obtained, cred.cert.Leaf))
		secret.Data = map[string][]byte{corev1.TLSCertKey: cred.certPEM, corev1.TLSPrivateKeyKey: cred.keyPEM, "ca.crt": cred.caPEM}
		return nil
	}); err != nil {
		return fmt.Errorf("storing hub credentials in secret %s: %w", key, err)
	}
	return nil
}

// dial returns a connection to the hub, with cert as client certificate
// (none for Join).
func (r *Reporter) dial(cert *tls.Certificate) (*grpc.ClientConn, error) {
	tlsConfig, err := identity.ClientTLS(r.caPEM, cert, r.serverName)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(r.opts.Hub.Address,
		grpc.WithTransportCredentials(credentials.NewTLS(tlsConfig)),
		grpc.WithKeepaliveParams(clientKeepalive),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(maxSendMsgBytes)),
	)
	if err != nil {
		return nil, fmt.Errorf("connecting to the hub at %s: %w", r.opts.Hub.Address, err)
	}
	return conn, nil
}
