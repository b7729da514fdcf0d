package ctlconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

func TestConfigPathsResolveAgainstTheFileOrTheHomeDirectory(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	dir := t.TempDir()
	path := filepath.Join(dir, "config")
	content := "current-context: prod\ncontexts:\n- name: prod\n  hub: hub:9443\n" +
		"  certificate-authority: ca.crt\n  client-certificate: ~/.imperator/alice.crt\n  client-key: /etc/alice.key\n"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path, true)
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	got := cfg.Contexts[0]
	want := []string{filepath.Join(dir, "ca.crt"), filepath.Join(home, ".imperator", "alice.crt"), "/etc/alice.key"}
	if diff := cmp.Diff(want, []string{got.CertificateAuthority, got.ClientCertificate, got.ClientKey}); diff != "" {
		t.Errorf("resolved paths (-want +got):\n%s", diff)
	}
}

// hub client-cert prints a Config; imperatorctl must read it back as written
// (Load is strict: a field it does not know is an error).
func TestAConfigWrittenByTheHubLoadsInImperatorctl(t *testing.T) {
	want := Config{CurrentContext: "alice", Contexts: []Context{{
		Name: "alice", Hub: "hub.example.com:9443",
		CertificateAuthorityData: "ca-pem", ClientCertificateData: "cert-pem", ClientKeyData: "key-pem",
	}}}
	out, err := yaml.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path, true)
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	if diff := cmp.Diff(&want, got); diff != "" {
		t.Errorf("loaded configuration (-want +got):\n%s", diff)
	}
}

func TestLoadOfAMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent")
	if cfg, err := Load(path, false); err != nil || len(cfg.Contexts) != 0 {
		t.Errorf("Load(default path) = %v, %v; want an empty configuration", cfg, err)
	}
	if _, err := Load(path, true); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("Load(explicit path) = %v; want an error naming %s", err, path)
	}
}
