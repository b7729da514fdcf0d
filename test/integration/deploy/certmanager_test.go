package deploy_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/imperator-federation/imperator/internal/pki"
	"github.com/imperator-federation/imperator/test/util/harness"
)

// The spoke's cert-manager mode (deploy/overlays/spoke-cert-manager) with the
// real binary. cert-manager itself is not installed: the spec writes the files
// of the Certificate's Secret into the cert dir and writes the CA bundle the
// way cert-manager's cainjector does: an update under its own field manager.
var _ = Describe("The spoke agent with a cert-manager Certificate", func() {
	const (
		certificate = "imperator-webhook"
		mutating    = "imperator-cert-manager-injector"
		validating  = "imperator-cert-manager-validator"
		certSecret  = "imperator-cert-manager-test-cert"
	)

	It("serves the mounted certificate, leaves the CA bundle to the cainjector and keeps the injected bundle across restarts", func(ctx context.Context) {
		kube := cluster.Kubernetes()
		// The agent's CRDs and namespace, as the other specs apply them.
		objs, err := render(ctx, filepath.Join(root, "deploy", "spoke"))
		Expect(err).NotTo(HaveOccurred())
		_, err = apply(ctx, ofKind(objs, "CustomResourceDefinition", "Namespace"))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx context.Context) {
			for _, err := range []error{
				kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, mutating, metav1.DeleteOptions{}),
				kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, validating, metav1.DeleteOptions{}),
				kube.CoreV1().Secrets(namespace).Delete(ctx, certSecret, metav1.DeleteOptions{}),
			} {
				if !apierrors.IsNotFound(err) {
					Expect(err).NotTo(HaveOccurred())
				}
			}
		})

		ports, err := harness.FreePorts(2)
		Expect(err).NotTo(HaveOccurred())
		webhookPort, healthPort := ports[0], ports[1]
		health := "127.0.0.1:" + strconv.Itoa(healthPort)
		args := func(extra ...string) []string {
			return append([]string{
				"--kubeconfig=" + cluster.KubeconfigPath,
				"--namespace=" + namespace,
				"--leader-elect=false",
				"--webhook-bind-address=127.0.0.1",
				fmt.Sprintf("--webhook-port=%d", webhookPort),
				fmt.Sprintf("--webhook-url=https://127.0.0.1:%d", webhookPort),
				"--health-probe-bind-address=" + health,
				"--metrics-bind-address=0",
				"--mutating-webhook-configuration=" + mutating,
				"--validating-webhook-configuration=" + validating,
				"--webhook-cert-secret=" + certSecret,
			}, extra...)
		}
		bundles := func(ctx context.Context) ([][]byte, map[string]string, error) {
			m, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, mutating, metav1.GetOptions{})
			if err != nil {
				return nil, nil, err
			}
			v, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, validating, metav1.GetOptions{})
			if err != nil {
				return nil, nil, err
			}
			var out [][]byte
			for _, w := range m.Webhooks {
				out = append(out, w.ClientConfig.CABundle)
			}
			for _, w := range v.Webhooks {
				out = append(out, w.ClientConfig.CABundle)
			}
			annotations := map[string]string{}
			for k, val := range m.Annotations {
				annotations["mutating "+k] = val
			}
			for k, val := range v.Annotations {
				annotations["validating "+k] = val
			}
			return out, annotations, nil
		}
		waitReady := func(p *harness.Process) {
			GinkgoHelper()
			Eventually(func(ctx context.Context) error {
				if !p.Running() {
					return StopTrying("the agent exited")
				}
				return ready(ctx, health)
			}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
		}

		By("running the agent in the default mode first: its applies own the CA bundle of its own certificate")
		agent := start("spoke-default-certs", "spoke", args()...)
		waitReady(agent)
		got, annotations, err := bundles(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(HaveEach(Not(BeEmpty())))
		Expect(annotations).NotTo(HaveKey(HaveSuffix(injectCAFrom)))
		Expect(agent.Stop()).To(Succeed())

		By("switching to cert-manager mode with the Certificate's Secret in the cert dir")
		ca, err := pki.NewCA("cert-manager test CA", time.Hour)
		Expect(err).NotTo(HaveOccurred())
		certPEM, keyPEM, err := ca.IssueServer("imperator-webhook", []string{"127.0.0.1"}, time.Hour)
		Expect(err).NotTo(HaveOccurred())
		certDir := GinkgoT().TempDir()
		Expect(os.WriteFile(filepath.Join(certDir, "tls.crt"), certPEM, 0o600)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(certDir, "tls.key"), keyPEM, 0o600)).To(Succeed())
		cmArgs := args("--webhook-cert-manager-certificate="+certificate, "--webhook-cert-dir="+certDir)
		agent = start("spoke-cert-manager", "spoke", cmArgs...)
		waitReady(agent)

		By("serving the certificate from the cert dir")
		pool := x509.NewCertPool()
		Expect(pool.AppendCertsFromPEM(ca.CertPEM)).To(BeTrue())
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", fmt.Sprintf("127.0.0.1:%d", webhookPort),
			&tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
		Expect(err).NotTo(HaveOccurred())
		Expect(conn.Close()).To(Succeed())

		By("dropping the bundle its earlier applies owned, and asking the cainjector for the Certificate's CA")
		got, annotations, err = bundles(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(got).NotTo(BeEmpty())
		Expect(got).To(HaveEach(BeEmpty()))
		Expect(annotations).To(Equal(map[string]string{
			"mutating " + injectCAFrom:   namespace + "/" + certificate,
			"validating " + injectCAFrom: namespace + "/" + certificate,
		}))

		By("keeping the bundle the cainjector writes when the agent applies again")
		injectAsCAInjector(ctx, mutating, validating, ca.CertPEM)
		Expect(agent.Stop()).To(Succeed())
		agent = start("spoke-cert-manager-restarted", "spoke", cmArgs...)
		waitReady(agent)
		got, _, err = bundles(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(HaveEach(Equal(ca.CertPEM)))
	}, NodeTimeout(4*time.Minute))
})

// injectCAFrom is the annotation cert-manager's cainjector acts on.
const injectCAFrom = "cert-manager.io/inject-ca-from"

// injectAsCAInjector writes caBundle into every webhook of the two
// configurations with an update under a field manager of its own, as
// cert-manager's cainjector does.
func injectAsCAInjector(ctx context.Context, mutating, validating string, caBundle []byte) {
	GinkgoHelper()
	kube := cluster.Kubernetes()
	m, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, mutating, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	for i := range m.Webhooks {
		m.Webhooks[i].ClientConfig.CABundle = caBundle
	}
	_, err = kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{FieldManager: "cert-manager-cainjector"})
	Expect(err).NotTo(HaveOccurred())
	v, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, validating, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	for i := range v.Webhooks {
		v.Webhooks[i].ClientConfig.CABundle = caBundle
	}
	_, err = kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{FieldManager: "cert-manager-cainjector"})
	Expect(err).NotTo(HaveOccurred())
}
