package hosted

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/imperator-federation/imperator/internal/pki"
)

func testMember(webhookURL string) *Member {
	return &Member{
		Name:       "edge-1",
		Secret:     types.NamespacedName{Namespace: "members", Name: "edge-1-secret"},
		SecretUID:  "uid-of-edge-1-secret",
		WebhookURL: webhookURL,
	}
}

// TestMemberClientSecretIsWhatTheAPIServerNeeds: mounted as a directory, the
// member's client Secret is a kubeconfig that the API server's admission
// configuration can name as it is: loaded the way the API server loads it,
// its user is found under the host:port the API server looks up for the
// webhook URL, and its certificate files load from beside it.
func TestMemberClientSecretIsWhatTheAPIServerNeeds(t *testing.T) {
	cases := map[string]struct {
		webhookURL   string
		wantHostPort string
	}{
		"URL with a port":                    {webhookURL: "https://127.0.0.1:9443", wantHostPort: "127.0.0.1:9443"},
		"URL without a port (443)":           {webhookURL: "https://webhooks.example.com", wantHostPort: "webhooks.example.com:443"},
		"URL with a path and a trailing one": {webhookURL: "https://webhooks.example.com:8443/imperator/", wantHostPort: "webhooks.example.com:8443"},
		"IPv6 URL without a port (443)":      {webhookURL: "https://[::1]/imperator", wantHostPort: "[::1]:443"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := fakeManagement(t)
			ca := newTestClientCA(t, c, clocktesting.NewFakeClock(time.Now()), 0)
			m := testMember(tc.webhookURL)
			cert, err := ensureClientSecret(context.Background(), c, ca, m)
			if err != nil {
				t.Fatal(err)
			}
			if memberOf(cert) != "edge-1" {
				t.Errorf("the certificate names %q, want edge-1", memberOf(cert))
			}
			secret := &corev1.Secret{}
			if err := c.Get(context.Background(), types.NamespacedName{Namespace: "members", Name: "edge-1-secret-webhook-client"}, secret); err != nil {
				t.Fatal(err)
			}
			if secret.Labels[ClientSecretLabel] != "edge-1-secret" || secret.Type != corev1.SecretTypeTLS {
				t.Errorf("labels %v, type %s", secret.Labels, secret.Type)
			}
			if len(secret.OwnerReferences) != 1 || secret.OwnerReferences[0].UID != m.SecretUID {
				t.Errorf("owner references %v: the client Secret does not go with the member's Secret", secret.OwnerReferences)
			}

			dir := t.TempDir()
			for key, value := range secret.Data {
				if err := os.WriteFile(filepath.Join(dir, key), value, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			// As k8s.io/apiserver's webhook authentication loads its
			// kubeConfigFile.
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			rules.ExplicitPath = filepath.Join(dir, ClientKubeconfigKey)
			loaded, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).RawConfig()
			if err != nil {
				t.Fatal(err)
			}
			user, ok := loaded.AuthInfos[tc.wantHostPort]
			if !ok {
				t.Fatalf("no user %q in the kubeconfig (the API server's key for %s): %v", tc.wantHostPort, tc.webhookURL, loaded.AuthInfos)
			}
			pair, err := tls.LoadX509KeyPair(user.ClientCertificate, user.ClientKey)
			if err != nil {
				t.Fatalf("the kubeconfig's certificate files do not load from beside it: %v", err)
			}
			if !pair.Leaf.Equal(cert) {
				t.Error("the kubeconfig's certificate is not the member's")
			}
		})
	}
}

// TestMemberClientSecretIsWrittenOnlyWhenItMustChange: a current Secret is
// left alone (its resourceVersion stays), a certificate of a previous CA is
// issued again, and a Secret of that name the agent did not write is never
// overwritten.
func TestMemberClientSecretIsWrittenOnlyWhenItMustChange(t *testing.T) {
	ctx := context.Background()
	c := fakeManagement(t)
	ca := newTestClientCA(t, c, clocktesting.NewFakeClock(time.Now()), 0)
	m := testMember("https://127.0.0.1:9443")
	first, err := ensureClientSecret(ctx, c, ca, m)
	if err != nil {
		t.Fatal(err)
	}
	key := clientSecretKey(m)
	before := &corev1.Secret{}
	if err := c.Get(ctx, key, before); err != nil {
		t.Fatal(err)
	}
	again, err := ensureClientSecret(ctx, c, ca, m)
	if err != nil {
		t.Fatal(err)
	}
	after := &corev1.Secret{}
	if err := c.Get(ctx, key, after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != before.ResourceVersion || !again.Equal(first) {
		t.Error("a current client Secret was written again")
	}

	// Another CA (as after a rollover): the certificate is issued again.
	other := newTestClientCA(t, fakeManagement(t), clocktesting.NewFakeClock(time.Now()), 0)
	renewed, err := ensureClientSecret(ctx, c, other, m)
	if err != nil {
		t.Fatal(err)
	}
	if renewed.Equal(first) || renewed.CheckSignatureFrom(other.state.Load().signer.Cert) != nil {
		t.Error("a certificate of another CA was kept")
	}

	foreign := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "members", Name: "edge-2-webhook-client"},
		Data:       map[string][]byte{"password": []byte("hunter2")},
	}
	c = fakeManagement(t, foreign)
	m2 := testMember("https://127.0.0.1:9443")
	m2.Name, m2.Secret.Name = "edge-2", "edge-2"
	_, err = ensureClientSecret(ctx, c, ca, m2)
	if err == nil || !strings.Contains(err.Error(), "is not the agent's client Secret") {
		t.Fatalf("err = %v, want a refusal to write over a Secret the agent did not write", err)
	}
	kept := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "members", Name: "edge-2-webhook-client"}, kept); err != nil {
		t.Fatal(err)
	}
	if string(kept.Data["password"]) != "hunter2" || len(kept.Data) != 1 {
		t.Errorf("a Secret the agent did not write was changed: %v", kept.Data)
	}
	if _, err := pki.ParseCertificate(kept.Data[corev1.TLSCertKey]); err == nil {
		t.Error("a certificate was written into a Secret the agent did not write")
	}
}
