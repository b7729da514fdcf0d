package cli

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/imperator-federation/imperator/internal/ctlconfig"
)

// connection is a resolved context: where the hub is and the PEM material.
type connection struct {
	hub        string
	serverName string
	caPEM      []byte
	certPEM    []byte
	keyPEM     []byte
	// kubeconfig and kubeContext, instead of certPEM and keyPEM: the
	// bearer token of the kubeconfig context's user.
	kubeconfig, kubeContext string
}

// overrides are the connection settings given as flags or environment.
type overrides struct {
	hub, ca, cert, key, serverName string
	kubeconfig, kubeContext        string
}

// resolve merges ctx and the overrides (which win) and reads the files.
func resolve(ctx ctlconfig.Context, o overrides) (*connection, error) {
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
	if conn.kubeconfig = pick(o.kubeconfig, ctx.Kubeconfig); conn.kubeconfig != "" {
		if o.cert != "" || o.key != "" {
			return nil, errors.New("--kubeconfig and --cert/--key: authenticate with one of them, not both")
		}
		conn.kubeContext = pick(o.kubeContext, ctx.KubeContext)
		return conn, nil
	}
	if o.kubeContext != "" {
		return nil, errors.New("--kube-context: needs --kubeconfig (or kubeconfig in the configuration file)")
	}
	if conn.certPEM, err = read("client certificate", certPath, ctx.ClientCertificateData); err != nil {
		return nil, err
	}
	if conn.keyPEM, err = read("client key", keyPath, ctx.ClientKeyData); err != nil {
		return nil, err
	}
	if len(conn.certPEM) == 0 || len(conn.keyPEM) == 0 {
		return nil, errors.New("no credentials: set --cert and --key (client-certificate and client-key in the configuration file), or --kubeconfig (kubeconfig) to use your identity of the hub cluster")
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
