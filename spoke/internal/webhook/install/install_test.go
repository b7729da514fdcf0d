package install

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

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
