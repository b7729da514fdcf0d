package reporter

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/internal/pki"
)

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

// secretTimeout bounds every read and write of the credentials Secret, so
// that an API server that does not answer holds neither a renewal nor the
// stream's next session.
const secretTimeout = 15 * time.Second

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
func (cr *hubCredentials) keep(ctx context.Context, key client.ObjectKey, cred *credential) {
	cr.unsaved = cred
	if err := cr.saveUnsaved(ctx); err != nil {
		cr.log.Error(err, "Cannot store the hub client certificate; using it from memory and retrying the write", "secret", key, "notAfter", cred.cert.Leaf.NotAfter)
		notify(cr.unsavedChanged)
	}
}

// saveUnsaved stores the unsaved certificate, if any; nil when there is
// none (any more). credentialsMu must be held.
func (cr *hubCredentials) saveUnsaved(ctx context.Context) error {
	cred := cr.unsaved
	if cred == nil {
		return nil
	}
	key := client.ObjectKey{Namespace: cr.opts.Namespace, Name: cr.opts.Hub.CredentialsSecret}
	if err := cr.storeCredentials(ctx, key, cred); err != nil {
		return err
	}
	cr.unsaved = nil
	return nil
}

// saver retries storing the unsaved certificate, with capped exponential
// backoff, until it is stored (or replaced, or dropped), each time keep
// could not store one, until ctx is done.
func (cr *hubCredentials) saver(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-cr.unsavedChanged:
		}
		for failures := 1; ; failures++ {
			timer := time.NewTimer(cr.retryWait(failures))
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
			cr.writeMu.Lock()
			stored := cr.unsaved
			err := cr.saveUnsaved(ctx)
			cr.writeMu.Unlock()
			if err == nil {
				if stored != nil {
					cr.log.Info("Stored the hub client certificate in use", "notAfter", stored.cert.Leaf.NotAfter, "failures", failures)
				}
				break
			}
			if ctx.Err() != nil {
				return
			}
			cr.log.V(1).Info("Storing the hub client certificate failed; retrying", "err", err.Error(), "failures", failures)
		}
	}
}

// usableCertificate returns the secret's certificate when the agent can use
// it: for this cluster, not expired, with its key. Otherwise it says why not.
func (cr *hubCredentials) usableCertificate(secret *corev1.Secret) (*credential, string) {
	certPEM, keyPEM := secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey]
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return nil, "no certificate"
	}
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		return nil, "unreadable certificate: " + err.Error()
	}
	if cert.Subject.CommonName != cr.opts.Hub.ClusterName {
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

// pendingRequest returns the key and CSR stored in the credentials Secret
// for the next Join or Renew, creating and storing them first when there
// are none for this cluster: a Join is made only with a key that is stored
// (a Renew too, unless it is late: see renew), and a retry sends the same
// CSR.
func (cr *hubCredentials) pendingRequest(ctx context.Context, key client.ObjectKey) (csrPEM, keyPEM []byte, err error) {
	ctx, cancel := context.WithTimeout(ctx, secretTimeout)
	defer cancel()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if _, err := controllerutil.CreateOrUpdate(ctx, cr.opts.Client, secret, func() error {
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
		if pendingRequestValid(secret.Data[pendingCSRKey], secret.Data[pendingKeyKey], cr.opts.Hub.ClusterName) {
			csrPEM, keyPEM = secret.Data[pendingCSRKey], secret.Data[pendingKeyKey]
			return nil
		}
		var err error
		if csrPEM, keyPEM, err = pki.NewCSR(cr.opts.Hub.ClusterName); err != nil {
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
func (cr *hubCredentials) storeCredentials(ctx context.Context, key client.ObjectKey, cred *credential) error {
	ctx, cancel := context.WithTimeout(ctx, secretTimeout)
	defer cancel()
	// Update, not patch: the whole Secret is ours, and the resourceVersion
	// CreateOrUpdate read guards against a concurrent writer.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if _, err := controllerutil.CreateOrUpdate(ctx, cr.opts.Client, secret, func() error {
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
