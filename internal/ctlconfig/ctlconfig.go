// Package ctlconfig is the imperatorctl configuration file: imperatorctl
// reads it (internal/cli), and `hub client-cert` writes one holding a new
// certificate, so that both use one definition of the format.
package ctlconfig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// Config is the imperatorctl configuration file, shaped like a kubeconfig:
// named contexts, each a hub and the credentials to talk to it.
//
//	current-context: prod
//	contexts:
//	- name: prod
//	  hub: hub.example.com:9443
//	  certificate-authority: /etc/imperator/hub-ca.crt   # or certificate-authority-data (PEM)
//	  client-certificate: ~/.imperator/alice.crt         # or client-certificate-data (PEM)
//	  client-key: ~/.imperator/alice.key                 # or client-key-data (PEM)
//	  server-name: hub.example.com                       # optional TLS name (default: the hub host)
//	  kubeconfig: ~/.kube/config                         # instead of a client certificate: the bearer token
//	  kube-context: hub-admin                            # of this kubeconfig context's user (default: its current)
//
// Relative paths are relative to the file; a leading ~/ is the home directory.
type Config struct {
	CurrentContext string    `json:"current-context,omitempty"`
	Contexts       []Context `json:"contexts,omitempty"`
}

// Context is one hub and its credentials.
type Context struct {
	Name                     string `json:"name"`
	Hub                      string `json:"hub,omitempty"`
	CertificateAuthority     string `json:"certificate-authority,omitempty"`
	CertificateAuthorityData string `json:"certificate-authority-data,omitempty"`
	ClientCertificate        string `json:"client-certificate,omitempty"`
	ClientCertificateData    string `json:"client-certificate-data,omitempty"`
	ClientKey                string `json:"client-key,omitempty"`
	ClientKeyData            string `json:"client-key-data,omitempty"`
	ServerName               string `json:"server-name,omitempty"`
	// Kubeconfig, instead of a client certificate, authenticates with the
	// bearer token its user presents to the hub cluster's API server
	// (token, token file or exec plugin); KubeContext names its context.
	Kubeconfig  string `json:"kubeconfig,omitempty"`
	KubeContext string `json:"kube-context,omitempty"`
}

// Load reads the configuration file at path and resolves its relative and
// ~/ paths; a missing file is an empty configuration unless the path was
// given explicitly.
func Load(path string, explicit bool) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && !explicit {
			return &Config{}, nil
		}
		return nil, fmt.Errorf("reading configuration %s: %w", path, err)
	}
	var cfg Config
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return nil, fmt.Errorf("reading configuration %s: %w", path, err)
	}
	base := filepath.Dir(path)
	for i := range cfg.Contexts {
		c := &cfg.Contexts[i]
		for _, p := range []*string{&c.CertificateAuthority, &c.ClientCertificate, &c.ClientKey, &c.Kubeconfig} {
			switch {
			case strings.HasPrefix(*p, "~/"):
				if home, err := os.UserHomeDir(); err == nil {
					*p = filepath.Join(home, (*p)[2:])
				}
			case *p != "" && !filepath.IsAbs(*p):
				*p = filepath.Join(base, *p)
			}
		}
	}
	return &cfg, nil
}

// Lookup returns the named context, the current one when name is empty,
// or an empty context when the file has none.
func (c *Config) Lookup(name string) (Context, error) {
	if name == "" {
		name = c.CurrentContext
	}
	if name == "" {
		if len(c.Contexts) == 1 {
			return c.Contexts[0], nil
		}
		return Context{}, nil
	}
	for _, ctx := range c.Contexts {
		if ctx.Name == name {
			return ctx, nil
		}
	}
	return Context{}, fmt.Errorf("context %q is not in the configuration file", name)
}
