// Package certs gives the agent's webhook server its serving certificate and
// keeps it fresh. The CA and serving certificate live in one Secret in the
// agent's namespace, shared by every replica: the first replica to start
// creates it, the others read it; any replica renews it when a third of its
// lifetime is left. The CA is injected into the agent's webhook
// configurations, and the webhook server takes the certificate from memory
// (Manager.GetCertificate), so a renewal needs neither files nor a restart.
package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/internal/pki"
)

// Keys of the certificate Secret.
const (
	CACertKey = "ca.crt"
	CAKeyKey  = "ca.key"
)

// The certificate Secret lives in the agent's namespace.
// +kubebuilder:rbac:groups="",namespace=imperator-system,resources=secrets,verbs=get;create;update

// Options configure the certificate Manager.
type Options struct {
	// Namespace and SecretName locate the certificate Secret.
	Namespace  string
	SecretName string
	// Hosts are the DNS names and IPs the serving certificate is valid for,
	// e.g. imperator-webhook.imperator-system.svc, or 127.0.0.1 locally.
	Hosts []string
	// MutatingWebhooks and ValidatingWebhooks name the webhook configurations
	// whose webhooks get the CA bundle. Missing ones are skipped (and retried).
	MutatingWebhooks   []string
	ValidatingWebhooks []string
	// CAValidity and CertValidity default to 10 years and 1 year.
	CAValidity   time.Duration
	CertValidity time.Duration
	// CheckInterval is how often the Secret and the CA bundles are checked;
	// default 10 minutes.
	CheckInterval time.Duration
}

// Manager keeps the serving certificate and the CA bundles current.
type Manager struct {
	client client.Client
	opts   Options
	cert   atomic.Pointer[tls.Certificate]
	ca     atomic.Pointer[[]byte]
}

// New returns a Manager that works through c (which should read Secrets and
// webhook configurations directly, not from a cache that would list them all).
func New(c client.Client, opts Options) (*Manager, error) {
	if opts.Namespace == "" || opts.SecretName == "" {
		return nil, errors.New("certs: namespace and secret name are required")
	}
	if len(opts.Hosts) == 0 {
		return nil, errors.New("certs: at least one host is required")
	}
	if opts.CAValidity == 0 {
		opts.CAValidity = 10 * 365 * 24 * time.Hour
	}
	if opts.CertValidity == 0 {
		opts.CertValidity = 365 * 24 * time.Hour
	}
	if opts.CheckInterval == 0 {
		opts.CheckInterval = 10 * time.Minute
	}
	return &Manager{client: c, opts: opts}, nil
}

// GetCertificate serves the current certificate; use it as tls.Config.GetCertificate.
func (m *Manager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := m.cert.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("webhook serving certificate not loaded yet")
}

// CABundle returns the PEM CA that signed the serving certificate, nil until
// Ensure succeeded once.
func (m *Manager) CABundle() []byte {
	if ca := m.ca.Load(); ca != nil {
		return *ca
	}
	return nil
}

// TLSOption installs GetCertificate into a webhook server's TLS config.
func (m *Manager) TLSOption(cfg *tls.Config) { cfg.GetCertificate = m.GetCertificate }

// Ensure makes sure the Secret holds a valid certificate for Hosts, loads it,
// and injects the CA into the webhook configurations. Call it once before the
// webhook server starts.
func (m *Manager) Ensure(ctx context.Context) error {
	secret, err := m.ensureSecret(ctx)
	if err != nil {
		return err
	}
	cert, err := tls.X509KeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return fmt.Errorf("loading serving certificate from secret %s/%s: %w", m.opts.Namespace, m.opts.SecretName, err)
	}
	m.cert.Store(&cert)
	caBundle := secret.Data[CACertKey]
	m.ca.Store(&caBundle)
	return m.injectCABundle(ctx, caBundle)
}

// Start re-runs Ensure every CheckInterval until ctx ends. It runs on every
// replica (NeedLeaderElection is false): each serves webhooks.
func (m *Manager) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("webhook-certs")
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := m.Ensure(ctx); err != nil {
			log.Error(err, "Refreshing webhook certificate")
		}
	}, m.opts.CheckInterval)
	return nil
}

// NeedLeaderElection reports that every replica keeps its certificate current.
func (m *Manager) NeedLeaderElection() bool { return false }

func (m *Manager) ensureSecret(ctx context.Context) (*corev1.Secret, error) {
	key := types.NamespacedName{Namespace: m.opts.Namespace, Name: m.opts.SecretName}
	secret := &corev1.Secret{}
	err := m.client.Get(ctx, key, secret)
	switch {
	case apierrors.IsNotFound(err):
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Type:       corev1.SecretTypeTLS,
		}
		if secret.Data, err = m.issue(nil); err != nil {
			return nil, err
		}
		if err := m.client.Create(ctx, secret); err != nil {
			if apierrors.IsAlreadyExists(err) { // another replica was first: use its certificate
				return m.readSecret(ctx, key)
			}
			return nil, fmt.Errorf("creating webhook certificate secret %s: %w", key, err)
		}
		return secret, nil
	case err != nil:
		return nil, fmt.Errorf("reading webhook certificate secret %s: %w", key, err)
	}
	if m.fresh(secret.Data, time.Now()) {
		return secret, nil
	}
	data, err := m.issue(secret.Data)
	if err != nil {
		return nil, err
	}
	secret.Data = data
	// Update carries the resourceVersion read above: if another replica
	// renewed the certificate meanwhile, take its result instead.
	if err := m.client.Update(ctx, secret); err != nil {
		if apierrors.IsConflict(err) {
			return m.readSecret(ctx, key)
		}
		return nil, fmt.Errorf("renewing webhook certificate in secret %s: %w", key, err)
	}
	return secret, nil
}

func (m *Manager) readSecret(ctx context.Context, key types.NamespacedName) (*corev1.Secret, error) {
	secret := &corev1.Secret{}
	if err := m.client.Get(ctx, key, secret); err != nil {
		return nil, fmt.Errorf("reading webhook certificate secret %s: %w", key, err)
	}
	return secret, nil
}

// fresh reports whether data holds a CA and a serving certificate for every
// host, both with more than a third of their lifetime left.
func (m *Manager) fresh(data map[string][]byte, now time.Time) bool {
	ca, err := pki.ParseCertificate(data[CACertKey])
	if err != nil || !validFor(ca, now) {
		return false
	}
	cert, err := pki.ParseCertificate(data[corev1.TLSCertKey])
	if err != nil || !validFor(cert, now) || cert.CheckSignatureFrom(ca) != nil {
		return false
	}
	if _, err := tls.X509KeyPair(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey]); err != nil {
		return false
	}
	for _, h := range m.opts.Hosts {
		if cert.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// issue returns Secret data with a serving certificate, reusing the CA of old
// when it is still fresh so that the CA bundles need not change.
func (m *Manager) issue(old map[string][]byte) (map[string][]byte, error) {
	var ca *pki.CA
	if loaded, err := pki.LoadCA(old[CACertKey], old[CAKeyKey]); err == nil && validFor(loaded.Cert, time.Now()) {
		ca = loaded
	} else if ca, err = pki.NewCA("imperator-webhook-ca", m.opts.CAValidity); err != nil {
		return nil, fmt.Errorf("creating webhook CA: %w", err)
	}
	caKey, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	cert, key, err := ca.IssueServer(m.opts.Hosts[0], m.opts.Hosts, m.opts.CertValidity)
	if err != nil {
		return nil, fmt.Errorf("issuing webhook serving certificate: %w", err)
	}
	return map[string][]byte{
		CACertKey: ca.CertPEM, CAKeyKey: caKey,
		corev1.TLSCertKey: cert, corev1.TLSPrivateKeyKey: key,
	}, nil
}

// injectCABundle sets caBundle on every webhook of the configured
// configurations that does not carry it yet.
func (m *Manager) injectCABundle(ctx context.Context, caBundle []byte) error {
	var errs []error
	for _, name := range m.opts.MutatingWebhooks {
		cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
		errs = append(errs, m.patchWebhooks(ctx, name, cfg, func() bool {
			changed := false
			for i := range cfg.Webhooks {
				changed = setBundle(&cfg.Webhooks[i].ClientConfig, caBundle) || changed
			}
			return changed
		}))
	}
	for _, name := range m.opts.ValidatingWebhooks {
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		errs = append(errs, m.patchWebhooks(ctx, name, cfg, func() bool {
			changed := false
			for i := range cfg.Webhooks {
				changed = setBundle(&cfg.Webhooks[i].ClientConfig, caBundle) || changed
			}
			return changed
		}))
	}
	return errors.Join(errs...)
}

func (m *Manager) patchWebhooks(ctx context.Context, name string, obj client.Object, mutate func() bool) error {
	if err := m.client.Get(ctx, types.NamespacedName{Name: name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			ctrl.LoggerFrom(ctx).V(1).Info("Webhook configuration not found, CA bundle not injected", "name", name)
			return nil
		}
		return fmt.Errorf("reading webhook configuration %s: %w", name, err)
	}
	base := obj.DeepCopyObject().(client.Object)
	if !mutate() {
		return nil
	}
	if err := m.client.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("injecting CA bundle into webhook configuration %s: %w", name, err)
	}
	return nil
}

func setBundle(cc *admissionregistrationv1.WebhookClientConfig, caBundle []byte) bool {
	if bytes.Equal(cc.CABundle, caBundle) {
		return false
	}
	cc.CABundle = caBundle
	return true
}

// validFor reports whether more than a third of the certificate's lifetime is left.
func validFor(cert *x509.Certificate, now time.Time) bool {
	lifetime := cert.NotAfter.Sub(cert.NotBefore)
	return now.After(cert.NotBefore) && cert.NotAfter.Sub(now) > lifetime/3
}
