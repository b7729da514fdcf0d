package machinevalidator

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

func TestValidatingWebhookConfiguration(t *testing.T) {
	cfg := ValidatingWebhookConfiguration("imperator-machine-validator", admissionregistrationv1.WebhookClientConfig{
		Service: &admissionregistrationv1.ServiceReference{Namespace: "imperator-system", Name: "imperator-webhook"},
	})
	if cfg.Name != "imperator-machine-validator" || len(cfg.Webhooks) != 1 {
		t.Fatalf("configuration %q with %d webhooks, want imperator-machine-validator with 1", cfg.Name, len(cfg.Webhooks))
	}
	if got := ptr.Deref(cfg.Webhooks[0].ClientConfig.Service.Path, ""); got != WebhookPath {
		t.Errorf("service path = %q, want %q", got, WebhookPath)
	}

	// The +kubebuilder:webhook marker generates the manifest of
	// deploy/spoke/webhook; both registrations must send the same requests.
	generated := generatedWebhook(t)
	ignore := []cmp.Option{
		cmpopts.IgnoreFields(admissionregistrationv1.ValidatingWebhook{}, "ClientConfig"),
		cmpopts.IgnoreFields(admissionregistrationv1.Rule{}, "Scope"),
	}
	if diff := cmp.Diff(generated, cfg.Webhooks[0], ignore...); diff != "" {
		t.Errorf("ValidatingWebhookConfiguration() differs from the generated manifest (-generated +built):\n%s", diff)
	}
}

func generatedWebhook(t *testing.T) admissionregistrationv1.ValidatingWebhook {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "deploy", "spoke", "webhook", "manifests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := yaml.Unmarshal(doc, cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.Kind != "ValidatingWebhookConfiguration" {
			continue
		}
		for _, wh := range cfg.Webhooks {
			if wh.Name == WebhookName {
				return wh
			}
		}
	}
	t.Fatalf("deploy/spoke/webhook/manifests.yaml has no webhook %s", WebhookName)
	return admissionregistrationv1.ValidatingWebhook{}
}
