package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"embed"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/imperator-federation/imperator/internal/pki"
)

// certValidity is the lifetime of every certificate of a cluster.
const certValidity = 24 * time.Hour * 365

// stages are the kwok Stages the harness runs with.
//
//go:embed stages/*.yaml
var stages embed.FS

// writeCertificates creates the cluster CA, the API server's serving
// certificate (for advertise too, when set), the admin client certificate and
// the service-account key.
func (c *Cluster) writeCertificates(advertise string) error {
	ca, err := pki.NewCA(c.Name+"-ca", certValidity)
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	c.CA = ca
	caKey, err := ca.KeyPEM()
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	hosts := []string{"127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "10.96.0.1"}
	if advertise != "" {
		hosts = append(hosts, advertise)
	}
	serving, servingKey, err := ca.IssueServer("kube-apiserver", hosts, certValidity)
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	admin, adminKey, err := ca.IssueClient("admin", []string{"system:masters"}, certValidity)
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	kubeletClient, kubeletClientKey, err := ca.IssueClient("kube-apiserver-kubelet-client", nil, certValidity)
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	// The API server reads the service-account key as a public key too, which
	// it only accepts in the SEC 1 "EC PRIVATE KEY" form, not PKCS#8.
	sa, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("harness: generating service-account key: %w", err)
	}
	saDER, err := x509.MarshalECPrivateKey(sa)
	if err != nil {
		return fmt.Errorf("harness: encoding service-account key: %w", err)
	}
	saKey := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER})
	for name, data := range map[string][]byte{
		"ca.crt": ca.CertPEM, "ca.key": caKey,
		"apiserver.crt": serving, "apiserver.key": servingKey,
		"admin.crt": admin, "admin.key": adminKey,
		"apiserver-kubelet-client.crt": kubeletClient, "apiserver-kubelet-client.key": kubeletClientKey,
		"sa.key": saKey,
	} {
		if err := os.WriteFile(filepath.Join(c.Dir, name), data, 0o600); err != nil {
			return fmt.Errorf("harness: writing %s: %w", name, err)
		}
	}
	return nil
}

func (c *Cluster) writeKubeconfig() error {
	c.KubeconfigPath = filepath.Join(c.Dir, "kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[c.Name] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthority: c.Config.CAFile}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificate: c.Config.CertFile, ClientKey: c.Config.KeyFile}
	cfg.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: "admin"}
	cfg.CurrentContext = c.Name
	if err := clientcmd.WriteToFile(*cfg, c.KubeconfigPath); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	return nil
}

// writeKwokConfig writes kwok's configuration into one file: the embedded
// Stages the harness runs with and, when parallelism is set, a
// KwokConfiguration with it.
func writeKwokConfig(path string, parallelism uint) error {
	entries, err := stages.ReadDir("stages")
	if err != nil {
		return fmt.Errorf("reading embedded kwok stages: %w", err)
	}
	var all []byte
	for _, e := range entries {
		data, err := stages.ReadFile("stages/" + e.Name())
		if err != nil {
			return fmt.Errorf("reading embedded kwok stage %s: %w", e.Name(), err)
		}
		all = append(all, "---\n"...)
		all = append(all, data...)
	}
	if parallelism > 0 {
		// kwok defaults its options only when no KwokConfiguration is
		// given: the others keep their defaults here.
		all = fmt.Appendf(all, `---
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  podPlayStageParallelism: %[1]d
  nodePlayStageParallelism: %[1]d
  nodeLeaseParallelism: %[1]d
  podsOnNodeSyncParallelism: 1
  enablePodsOnNodeSyncListPager: true
`, parallelism)
	}
	if err := os.WriteFile(path, all, 0o644); err != nil {
		return fmt.Errorf("writing kwok stages: %w", err)
	}
	return nil
}
