package cli

import (
	"errors"
	"fmt"
	"net"
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
}

// connection is a resolved context: where the hub is and the PEM material.
type connection struct {
	hub        string
	serverName string
	caPEM      []byte
	certPEM    []byte
	keyPEM     []byte
}

// loadConfig reads path; a missing file is an empty configuration unless
// the path was given explicitly.
func loadConfig(path string, explicit bool) (*Config, error) {
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
		for _, p := range []*string{&c.CertificateAuthority, &c.ClientCertificate, &c.ClientKey} {
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

// context returns the named context, the current one when name is empty,
// or an empty context when the file has none.
func (c *Config) context(name string) (Context, error) {
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

// overrides are the connection settings given as flags or environment.
type overrides struct {
	hub, ca, cert, key, serverName string
}

// resolve merges ctx and the overrides (which win) and reads the files.
func resolve(ctx Context, o overrides) (*connection, error) {
	pick := func(flag, file string) string {
		if flag != "" {
			return flag
		}
		return file
	}
	conn := &connection{hub: pick(o.hub, ctx.Hub), serverName: pick(o.serverName, ctx.ServerName)}
	if conn.hub == "" {
		return nil, errors.New("no hub address: set --hub, $IMPERATOR_HUB or hub: in the configuration file")
	}
	host, _, err := net.SplitHostPort(conn.hub)
	if err != nil {
		return nil, fmt.Errorf("hub address %q: want host:port: %w", conn.hub, err)
	}
	if conn.serverName == "" {
		conn.serverName = host
	}
	read := func(what, path, data string) ([]byte, error) {
		if path != "" {
			b, err := os.ReadFile(path)
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", what, err)
			}
			return b, nil
		}
		return []byte(data), nil
	}
	if conn.caPEM, err = read("hub CA", pick(o.ca, ctx.CertificateAuthority), ctx.CertificateAuthorityData); err != nil {
		return nil, err
	}
	if len(conn.caPEM) == 0 {
		return nil, errors.New("no hub CA: set --ca or certificate-authority in the configuration file (`hub ca` prints it)")
	}
	certPath, keyPath := pick(o.cert, ctx.ClientCertificate), pick(o.key, ctx.ClientKey)
	if conn.certPEM, err = read("client certificate", certPath, ctx.ClientCertificateData); err != nil {
		return nil, err
	}
	if conn.keyPEM, err = read("client key", keyPath, ctx.ClientKeyData); err != nil {
		return nil, err
	}
	if len(conn.certPEM) == 0 || len(conn.keyPEM) == 0 {
		return nil, errors.New("no client certificate: set --cert and --key, or client-certificate and client-key in the configuration file")
	}
	return conn, nil
}

// defaultConfigPath is $IMPERATOR_CONFIG, else ~/.imperator/config.
func defaultConfigPath(getenv func(string) string) (string, bool) {
	if p := getenv("IMPERATOR_CONFIG"); p != "" {
		return p, true
	}
	home := getenv("HOME")
	if home == "" {
		return "", false
	}
	return filepath.Join(home, ".imperator", "config"), false
}
