package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/imperator-federation/imperator/internal/pki"
)

// step moves secret at most one step on (see the package comment) and
// reports whether it changed it. Promoting a next CA also needs the webhook
// configurations to carry it, which step reads.
func (m *Rotator) step(ctx context.Context, secret *corev1.Secret) (bool, error) {
	r := &rotation{
		m:           m,
		now:         m.opts.Clock.Now(),
		data:        secret.Data,
		annotations: secret.Annotations,
		log:         ctrl.LoggerFrom(ctx).WithValues("secret", klog.KObj(secret)),
	}
	if r.data == nil {
		r.data = map[string][]byte{}
	}
	if r.annotations == nil {
		r.annotations = map[string]string{}
	}
	for _, phase := range []func(context.Context) error{r.loadActive, r.retire, r.advanceNext, r.issueLeaf} {
		if err := phase(ctx); err != nil {
			return false, err
		}
	}
	secret.Data = r.data
	if len(r.annotations) > 0 {
		secret.Annotations = r.annotations
	}
	return r.changed, nil
}

// rotation is one check of the certificate Secret: its data and annotations,
// changed in place by the phases of step, and the CA that signs the leaf.
type rotation struct {
	m           *Rotator
	now         time.Time
	data        map[string][]byte
	annotations map[string]string
	active      *pki.CA
	changed     bool
	log         logr.Logger
}

// loadActive reads the active CA, or starts afresh when there is none to
// roll over from (missing, damaged or expired).
func (r *rotation) loadActive(context.Context) error {
	active, err := pki.LoadCA(r.data[CACertKey], r.data[CAKeyKey])
	if err == nil && r.now.Before(active.Cert.NotAfter) {
		r.active = active
		return nil
	}
	ca, err := pki.NewCA("imperator-webhook-ca", r.m.opts.CAValidity)
	if err != nil {
		return fmt.Errorf("creating webhook CA: %w", err)
	}
	if r.data, err = withCA(map[string][]byte{}, CACertKey, CAKeyKey, ca); err != nil {
		return err
	}
	delete(r.annotations, NextCASinceAnnotation)
	delete(r.annotations, PreviousCAUntilAnnotation)
	r.active, r.changed = ca, true
	r.log.V(1).Info("Created a webhook CA")
	return nil
}

// retire drops the previous CA from the bundle once its overlap is over.
func (r *rotation) retire(context.Context) error {
	if _, ok := r.data[PreviousCACertKey]; !ok {
		return nil
	}
	until, err := time.Parse(time.RFC3339, r.annotations[PreviousCAUntilAnnotation])
	if err == nil && r.now.Before(until) {
		return nil
	}
	delete(r.data, PreviousCACertKey)
	delete(r.annotations, PreviousCAUntilAnnotation)
	r.changed = true
	r.log.V(1).Info("Retired the previous webhook CA from the bundle")
	return nil
}

// advanceNext drops a damaged next CA, introduces one when the active CA has
// a third of its lifetime left, or promotes the next CA once it is old
// enough and every webhook configuration carries it.
func (r *rotation) advanceNext(ctx context.Context) error {
	next, err := pki.LoadCA(r.data[NextCACertKey], r.data[NextCAKeyKey])
	switch {
	case err != nil && (len(r.data[NextCACertKey]) > 0 || len(r.data[NextCAKeyKey]) > 0):
		// A damaged next CA: drop it, a later check introduces another.
		delete(r.data, NextCACertKey)
		delete(r.data, NextCAKeyKey)
		delete(r.annotations, NextCASinceAnnotation)
		r.changed = true
		return nil
	case err != nil && !validFor(r.active.Cert, r.now):
		return r.introduce()
	case err == nil:
		return r.promote(ctx, next)
	}
	return nil
}

// introduce stores a new CA as the next one: in the bundle, not signing yet.
func (r *rotation) introduce() error {
	ca, err := pki.NewCA("imperator-webhook-ca", r.m.opts.CAValidity)
	if err != nil {
		return fmt.Errorf("creating webhook CA: %w", err)
	}
	if r.data, err = withCA(r.data, NextCACertKey, NextCAKeyKey, ca); err != nil {
		return err
	}
	r.annotations[NextCASinceAnnotation] = r.now.UTC().Format(time.RFC3339)
	r.changed = true
	r.log.Info("Introduced a new webhook CA into the bundle", "activeNotAfter", r.active.Cert.NotAfter)
	return nil
}

// promote makes next the active CA once it was introduced Overlap ago and
// every webhook configuration carries it; the active CA becomes the previous
// one, still in the bundle for replicas serving a leaf it signed.
func (r *rotation) promote(ctx context.Context, next *pki.CA) error {
	since, err := time.Parse(time.RFC3339, r.annotations[NextCASinceAnnotation])
	if err != nil {
		// Unknown age: count from now.
		r.annotations[NextCASinceAnnotation] = r.now.UTC().Format(time.RFC3339)
		r.changed = true
		return nil
	}
	if r.now.Sub(since) < r.m.Overlap() {
		return nil
	}
	carried, err := r.m.bundlesCarry(ctx, next.CertPEM)
	if err != nil {
		return err
	}
	if !carried {
		r.log.V(1).Info("New webhook CA not in every webhook configuration yet, not promoting it")
		return nil
	}
	r.data[PreviousCACertKey] = r.data[CACertKey]
	r.annotations[PreviousCAUntilAnnotation] = r.now.Add(r.m.Overlap()).UTC().Format(time.RFC3339)
	r.data[CACertKey], r.data[CAKeyKey] = r.data[NextCACertKey], r.data[NextCAKeyKey]
	delete(r.data, NextCACertKey)
	delete(r.data, NextCAKeyKey)
	delete(r.annotations, NextCASinceAnnotation)
	delete(r.data, corev1.TLSCertKey) // re-issued by issueLeaf from the new CA
	r.active = next
	r.changed = true
	r.log.Info("Promoted the new webhook CA; the previous one stays in the bundle", "until", r.annotations[PreviousCAUntilAnnotation])
	return nil
}

// issueLeaf issues a serving certificate from the active CA unless the one
// held is fresh.
func (r *rotation) issueLeaf(context.Context) error {
	if r.m.leafFresh(r.data, r.active.Cert, r.now) {
		return nil
	}
	cert, key, err := r.active.IssueServer(r.m.opts.Hosts[0], r.m.opts.Hosts, r.m.opts.CertValidity)
	if err != nil {
		return fmt.Errorf("issuing webhook serving certificate: %w", err)
	}
	r.data[corev1.TLSCertKey], r.data[corev1.TLSPrivateKeyKey] = cert, key
	r.changed = true
	return nil
}

// withCA stores ca under the given keys of data.
func withCA(data map[string][]byte, certKey, keyKey string, ca *pki.CA) (map[string][]byte, error) {
	key, err := ca.KeyPEM()
	if err != nil {
		return nil, fmt.Errorf("encoding webhook CA key: %w", err)
	}
	data[certKey], data[keyKey] = ca.CertPEM, key
	return data, nil
}

// leafFresh reports whether data holds a serving certificate signed by ca
// for every host, with more than a third of its lifetime left, and its key.
func (m *Rotator) leafFresh(data map[string][]byte, ca *x509.Certificate, now time.Time) bool {
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

// validFor reports whether more than a third of the certificate's lifetime is left.
func validFor(cert *x509.Certificate, now time.Time) bool {
	lifetime := cert.NotAfter.Sub(cert.NotBefore)
	return now.After(cert.NotBefore) && cert.NotAfter.Sub(now) > lifetime/3
}
