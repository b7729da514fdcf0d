package main

import (
	"os"
	"path/filepath"
	"testing"
)

// A hub started with --kubeconfig is not held to client-go's default 5
// requests a second per resource, which would bound how fast it takes in a
// new fleet.
func TestHubWithAKubeconfigIsNotRateLimitedClientSide(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kubeconfig := `apiVersion: v1
kind: Config
clusters:
- name: hub
  cluster:
    server: https://127.0.0.1:6443
contexts:
- name: hub
  context:
    cluster: hub
    user: admin
current-context: hub
users:
- name: admin
  user:
    token: t
`
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := restConfigFor(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QPS >= 0 {
		t.Errorf("QPS %v with --kubeconfig, want no client-side limit (negative), as in-cluster", cfg.QPS)
	}
}
