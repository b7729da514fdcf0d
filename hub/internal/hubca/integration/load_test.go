package integration

import (
	"bytes"
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/hub/internal/hubca"
	"github.com/imperator-federation/imperator/test/util/framework"
)

// `hub ca print` and `hub client-cert` pointed at a cluster without a hub
// CA fail and leave no CA there; only `hub ca init` creates one, once.
func TestOnlyCreateMakesAHubCA(t *testing.T) {
	ctx := context.Background()
	env := startAPIServer(t, framework.Options{})

	if _, err := hubca.LoadTrust(ctx, env.Client, namespace, secret); !errors.Is(err, hubca.ErrNoCA) {
		t.Fatalf("LoadTrust on a cluster without a CA: %v, want ErrNoCA", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: secret}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after LoadTrust on a cluster without a CA the Secret: %v, want NotFound", err)
	}
	created, err := hubca.Create(ctx, env.Client, namespace, secret)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := hubca.Create(ctx, env.Client, namespace, secret); !errors.Is(err, hubca.ErrCAExists) {
		t.Fatalf("a second Create: %v, want ErrCAExists", err)
	}
	loaded, err := hubca.LoadTrust(ctx, env.Client, namespace, secret)
	if err != nil {
		t.Fatalf("LoadTrust after Create: %v", err)
	}
	if !bytes.Equal(loaded.Current.CertPEM, created.CertPEM) {
		t.Error("LoadTrust returns another CA than the one Create made (the second Create replaced it?)")
	}
}
