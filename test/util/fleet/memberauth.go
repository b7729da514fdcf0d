package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The member's client Secret, as spoke/internal/hosted writes it beside the
// member's Secret (docs/hosted.md).
const (
	memberClientSecretSuffix = "-webhook-client"
	memberClientKubeconfig   = "kubeconfig"
)

// MemberAdmission is a hosted member's API server side of the agent's
// webhook authentication, set up as docs/hosted.md tells an
// operator to: an admission configuration whose ValidatingAdmissionWebhook
// and MutatingAdmissionWebhook plugins take the credentials of the agent's
// webhooks from the kubeconfig of a directory where the member's client
// Secret is mounted (each key a file, as a Secret volume has them).
type MemberAdmission struct {
	// Dir is where the client Secret is mounted.
	Dir string
}

// NewMemberAdmission writes, under dir, an admission configuration and the
// kubeconfig for the agent's webhooks at webhookHostPort (the host:port of
// the member's webhook URL), and returns the kube-apiserver flags that use
// them. The API server reads the kubeconfig once, at its start, and the
// certificate files it names at every new connection: they come with Mount.
func NewMemberAdmission(dir, webhookHostPort string) (*MemberAdmission, []string, error) {
	mount := filepath.Join(dir, "imperator-webhook-client")
	if err := os.MkdirAll(mount, 0o700); err != nil {
		return nil, nil, fmt.Errorf("fleet: %w", err)
	}
	// What the agent writes into the client Secret's kubeconfig, which
	// Mount writes over it.
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.AuthInfos[webhookHostPort] = &clientcmdapi.AuthInfo{ClientCertificate: corev1.TLSCertKey, ClientKey: corev1.TLSPrivateKeyKey}
	data, err := clientcmd.Write(*kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("fleet: %w", err)
	}
	kubeconfigPath := filepath.Join(mount, memberClientKubeconfig)
	if err := writeFileAtomically(kubeconfigPath, data); err != nil {
		return nil, nil, err
	}
	plugin := func(name string) string {
		return fmt.Sprintf(`- name: %s
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %q
`, name, kubeconfigPath)
	}
	config := "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n" +
		plugin("ValidatingAdmissionWebhook") + plugin("MutatingAdmissionWebhook")
	configPath := filepath.Join(dir, "admission-configuration.yaml")
	if err := writeFileAtomically(configPath, []byte(config)); err != nil {
		return nil, nil, err
	}
	return &MemberAdmission{Dir: mount}, []string{"--admission-control-config-file=" + configPath}, nil
}

// Mount waits until the hosted agent has written the client Secret of the
// member Secret memberSecret (in namespace of the management cluster c), and
// writes its keys into Dir.
func (a *MemberAdmission) Mount(ctx context.Context, c kubernetes.Interface, namespace, memberSecret string, timeout time.Duration) error {
	name := memberSecret + memberClientSecretSuffix
	var secret *corev1.Secret
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		s, err := c.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil // not written yet, or the API server is busy
		}
		secret = s
		return len(s.Data[corev1.TLSCertKey]) > 0 && len(s.Data[corev1.TLSPrivateKeyKey]) > 0, nil
	})
	if err != nil {
		return fmt.Errorf("fleet: waiting for the client Secret %s/%s of member %s: %w", namespace, name, memberSecret, err)
	}
	for key, value := range secret.Data {
		if err := writeFileAtomically(filepath.Join(a.Dir, key), value); err != nil {
			return err
		}
	}
	return nil
}

// writeFileAtomically replaces path with data: a reader sees the old file
// or the new one, never half of it.
func writeFileAtomically(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	return nil
}
