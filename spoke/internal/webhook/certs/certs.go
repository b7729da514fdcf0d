package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
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
)

// Keys of the certificate Secret.
const (
	// CACertKey and CAKeyKey hold the CA that signs the served leaf.
	CACertKey = "ca.crt"
	CAKeyKey  = "ca.key"
	// NextCACertKey and NextCAKeyKey hold the CA being introduced: in the
	// bundle, not signing yet.
	NextCACertKey = "next-ca.crt"
	NextCAKeyKey  = "next-ca.key"
	// PreviousCACertKey holds the CA being retired: still in the bundle for
	// replicas that serve a leaf it signed.
	PreviousCACertKey = "previous-ca.crt"

	// NextCASinceAnnotation is when the next CA was introduced (RFC 3339).
	NextCASinceAnnotation = "imperator.tenzen-y.io/next-ca-since"
	// PreviousCAUntilAnnotation is when the previous CA leaves the bundle (RFC 3339).
	PreviousCAUntilAnnotation = "imperator.tenzen-y.io/previous-ca-until"
)

// Default lifetimes and the longest check interval.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultCertValidity = 365 * 24 * time.Hour
	maxCheckInterval    = 10 * time.Minute
	minCheckInterval    = time.Second
)

// The certificate Secret lives in the agent's namespace.
// +kubebuilder:rbac:groups="",namespace=imperator-system,resources=secrets,verbs=get;create;update

// Bundles are where the CA bundle goes: the webhook configurations, whose
// package (install.CABundles) reads and patches them.
type Bundles interface {
	// Inject sets caBundle on every webhook.
	Inject(ctx context.Context, caBundle []byte) error
	// Carry reports whether every webhook trusts caPEM.
	Carry(ctx context.Context, caPEM []byte) (bool, error)
}

// Options configure the certificate Rotator.
type Options struct {
	// Namespace and SecretName locate the certificate Secret.
	Namespace  string
	SecretName string
	// Hosts are the DNS names and IPs the serving certificate is valid for,
	// e.g. imperator-webhook.imperator-system.svc, or 127.0.0.1 locally.
	Hosts []string
	// Bundles get the CA bundle at every check; nil when no webhook
	// configuration of the cluster points at the agent (hosted mode: package
	// hosted keeps the members' current).
	Bundles Bundles
	// CAValidity and CertValidity default to DefaultCAValidity and
	// DefaultCertValidity. Certificates are backdated five minutes (package
	// pki), which counts in their lifetime: below about ten minutes they are
	// renewed almost at once, and a CA rolls over about every three checks.
	CAValidity   time.Duration
	CertValidity time.Duration
	// CheckInterval is how often the Secret and the CA bundles are checked;
	// default a twentieth of the shorter validity, at most 10 minutes.
	CheckInterval time.Duration
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
}

// Rotator keeps the serving certificate and the CA bundles current.
type Rotator struct {
	client client.Client
	opts   Options
	cert   atomic.Pointer[tls.Certificate]
	ca     atomic.Pointer[[]byte]
}

// New returns a Rotator that works through c (which should read Secrets
// directly, not from a cache that would list them all).
func New(c client.Client, opts Options) (*Rotator, error) {
	if opts.Namespace == "" || opts.SecretName == "" {
		return nil, errors.New("certs: namespace and secret name are required")
	}
	if len(opts.Hosts) == 0 {
		return nil, errors.New("certs: at least one host is required")
	}
	if opts.CAValidity < 0 || opts.CertValidity < 0 || opts.CheckInterval < 0 {
		return nil, errors.New("certs: validities and check interval must not be negative")
	}
	if opts.CAValidity == 0 {
		opts.CAValidity = DefaultCAValidity
	}
	if opts.CertValidity == 0 {
		opts.CertValidity = DefaultCertValidity
	}
	if opts.CheckInterval == 0 {
		opts.CheckInterval = min(maxCheckInterval, max(minCheckInterval, min(opts.CAValidity, opts.CertValidity)/20))
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Rotator{client: c, opts: opts}, nil
}

// Overlap is how long a CA stays in the bundle before it signs leaves, and
// after it stopped signing them: two check intervals, within which every
// replica has re-read the Secret.
func (m *Rotator) Overlap() time.Duration { return 2 * m.opts.CheckInterval }

// GetCertificate serves the current certificate; use it as tls.Config.GetCertificate.
func (m *Rotator) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := m.cert.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("webhook serving certificate not loaded yet")
}

// CABundle returns the PEM CA bundle the webhook configurations get (during a
// rollover, more than one CA), nil until Ensure succeeded once.
func (m *Rotator) CABundle() []byte {
	if ca := m.ca.Load(); ca != nil {
		return *ca
	}
	return nil
}

// TLSOption installs GetCertificate into a webhook server's TLS config.
func (m *Rotator) TLSOption(cfg *tls.Config) { cfg.GetCertificate = m.GetCertificate }

// Ensure makes sure the Secret holds a valid certificate for Hosts (moving a
// CA rollover on by at most one step), loads it, and injects the CA bundle
// into the webhook configurations (Bundles). Call it once before the webhook
// server starts.
func (m *Rotator) Ensure(ctx context.Context) error {
	secret, err := m.ensureSecret(ctx)
	if err != nil {
		return err
	}
	cert, err := tls.X509KeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return fmt.Errorf("loading serving certificate from secret %s/%s: %w", m.opts.Namespace, m.opts.SecretName, err)
	}
	m.cert.Store(&cert)
	caBundle := bundle(secret.Data)
	m.ca.Store(&caBundle)
	if m.opts.Bundles == nil {
		return nil
	}
	return m.opts.Bundles.Inject(ctx, caBundle)
}

// bundlesCarry reports whether every webhook of the configurations trusts
// caPEM; true when there are none to carry it.
func (m *Rotator) bundlesCarry(ctx context.Context, caPEM []byte) (bool, error) {
	if m.opts.Bundles == nil {
		return true, nil
	}
	return m.opts.Bundles.Carry(ctx, caPEM)
}

// bundle is the CA bundle of the Secret's data: the active, next and
// previous CAs, in a fixed order (by their bytes) so that replicas that read
// the same CAs write the same bundle.
func bundle(data map[string][]byte) []byte {
	var cas [][]byte
	for _, k := range []string{CACertKey, NextCACertKey, PreviousCACertKey} {
		if pem := bytes.TrimSpace(data[k]); len(pem) > 0 {
			// A copy: appending to pem would write into the Secret's data.
			cas = append(cas, append(slices.Clone(pem), '\n'))
		}
	}
	slices.SortFunc(cas, bytes.Compare)
	return bytes.Join(cas, nil)
}

// Start re-runs Ensure every CheckInterval until ctx ends. It runs on every
// replica (NeedLeaderElection is false): each serves webhooks.
func (m *Rotator) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("webhook-certs")
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := m.Ensure(ctx); err != nil {
			log.Error(err, "Refreshing webhook certificate")
		}
	}, m.opts.CheckInterval)
	return nil
}

// NeedLeaderElection reports that every replica keeps its certificate current.
func (m *Rotator) NeedLeaderElection() bool { return false }

func (m *Rotator) ensureSecret(ctx context.Context) (*corev1.Secret, error) {
	key := types.NamespacedName{Namespace: m.opts.Namespace, Name: m.opts.SecretName}
	secret := &corev1.Secret{}
	err := m.client.Get(ctx, key, secret)
	switch {
	case apierrors.IsNotFound(err):
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Type:       corev1.SecretTypeTLS,
		}
		if _, err := m.step(ctx, secret); err != nil {
			return nil, err
		}
		if err := m.client.Create(ctx, secret); err != nil {
			if apierrors.IsAlreadyExists(err) { // another replica was first: use its certificate
				return m.readSecret(ctx, key)
			}
			return nil, fmt.Errorf("creating webhook certificate secret %s: %w", key, err)
		}
		ctrl.LoggerFrom(ctx).Info("Created the webhook certificate", "secret", key)
		return secret, nil
	case err != nil:
		return nil, fmt.Errorf("reading webhook certificate secret %s: %w", key, err)
	}
	changed, err := m.step(ctx, secret)
	if err != nil || !changed {
		return secret, err
	}
	// Update carries the resourceVersion read above: if another replica
	// moved the certificate on meanwhile, take its result instead.
	if err := m.client.Update(ctx, secret); err != nil {
		if apierrors.IsConflict(err) {
			return m.readSecret(ctx, key)
		}
		return nil, fmt.Errorf("renewing webhook certificate in secret %s: %w", key, err)
	}
	return secret, nil
}

func (m *Rotator) readSecret(ctx context.Context, key types.NamespacedName) (*corev1.Secret, error) {
	secret := &corev1.Secret{}
	if err := m.client.Get(ctx, key, secret); err != nil {
		return nil, fmt.Errorf("reading webhook certificate secret %s: %w", key, err)
	}
	return secret, nil
}
