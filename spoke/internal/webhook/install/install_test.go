package install

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/imperator-federation/imperator/internal/schemes"
	"github.com/imperator-federation/imperator/test/util/repo"
)

func TestClientConfigPointsTheAPIServerAtTheWebhook(t *testing.T) {
	ca := []byte("ca")
	cases := map[string]struct {
		target  Target
		want    admissionregistrationv1.WebhookClientConfig
		wantErr string
	}{
		"url joins the path": {
			target: Target{URL: "https://127.0.0.1:9443/"},
			want:   admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:9443/mutate-v1-pod"), CABundle: ca},
		},
		"service with port and path": {
			target: Target{ServiceNamespace: "imperator-system", ServiceName: "imperator-webhook", ServicePort: 443},
			want: admissionregistrationv1.WebhookClientConfig{
				Service: &admissionregistrationv1.ServiceReference{
					Namespace: "imperator-system", Name: "imperator-webhook",
					Path: ptr.To("/mutate-v1-pod"), Port: ptr.To[int32](443),
				},
				CABundle: ca,
			},
		},
		"plain http url is refused": {target: Target{URL: "http://127.0.0.1:9443"}, wantErr: "https"},
		"no url and no service":     {target: Target{}, wantErr: "namespace and name are required"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := tc.target.ClientConfig("/mutate-v1-pod", ca)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ClientConfig() error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ClientConfig() error = %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ClientConfig() (-want +got):\n%s", diff)
			}
		})
	}
}

// deploy/spoke ships the configurations the code builds; a change to either
// that is not regenerated would install webhooks the agent does not serve.
func TestShippedWebhookConfigurationsMatchTheCode(t *testing.T) {
	want, err := Manifests()
	if err != nil {
		t.Fatal(err)
	}
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "deploy", "spoke", "webhook", "manifests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("deploy/spoke/webhook/manifests.yaml is stale, run make generate (-want +got):\n%s", diff)
	}
}

// The agent's replicas put the CA bundle into the shipped configurations:
// every webhook of both gets it, a configuration not installed yet is
// skipped (and tried again at the next check), and Carry tells whether the
// API server would trust a CA through every webhook.
func TestCABundlesReachEveryWebhook(t *testing.T) {
	scheme, err := schemes.Spoke()
	if err != nil {
		t.Fatal(err)
	}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "imperator-pod-injector"},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{{Name: "a.example.com"}, {Name: "b.example.com"}},
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "imperator-machine-validator"},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "c.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: []byte("old-ca\n")}}},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(mutating, validating).Build()
	bundles := &CABundles{Client: c, Mutating: []string{mutating.Name, "not-installed"}, Validating: []string{validating.Name}}
	ctx := context.Background()

	if carried, err := bundles.Carry(ctx, []byte("new-ca")); err != nil || carried {
		t.Fatalf("Carry(new-ca) before Inject = %v, %v; want false, nil", carried, err)
	}
	if err := bundles.Inject(ctx, []byte("new-ca\nold-ca\n")); err != nil {
		t.Fatalf("Inject() error = %v", err)
	}
	if carried, err := bundles.Carry(ctx, []byte("new-ca\n")); err != nil || !carried {
		t.Fatalf("Carry(new-ca) after Inject = %v, %v; want true, nil", carried, err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(mutating), mutating); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(validating), validating); err != nil {
		t.Fatal(err)
	}
	got := []string{string(mutating.Webhooks[0].ClientConfig.CABundle), string(mutating.Webhooks[1].ClientConfig.CABundle),
		string(validating.Webhooks[0].ClientConfig.CABundle)}
	want := []string{"new-ca\nold-ca\n", "new-ca\nold-ca\n", "new-ca\nold-ca\n"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CA bundles of the webhooks (-want +got):\n%s", diff)
	}
}
