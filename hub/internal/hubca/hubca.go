// Package hubca keeps the hub's certificate authority in a Secret of the hub
// namespace: it signs the hub's serving certificate and every spoke's client
// certificate, and its certificate is the CA bundle spokes verify the hub with.
// Hub replicas share it through the Secret.
package hubca

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/internal/pki"
)

// caValidity is the lifetime of a CA the hub creates.
const caValidity = 10 * 365 * 24 * time.Hour

// +kubebuilder:rbac:groups="",namespace=imperator-system,resources=secrets,verbs=get;list;create;patch;delete

// LoadOrCreate reads the CA from the Secret namespace/name, creating it when
// missing. Of two replicas creating it at once, the loser reads the winner's.
func LoadOrCreate(ctx context.Context, c client.Client, namespace, name string) (*pki.CA, error) {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	var secret corev1.Secret
	err := c.Get(ctx, key, &secret)
	if apierrors.IsNotFound(err) {
		// err is the outer one: the loser of a race reads the winner's
		// Secret into it below.
		ca, caErr := pki.NewCA("imperator-hub-ca", caValidity)
		if caErr != nil {
			return nil, caErr
		}
		keyPEM, keyErr := ca.KeyPEM()
		if keyErr != nil {
			return nil, keyErr
		}
		secret = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{corev1.TLSCertKey: ca.CertPEM, corev1.TLSPrivateKeyKey: keyPEM},
		}
		if err := c.Create(ctx, &secret); err == nil {
			return ca, nil
		} else if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating hub CA secret %s: %w", key, err)
		}
		err = c.Get(ctx, key, &secret)
	}
	if err != nil {
		return nil, fmt.Errorf("reading hub CA secret %s: %w", key, err)
	}
	ca, err := pki.LoadCA(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("loading hub CA from secret %s: %w", key, err)
	}
	return ca, nil
}

// ErrNoCA is returned by LoadTrust when the hub cluster has no CA Secret:
// the hub has never run there, or the kubeconfig names another cluster.
var ErrNoCA = errors.New("no hub CA")

// LoadTrust reads the whole CA Secret namespace/name (the current CA and,
// during a rotation, the next or previous one) and never creates it, so that
// an administrator pointing a command at the wrong cluster leaves no stray CA
// there.
func LoadTrust(ctx context.Context, c client.Reader, namespace, name string) (*Trust, error) {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	var secret corev1.Secret
	if err := c.Get(ctx, key, &secret); apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: secret %s not found (is this the hub cluster? the hub creates its CA at its first start, or run `hub ca init`)", ErrNoCA, key)
	} else if err != nil {
		return nil, fmt.Errorf("reading hub CA secret %s: %w", key, err)
	}
	t, err := ParseTrust(secret.Data)
	if err != nil {
		return nil, fmt.Errorf("hub CA secret %s: %w", key, err)
	}
	return t, nil
}

// ErrCAExists is returned by Create when the Secret is already there.
var ErrCAExists = errors.New("hub CA exists")

// Create makes a new CA in the Secret namespace/name and refuses to replace
// one that exists.
func Create(ctx context.Context, c client.Client, namespace, name string) (*pki.CA, error) {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	ca, err := pki.NewCA("imperator-hub-ca", caValidity)
	if err != nil {
		return nil, err
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	secret := corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: ca.CertPEM, corev1.TLSPrivateKeyKey: keyPEM},
	}
	if err := c.Create(ctx, &secret); apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("%w: secret %s is already there (print it with `hub ca print`)", ErrCAExists, key)
	} else if err != nil {
		return nil, fmt.Errorf("creating hub CA secret %s: %w", key, err)
	}
	return ca, nil
}
