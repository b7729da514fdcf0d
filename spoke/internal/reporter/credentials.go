package reporter

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/pki"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// joinTimeout bounds the Join call.
const joinTimeout = 30 * time.Second

// renewBefore is how long before expiry a stored certificate is no longer used.
const renewBefore = time.Hour

// errNoToken means the agent has no usable certificate and no token to join.
var errNoToken = errors.New("no usable hub client certificate in the credentials Secret and no bootstrap token (--join-token-file or $IMPERATOR_JOIN_TOKEN)")

// credentials returns the client certificate from the credentials Secret,
// joining the hub first when the Secret holds none (or one for another
// cluster, or one about to expire, or one the hub refused for good). A
// refused certificate stays in the Secret until a join replaces it.
func (r *Reporter) credentials(ctx context.Context) (*tls.Certificate, error) {
	key := client.ObjectKey{Namespace: r.opts.Namespace, Name: r.opts.Hub.CredentialsSecret}
	var secret corev1.Secret
	err := r.opts.Client.Get(ctx, key, &secret)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading hub credentials secret %s: %w", key, err)
	}
	if err == nil {
		cert, reason := r.usableCertificate(&secret)
		switch {
		case r.refused.is(cert):
			// session logged the refusal once; joining again is retried
			// until an operator gives a new token.
			r.log.V(2).Info("Stored hub certificate refused by the hub; joining", "reason", r.refused.reason)
		case cert != nil:
			r.refused = nil // someone stored another certificate
			if renewDue(cert.Leaf) {
				return r.renew(ctx, key, cert), nil
			}
			return cert, nil
		default:
			r.log.Info("Stored hub certificate not usable; joining", "reason", reason)
		}
	}
	pair, err := r.join(ctx, key)
	if err != nil {
		if r.refused != nil {
			return nil, &joinAgainError{reason: r.refused.reason, err: err}
		}
		return nil, err
	}
	r.refused = nil
	return pair, nil
}

// notAfter is the expiry of cert, zero when unknown.
func notAfter(cert *tls.Certificate) time.Time {
	if cert == nil || cert.Leaf == nil {
		return time.Time{}
	}
	return cert.Leaf.NotAfter
}

// renewDue is true once less than a third of the certificate's lifetime is left.
func renewDue(cert *x509.Certificate) bool {
	if cert == nil {
		return false
	}
	return time.Until(cert.NotAfter) < cert.NotAfter.Sub(cert.NotBefore)/3
}

// renew asks the hub for a new certificate with the current one and stores
// it; on failure it keeps using the current certificate, still valid.
func (r *Reporter) renew(ctx context.Context, key client.ObjectKey, current *tls.Certificate) *tls.Certificate {
	pair, err := r.requestRenewal(ctx, key, current)
	if err != nil {
		r.log.Error(err, "Renewing the hub client certificate failed; using the current one")
		return current
	}
	return pair
}

// requestRenewal exchanges current and a new key's CSR for a certificate
// and stores both in the credentials Secret.
func (r *Reporter) requestRenewal(ctx context.Context, key client.ObjectKey, current *tls.Certificate) (*tls.Certificate, error) {
	csrPEM, keyPEM, err := pki.NewCSR(r.opts.Hub.ClusterName)
	if err != nil {
		return nil, err
	}
	conn, err := r.dial(current)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	callCtx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	resp, err := federationv1.NewFederationClient(conn).Renew(callCtx, &federationv1.RenewRequest{Csr: csrPEM})
	if err != nil {
		return nil, fmt.Errorf("renewing at the hub at %s: %w", r.opts.Hub.Address, err)
	}
	pair, err := r.storeCredentials(ctx, key, resp.GetCertificate(), keyPEM, resp.GetCa())
	if err != nil {
		return nil, err
	}
	r.log.Info("Renewed the hub client certificate", "notAfter", resp.GetNotAfter().AsTime())
	return pair, nil
}

func (r *Reporter) usableCertificate(secret *corev1.Secret) (*tls.Certificate, string) {
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
	if time.Until(cert.NotAfter) < renewBefore {
		return nil, "certificate expires at " + cert.NotAfter.String()
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, "unusable key pair: " + err.Error()
	}
	return &pair, ""
}

// join exchanges the bootstrap token and a new key's CSR for a certificate
// and stores both in the credentials Secret.
func (r *Reporter) join(ctx context.Context, key client.ObjectKey) (*tls.Certificate, error) {
	token, err := r.opts.Token()
	if err != nil {
		return nil, err
	}
	if token == "" {
		return nil, errNoToken
	}
	csrPEM, keyPEM, err := pki.NewCSR(r.opts.Hub.ClusterName)
	if err != nil {
		return nil, err
	}
	conn, err := r.dial(nil)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
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
	pair, err := r.storeCredentials(ctx, key, resp.GetCertificate(), keyPEM, resp.GetCa())
	if err != nil {
		return nil, err
	}
	r.log.Info("Joined the hub", "hub", r.opts.Hub.Address, "notAfter", resp.GetNotAfter().AsTime())
	return pair, nil
}

// storeCredentials writes the certificate, its key and the hub CA into the
// credentials Secret and returns the key pair.
func (r *Reporter) storeCredentials(ctx context.Context, key client.ObjectKey, certPEM, keyPEM, caPEM []byte) (*tls.Certificate, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("loading the certificate the hub issued: %w", err)
	}
	// Update, not patch: the whole Secret is ours, and the resourceVersion
	// CreateOrUpdate read guards against a concurrent writer.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.opts.Client, secret, func() error {
		if secret.CreationTimestamp.IsZero() {
			secret.Type = corev1.SecretTypeTLS // immutable once created
		}
		secret.Data = map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM, "ca.crt": caPEM}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("storing hub credentials in secret %s: %w", key, err)
	}
	return &pair, nil
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
