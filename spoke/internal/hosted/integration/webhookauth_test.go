package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/hosted"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/machinevalidator"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/podinjector"
)

// guestOf is a guest of team-alpha's compute-xlarge in namespace ns.
func guestOf(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			imperatorv1alpha1.PodRoleKey:      string(imperatorv1alpha1.PodRoleGuest),
			imperatorv1alpha1.MachineGroupKey: "team-alpha",
			imperatorv1alpha1.MachineTypeKey:  xlarge,
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
}

// guestReview is a made-up AdmissionReview of the creation in ns of a guest
// of team-alpha asking for a machine type nobody offers, as someone who
// reached the agent's port could send it to learn what team-alpha offers.
func guestReview(ns string) string {
	return fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"made-up","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},"namespace":%q,"operation":"CREATE","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x","namespace":%q,"labels":{%q:"guest",%q:"team-alpha",%q:"no-such-type"}},"spec":{"containers":[{"name":"main","image":"busybox"}]}}}}`,
		ns, ns, imperatorv1alpha1.PodRoleKey, imperatorv1alpha1.MachineGroupKey, imperatorv1alpha1.MachineTypeKey)
}

// probeReview is a made-up copy of the agent's reachability probe.
func probeReview() string {
	return fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"made-up","kind":{"group":"imperator.tenzen-y.io","version":"v1alpha1","kind":"Machine"},"resource":{"group":"imperator.tenzen-y.io","version":"v1alpha1","resource":"machines"},"name":%q,"operation":"CREATE","dryRun":true,"object":{"apiVersion":"imperator.tenzen-y.io/v1alpha1","kind":"Machine","metadata":{"name":%q}}}}`,
		hosted.ProbeMachineName, hosted.ProbeMachineName)
}

// webhookClient is an HTTPS client of the agent's webhook server that trusts
// its serving CA (from alpha's webhook configuration) and presents cert, if
// any.
func webhookClient(ctx context.Context, cert *tls.Certificate) *http.Client {
	GinkgoHelper()
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
	Expect(members["alpha"].Client.Get(ctx, client.ObjectKey{Name: "imperator-pod-injector"}, cfg)).To(Succeed())
	roots := x509.NewCertPool()
	Expect(roots.AppendCertsFromPEM(cfg.Webhooks[0].ClientConfig.CABundle)).To(BeTrue())
	tlsConfig := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert != nil {
		// Sent whatever CAs the server names as acceptable (Go's client
		// sends none that does not chain to one), as a caller bent on it
		// would, and as the API server's client does.
		tlsConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig, ForceAttemptHTTP2: true}, Timeout: 10 * time.Second}
}

// postReview sends review to the pod injector of member at the agent, with
// cert as client certificate (none when nil).
func postReview(ctx context.Context, cert *tls.Certificate, member, review string) (int, string, error) {
	GinkgoHelper()
	c := webhookClient(ctx, cert)
	defer c.CloseIdleConnections()
	return post(ctx, c, webhookURL+hosted.PathPrefix+member+podinjector.WebhookPath, review)
}

func post(ctx context.Context, c *http.Client, url, body string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	answer, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(answer), err
}

// clientCertificateOf reads the client certificate the agent issued to
// member, from its client Secret in the management cluster.
func clientCertificateOf(ctx context.Context, member string) tls.Certificate {
	GinkgoHelper()
	secret := &corev1.Secret{}
	Expect(management.Client.Get(ctx, client.ObjectKey{Namespace: membersNamespace, Name: member + hosted.ClientSecretSuffix}, secret)).To(Succeed())
	cert, err := tls.X509KeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey])
	Expect(err).NotTo(HaveOccurred())
	return cert
}

// forgeProbes sends made-up probes of member to the agent's validator, one
// after the other, until ctx ends; it then sends how many it sent.
func forgeProbes(ctx context.Context, member string) <-chan int {
	c := webhookClient(ctx, nil)
	url := webhookURL + hosted.PathPrefix + member + machinevalidator.WebhookPath
	sent := make(chan int, 1)
	go func() {
		defer GinkgoRecover()
		defer c.CloseIdleConnections()
		n := 0
		for ctx.Err() == nil {
			if _, _, err := post(ctx, c, url, probeReview()); err == nil {
				n++
			}
			time.Sleep(time.Millisecond)
		}
		sent <- n
	}()
	return sent
}
