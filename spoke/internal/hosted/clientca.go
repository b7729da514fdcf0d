package hosted

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/internal/pki"
)

// Keys of the client CA Secret.
const (
	// ClientCACertKey and ClientCAKeyKey hold the CA that signs the members'
	// client certificates.
	ClientCACertKey = "ca.crt"
	ClientCAKeyKey  = "ca.key"
	// ClientPreviousCACertKey holds the CA the last rollover replaced: still
	// trusted until it expires, so that a member's API server presenting a
	// certificate it signed keeps working until it picks up its new one.
	ClientPreviousCACertKey = "previous-ca.crt"
)

// ClientOrganization is the organization of every member's client
// certificate; its common name is the member's name.
const ClientOrganization = "imperator.tenzen-y.io:member-api-servers"

// Defaults of ClientCAOptions.
const (
	DefaultClientCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultClientCertValidity = 365 * 24 * time.Hour
	maxClientCACheckInterval  = 10 * time.Minute
)

// ClientCAOptions configure a ClientCA.
type ClientCAOptions struct {
	// Namespace and SecretName locate the CA's Secret in the management
	// cluster.
	Namespace  string
	SecretName string
	// CAValidity and CertValidity default to DefaultClientCAValidity and
	// DefaultClientCertValidity.
	CAValidity   time.Duration
	CertValidity time.Duration
	// CheckInterval is how often every replica reads the Secret again;
	// default a twentieth of the shorter validity, at most 10 minutes.
	CheckInterval time.Duration
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
}

// ClientCA is the CA of the client certificates with which the members' API
// servers call the agent's webhooks (their admission webhook client
// authentication, see docs/hosted.md). It lives in one Secret of the
// management cluster, shared by the replicas: the first to start creates it.
// Each member's certificate names the member (common name, organization
// ClientOrganization) and is written by the leader into the member's client
// Secret (ensureClientSecret); the webhook server asks callers for a
// certificate and verifies it against this CA (TLSOption), and every request
// to a member's path must carry that member's (authenticate).
//
// The CA rolls over with a third of its lifetime left: the new CA signs from
// then on, and the old one stays trusted until it expires, so that members'
// API servers have the old CA's remaining third of a lifetime to pick up
// their re-issued certificates.
type ClientCA struct {
	client client.Client
	opts   ClientCAOptions
	state  atomic.Pointer[clientCAState]
}

// clientCAState is what a replica read from the CA Secret last.
type clientCAState struct {
	// signer issues the members' certificates.
	signer *pki.CA
	// trusted are the CAs whose certificates are accepted: the signer and,
	// after a rollover, the previous CA.
	trusted []*x509.Certificate
	pool    *x509.CertPool
}

// NewClientCA returns a ClientCA working through c, a direct client of the
// management cluster (it reads one Secret by name).
func NewClientCA(c client.Client, opts ClientCAOptions) (*ClientCA, error) {
	if opts.Namespace == "" || opts.SecretName == "" {
		return nil, errors.New("member client CA: namespace and Secret name are required")
	}
	if opts.CAValidity < 0 || opts.CertValidity < 0 || opts.CheckInterval < 0 {
		return nil, errors.New("member client CA: validities and check interval must not be negative")
	}
	if opts.CAValidity == 0 {
		opts.CAValidity = DefaultClientCAValidity
	}
	if opts.CertValidity == 0 {
		opts.CertValidity = DefaultClientCertValidity
	}
	if opts.CheckInterval == 0 {
		opts.CheckInterval = min(maxClientCACheckInterval, max(time.Second, min(opts.CAValidity, opts.CertValidity)/20))
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &ClientCA{client: c, opts: opts}, nil
}

// Ensure makes sure the Secret holds a CA that is not due for a rollover,
// and loads it. Call it once before the webhook server starts.
func (ca *ClientCA) Ensure(ctx context.Context) error {
	key := types.NamespacedName{Namespace: ca.opts.Namespace, Name: ca.opts.SecretName}
	secret := &corev1.Secret{}
	err := ca.client.Get(ctx, key, secret)
	switch {
	case apierrors.IsNotFound(err):
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		if _, err := ca.step(secret); err != nil {
			return err
		}
		if err := ca.client.Create(ctx, secret); err != nil {
			if !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating the member client CA Secret %s: %w", key, err)
			}
			// Another replica was first: use its CA.
			if err := ca.client.Get(ctx, key, secret); err != nil {
				return fmt.Errorf("reading the member client CA Secret %s: %w", key, err)
			}
		}
	case err != nil:
		return fmt.Errorf("reading the member client CA Secret %s: %w", key, err)
	default:
		changed, err := ca.step(secret)
		if err != nil {
			return err
		}
		if changed {
			// The update carries the resourceVersion read: when another
			// replica rolled the CA over meanwhile, take its result.
			if err := ca.client.Update(ctx, secret); err != nil {
				if !apierrors.IsConflict(err) {
					return fmt.Errorf("rolling the member client CA over in Secret %s: %w", key, err)
				}
				if err := ca.client.Get(ctx, key, secret); err != nil {
					return fmt.Errorf("reading the member client CA Secret %s: %w", key, err)
				}
			}
		}
	}
	state, err := loadClientCA(secret.Data, ca.opts.Clock.Now())
	if err != nil {
		return fmt.Errorf("member client CA Secret %s: %w", key, err)
	}
	ca.state.Store(state)
	return nil
}

// Start re-runs Ensure every CheckInterval until ctx ends, on every replica.
func (ca *ClientCA) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("member-client-ca")
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := ca.Ensure(ctx); err != nil {
			log.Error(err, "Refreshing the member client CA")
		}
	}, ca.opts.CheckInterval)
	return nil
}

// NeedLeaderElection reports that every replica verifies callers.
func (ca *ClientCA) NeedLeaderElection() bool { return false }

// step creates the CA, rolls it over with a third of its lifetime left, and
// drops an expired previous CA; it reports whether it changed secret.
func (ca *ClientCA) step(secret *corev1.Secret) (bool, error) {
	now := ca.opts.Clock.Now()
	data := secret.Data
	if data == nil {
		data = map[string][]byte{}
	}
	changed := false
	active, err := pki.LoadCA(data[ClientCACertKey], data[ClientCAKeyKey])
	if err != nil || !now.Before(active.Cert.NotAfter) || renewalDue(active.Cert, now) {
		next, err := pki.NewCA("imperator-member-client-ca", ca.opts.CAValidity)
		if err != nil {
			return false, fmt.Errorf("creating the member client CA: %w", err)
		}
		key, err := next.KeyPEM()
		if err != nil {
			return false, fmt.Errorf("encoding the member client CA key: %w", err)
		}
		delete(data, ClientPreviousCACertKey)
		if active != nil && now.Before(active.Cert.NotAfter) {
			data[ClientPreviousCACertKey] = active.CertPEM
		}
		data[ClientCACertKey], data[ClientCAKeyKey] = next.CertPEM, key
		changed = true
	}
	if previous, ok := data[ClientPreviousCACertKey]; ok {
		cert, err := pki.ParseCertificate(previous)
		if err != nil || !now.Before(cert.NotAfter) {
			delete(data, ClientPreviousCACertKey)
			changed = true
		}
	}
	secret.Data = data
	return changed, nil
}

// loadClientCA reads the signer and the trusted CAs from the Secret's data.
func loadClientCA(data map[string][]byte, now time.Time) (*clientCAState, error) {
	signer, err := pki.LoadCA(data[ClientCACertKey], data[ClientCAKeyKey])
	if err != nil {
		return nil, err
	}
	state := &clientCAState{signer: signer, trusted: []*x509.Certificate{signer.Cert}, pool: x509.NewCertPool()}
	if previous, err := pki.ParseCertificate(data[ClientPreviousCACertKey]); err == nil && now.Before(previous.NotAfter) {
		state.trusted = append(state.trusted, previous)
	}
	for _, c := range state.trusted {
		state.pool.AddCert(c)
	}
	return state, nil
}

// TLSOption makes the webhook server ask every caller for a client
// certificate and verify one given against the current CAs. A caller without
// one completes the handshake (the health checks do), and its requests are
// refused by authenticate.
func (ca *ClientCA) TLSOption(cfg *tls.Config) {
	cfg.ClientAuth = tls.VerifyClientCertIfGiven
	// Never nil: a nil pool would verify against the system's roots.
	cfg.ClientCAs = x509.NewCertPool()
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		state := ca.state.Load()
		if state == nil {
			return nil, nil // nothing trusted yet: the empty pool refuses every certificate
		}
		// cfg as the server finished it (its certificate, protocols), with
		// the CAs trusted now.
		c := cfg.Clone()
		c.GetConfigForClient = nil
		c.ClientCAs = state.pool
		return c, nil
	}
}

// issue returns a new client certificate for member, signed by the current
// CA.
func (ca *ClientCA) issue(member string) (certPEM, keyPEM []byte, err error) {
	state := ca.state.Load()
	if state == nil {
		return nil, nil, errors.New("the member client CA is not loaded yet")
	}
	return state.signer.IssueClient(member, []string{ClientOrganization}, ca.opts.CertValidity)
}

// fresh reports whether cert is member's, signed by the current CA, with
// more than a third of its lifetime left: no need to issue another.
func (ca *ClientCA) fresh(cert *x509.Certificate, member string) bool {
	state := ca.state.Load()
	now := ca.opts.Clock.Now()
	return state != nil && cert.CheckSignatureFrom(state.signer.Cert) == nil &&
		memberOf(cert) == member && now.After(cert.NotBefore) && !renewalDue(cert, now)
}

// authenticate returns the member that the request's verified client
// certificate names, and an HTTP status (401 or 403) with its reason when
// the request must be refused. The status depends only on the certificate
// and member, never on whether member is served, so that a refusal tells
// nobody which members exist.
func (ca *ClientCA) authenticate(req *http.Request, member string) (status int, reason string) {
	if req.TLS == nil || len(req.TLS.VerifiedChains) == 0 || len(req.TLS.VerifiedChains[0]) == 0 {
		return http.StatusUnauthorized, "a client certificate of the member's API server is required (admission webhook client authentication; docs/hosted.md)"
	}
	chain := req.TLS.VerifiedChains[0]
	leaf, root := chain[0], chain[len(chain)-1]
	var state *clientCAState
	if ca != nil {
		state = ca.state.Load()
	}
	// The handshake verified the chain; the CA may have stopped being
	// trusted, or the certificate expired, since the connection opened.
	if state == nil || !slices.ContainsFunc(state.trusted, func(c *x509.Certificate) bool { return bytes.Equal(c.Raw, root.Raw) }) ||
		ca.opts.Clock.Now().After(leaf.NotAfter) {
		return http.StatusUnauthorized, "the client certificate is no longer trusted"
	}
	if caller := memberOf(leaf); caller == "" || caller != member {
		return http.StatusForbidden, "the client certificate is not this member's"
	}
	return 0, ""
}

// memberOf returns the member a client certificate names, "" when it names
// none.
func memberOf(cert *x509.Certificate) string {
	if !slices.Equal(cert.Subject.Organization, []string{ClientOrganization}) {
		return ""
	}
	return cert.Subject.CommonName
}

// renewalDue reports whether at most a third of cert's lifetime is left.
func renewalDue(cert *x509.Certificate, now time.Time) bool {
	lifetime := cert.NotAfter.Sub(cert.NotBefore)
	return cert.NotAfter.Sub(now) <= lifetime/3
}
