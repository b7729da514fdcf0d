package hosted

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/internal/pki"
)

// A member's client Secret, which the agent writes beside the member's
// Secret, is what the member's API server needs to call the agent's
// webhooks; docs/hosted.md says how to give it to the API server.
const (
	// ClientSecretSuffix names a member's client Secret:
	// <member Secret's name>-webhook-client.
	ClientSecretSuffix = "-webhook-client"
	// ClientSecretLabel marks the agent's client Secrets; its value is the
	// member Secret's name. The agent never writes over a Secret of that
	// name without it.
	ClientSecretLabel = "imperator.tenzen-y.io/webhook-client-of"
	// ClientKubeconfigKey holds the kubeconfig that the admission
	// configuration's kubeConfigFile names: one user, named after the
	// host:port of the member's webhook URL (how the API server picks the
	// credentials of a webhook), whose certificate and key are the files
	// tls.crt and tls.key beside it.
	ClientKubeconfigKey = "kubeconfig"
)

// clientSecretKey locates m's client Secret.
func clientSecretKey(m *Member) types.NamespacedName {
	return types.NamespacedName{Namespace: m.Secret.Namespace, Name: m.Secret.Name + ClientSecretSuffix}
}

// webhookKubeconfig is the kubeconfig of a member's client Secret for
// webhookURL. The API server looks a webhook's credentials up by the host
// and port of its URL (443 when the URL names none), so the user is named
// exactly so; relative paths are read beside the kubeconfig file.
func webhookKubeconfig(webhookURL string) ([]byte, error) {
	u, err := url.Parse(webhookURL)
	if err != nil {
		return nil, fmt.Errorf("webhook URL %q: %w", webhookURL, err)
	}
	hostPort := u.Host
	if u.Port() == "" {
		hostPort = net.JoinHostPort(u.Hostname(), "443")
	}
	cfg := clientcmdapi.NewConfig()
	cfg.AuthInfos[hostPort] = &clientcmdapi.AuthInfo{ClientCertificate: corev1.TLSCertKey, ClientKey: corev1.TLSPrivateKeyKey}
	return clientcmd.Write(*cfg)
}

// ensureClientSecret makes sure m's client Secret holds a certificate for m
// that is not due for renewal, from the current CA, and the kubeconfig for
// m's webhook URL; it returns the certificate. The Secret is owned by m's
// Secret, so that it goes when the member's Secret is deleted.
func ensureClientSecret(ctx context.Context, c client.Client, ca *ClientCA, m *Member) (*x509.Certificate, error) {
	kubeconfig, err := webhookKubeconfig(m.WebhookURL)
	if err != nil {
		return nil, err
	}
	key := clientSecretKey(m)
	secret := &corev1.Secret{}
	err = c.Get(ctx, key, secret)
	create := apierrors.IsNotFound(err)
	switch {
	case create:
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Type: corev1.SecretTypeTLS}
	case err != nil:
		return nil, fmt.Errorf("reading the member's client Secret %s: %w", key, err)
	case secret.Labels[ClientSecretLabel] != m.Secret.Name:
		return nil, fmt.Errorf("the Secret %s exists and is not the agent's client Secret of member Secret %s (label %s=%s): rename or delete it",
			key, m.Secret.Name, ClientSecretLabel, m.Secret.Name)
	}
	changed := create
	metav1.SetMetaDataLabel(&secret.ObjectMeta, ClientSecretLabel, m.Secret.Name)
	if m.SecretUID != "" && !ownedBy(secret, m.SecretUID) {
		secret.OwnerReferences = append(secret.OwnerReferences, metav1.OwnerReference{
			APIVersion: "v1", Kind: "Secret", Name: m.Secret.Name, UID: m.SecretUID,
		})
		changed = true
	}
	if secret.Data == nil {
		secret.Data = map[string][]byte{}
	}
	cert, certErr := pki.ParseCertificate(secret.Data[corev1.TLSCertKey])
	_, pairErr := tls.X509KeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey])
	if certErr != nil || pairErr != nil || !ca.fresh(cert, m.Name) {
		certPEM, keyPEM, err := ca.issue(m.Name)
		if err != nil {
			return nil, fmt.Errorf("issuing the client certificate of member %s: %w", m.Name, err)
		}
		if cert, err = pki.ParseCertificate(certPEM); err != nil {
			return nil, err
		}
		secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey] = certPEM, keyPEM
		changed = true
	}
	if !bytes.Equal(secret.Data[ClientKubeconfigKey], kubeconfig) {
		secret.Data[ClientKubeconfigKey] = kubeconfig
		changed = true
	}
	switch {
	case !changed:
	case create:
		err = c.Create(ctx, secret)
	default:
		// Carries the resourceVersion read: a concurrent change is read again
		// at the next round.
		err = c.Update(ctx, secret)
	}
	if err != nil {
		return nil, fmt.Errorf("writing the member's client Secret %s: %w", key, err)
	}
	return cert, nil
}

func ownedBy(obj metav1.Object, uid types.UID) bool {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.UID == uid {
			return true
		}
	}
	return false
}
