package kueue

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/repo"
)

// Namespace is Kueue's own namespace.
const Namespace = "kueue-system"

// readyTimeout bounds Kueue's start: its caches sync over a dozen kinds.
const readyTimeout = 2 * time.Minute

// Kueue is a running Kueue manager.
type Kueue struct {
	proc *harness.Process
}

// Binary returns the path of Kueue's manager, built into the tool cache
// when it is not there yet (minutes, once per hack/tools/kueue go.sum).
func Binary() (string, error) { return repo.Tool("kueue") }

// CRDDir is the directory of Kueue's CRDs in the module the binary is
// built from.
func CRDDir() (string, error) {
	root, err := repo.Root()
	if err != nil {
		return "", err
	}
	// go mod download, not go list -m: on a machine whose module cache
	// does not hold the module yet (a fresh one, before the Kueue manager
	// was built), go list prints no directory.
	cmd := exec.Command("go", "mod", "download", "-json", "sigs.k8s.io/kueue")
	cmd.Dir = filepath.Join(root, "hack", "tools", "kueue")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("finding the sigs.k8s.io/kueue module: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	var module struct{ Dir, Error string }
	if err := json.Unmarshal(out, &module); err != nil {
		return "", fmt.Errorf("finding the sigs.k8s.io/kueue module: %w", err)
	}
	if module.Dir == "" {
		return "", fmt.Errorf("finding the sigs.k8s.io/kueue module: not downloaded: %s", module.Error)
	}
	return filepath.Join(module.Dir, "config", "components", "crd", "bases"), nil
}

// InstallCRDs creates the CRDs of the YAML files of dirs (those that exist
// already are left as they are) and waits until they are established.
func InstallCRDs(ctx context.Context, c client.Client, dirs ...string) error {
	var names []string
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil {
			return err
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.UnmarshalStrict(data, crd); err != nil || crd.Kind != "CustomResourceDefinition" {
				continue // kustomization.yaml and the like
			}
			if err := c.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
			}
			names = append(names, crd.Name)
		}
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			established := false
			for _, cond := range crd.Status.Conditions {
				established = established || (cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue)
			}
			if !established {
				return false, nil
			}
		}
		return true, nil
	})
}

// Options change Kueue's configuration.
type Options struct {
	// DispatcherName, when set, is MultiKueue's multiKueue.dispatcherName:
	// an external dispatcher chooses the worker clusters.
	DispatcherName string
	// FeatureGates are set in the configuration's featureGates.
	FeatureGates map[string]bool
	// Name names the process and its log (<Name>.log); "kueue" when empty.
	Name string
}

// Start installs Kueue's CRDs and namespace in the cluster of config (c
// must know apiextensions/v1) and starts Kueue against it, with its files
// and log (kueue.log) in dir. The ProvisioningRequest CRD must be served
// already: Kueue sets up its ProvisioningRequest admission check only if it
// is there when it starts.
func Start(ctx context.Context, config *rest.Config, c client.Client, dir string) (*Kueue, error) {
	return StartWith(ctx, config, c, dir, Options{})
}

// StartWith is Start with opts.
func StartWith(ctx context.Context, config *rest.Config, c client.Client, dir string, opts Options) (_ *Kueue, err error) {
	if opts.Name == "" {
		opts.Name = "kueue"
	}
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	crds, err := CRDDir()
	if err != nil {
		return nil, err
	}
	if err := InstallCRDs(ctx, c, crds); err != nil {
		return nil, fmt.Errorf("installing Kueue's CRDs: %w", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating namespace %s: %w", Namespace, err)
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	webhookCerts := filepath.Join(dir, "webhook-certs")
	etcUpper, etcWork := filepath.Join(dir, "etc", "upper"), filepath.Join(dir, "etc", "work")
	metricsCerts := filepath.Join(etcUpper, "kueue", "metrics", "certs")
	for _, d := range []string{webhookCerts, metricsCerts, etcWork} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := writeServingCert(webhookCerts, metricsCerts); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kueue.kubeconfig")
	if err := WriteKubeconfig(kubeconfig, config); err != nil {
		return nil, err
	}
	configFile := filepath.Join(dir, "kueue-config.yaml")
	if err := os.WriteFile(configFile, []byte(configuration(ports, webhookCerts, opts)), 0o644); err != nil {
		return nil, err
	}
	// /etc is overlaid in the process's own mount namespace only.
	script := `mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc && shift 2 && exec "$@"`
	proc, err := harness.StartProcess(opts.Name, "unshare", []string{"--mount", "--propagation", "private", "sh", "-c", script, "sh",
		etcUpper, etcWork, bin, "--config", configFile, "--zap-log-level", "2"}, dir, "KUBECONFIG="+kubeconfig)
	if err != nil {
		return nil, err
	}
	k := &Kueue{proc: proc}
	if err := proc.WaitReady(ctx, "http://127.0.0.1:"+strconv.Itoa(ports[0])+"/readyz", readyTimeout); err != nil {
		return nil, errors.Join(fmt.Errorf("waiting for Kueue to be ready: %w\n%s", err, proc.Tail(30)), k.Stop())
	}
	return k, nil
}

// Stop stops Kueue.
func (k *Kueue) Stop() error { return k.proc.Stop() }

// Logs returns the last lines of Kueue's log.
func (k *Kueue) Logs(lines int) string { return k.proc.Tail(lines) }

// configuration is Kueue's configuration: health, metrics and webhook
// servers on ports (in that order) of loopback.
func configuration(ports []int, certDir string, opts Options) string {
	gates := map[string]bool{"VisibilityOnDemand": false}
	for name, on := range opts.FeatureGates {
		gates[name] = on
	}
	names := make([]string, 0, len(gates))
	for name := range gates {
		names = append(names, name)
	}
	sort.Strings(names)
	var extra strings.Builder
	extra.WriteString("featureGates:\n")
	for _, name := range names {
		fmt.Fprintf(&extra, "  %s: %t\n", name, gates[name])
	}
	if opts.DispatcherName != "" {
		fmt.Fprintf(&extra, "multiKueue:\n  dispatcherName: %q\n", opts.DispatcherName)
	}
	return fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: %s
health:
  healthProbeBindAddress: 127.0.0.1:%d
metrics:
  bindAddress: 127.0.0.1:%d
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
integrations:
  frameworks: ["batch/job"]
`, Namespace, ports[0], ports[1], ports[2], certDir) + extra.String()
}

// freePorts returns n ports of loopback nobody listens on.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer func() { _ = l.Close() }()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// writeServingCert writes a self-signed certificate for 127.0.0.1 as
// tls.crt and tls.key into each of dirs.
func writeServingCert(dirs ...string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "kueue"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("creating Kueue's serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	for _, dir := range dirs {
		if err := errors.Join(
			os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644),
			os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600),
		); err != nil {
			return err
		}
	}
	return nil
}

// WriteKubeconfig writes a kubeconfig for config (certificate, token or
// basic credentials, as the harness gives them).
func WriteKubeconfig(path string, config *rest.Config) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = &clientcmdapi.Cluster{Server: config.Host, CertificateAuthorityData: config.CAData,
		CertificateAuthority: config.CAFile, InsecureSkipTLSVerify: config.Insecure}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificateData: config.CertData, ClientKeyData: config.KeyData,
		ClientCertificate: config.CertFile, ClientKey: config.KeyFile, Token: config.BearerToken, TokenFile: config.BearerTokenFile,
		Username: config.Username, Password: config.Password}
	cfg.Contexts["kueue"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "user"}
	cfg.CurrentContext = "kueue"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing Kueue's kubeconfig: %w", err)
	}
	return nil
}

// WorkerKubeconfig is a kubeconfig for the cluster of config that Kueue's
// MultiKueue accepts in a MultiKueueCluster's Secret: certificate authority
// and client credentials inline (Kueue v0.17.0 refuses file paths), the
// server an IP address or a DNS name.
func WorkerKubeconfig(config *rest.Config) ([]byte, error) {
	load := func(data []byte, path string) ([]byte, error) {
		if len(data) > 0 || path == "" {
			return data, nil
		}
		return os.ReadFile(path)
	}
	ca, err := load(config.CAData, config.CAFile)
	if err != nil {
		return nil, fmt.Errorf("reading the worker's CA: %w", err)
	}
	cert, err := load(config.CertData, config.CertFile)
	if err != nil {
		return nil, fmt.Errorf("reading the worker's client certificate: %w", err)
	}
	key, err := load(config.KeyData, config.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("reading the worker's client key: %w", err)
	}
	if len(ca) == 0 || (len(cert) == 0 && config.BearerToken == "") {
		return nil, errors.New("the worker's configuration has no CA or no client certificate or token")
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["worker"] = &clientcmdapi.Cluster{Server: config.Host, CertificateAuthorityData: ca}
	cfg.AuthInfos["kueue"] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key, Token: config.BearerToken}
	cfg.Contexts["worker"] = &clientcmdapi.Context{Cluster: "worker", AuthInfo: "kueue"}
	cfg.CurrentContext = "worker"
	return clientcmd.Write(*cfg)
}
