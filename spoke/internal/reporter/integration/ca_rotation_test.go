package integration

import (
	"bytes"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/pki"
)

// rotationNamespace holds the CA of the rotation spec's own hub: the suite's
// spokes, which must keep their hub and CA, know nothing of it.
const rotationNamespace = "imperator-rotation"

var _ = Describe("Hub CA rotation", Ordered, func() {
	It("keeps a spoke connected through stage, promote and finish, moving it to the new CA by renewal", func(ctx SpecContext) {
		// Renewal 12s after each certificate: few enough renewals in the
		// spec for the hub's per-cluster budget (5, then one a minute).
		const validity = 18 * time.Second
		Expect(client.IgnoreAlreadyExists(hubServer.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rotationNamespace}}))).To(Succeed())
		// The spoke trusts only the first CA through its --hub-ca-file,
		// which nobody updates during the rotation.
		caFile, err := hubtest.WriteCAFile(ctx, hubServer.Client, rotationNamespace, GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		rotationHub, err := hubtest.Start(hubServer.Config, hubtest.Options{
			Namespace: rotationNamespace, GracePeriod: gracePeriod, PersistInterval: persistInterval, ClientCertValidity: validity,
		})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(rotationHub.Stop)

		delta := startSpoke(ctx, "delta", caFile)
		delta.token, err = hubtest.CreateToken(ctx, hubServer.Client, rotationNamespace, time.Hour, "")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(deregister, "delta")
		Expect(delta.startReporter(rotationHub.Address())).To(Succeed())
		DeferCleanup(delta.stopReporter)
		Eventually(func(g Gomega) {
			c, ok := rotationHub.Cluster("delta")
			g.Expect(ok).To(BeTrue())
			g.Expect(c.Connected).To(BeTrue())
		}).WithTimeout(30 * time.Second).Should(Succeed())

		// From now on delta must be connected at every look.
		whileConnected := func(what string, check func(g Gomega)) {
			GinkgoHelper()
			Eventually(func(g Gomega) {
				if c, ok := rotationHub.Cluster("delta"); !ok || !c.Connected {
					StopTrying("delta is no longer connected to the hub " + what).Now()
				}
				check(g)
			}).WithTimeout(90 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		}
		rotate := func(step string) error { return hubtest.RotateCA(ctx, hubServer.Client, rotationNamespace, step) }
		stored := func(g Gomega) (cert []byte, bundle []byte) {
			var secret corev1.Secret
			g.Expect(delta.Client.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: credentialsSecret}, &secret)).To(Succeed())
			return secret.Data[corev1.TLSCertKey], secret.Data["ca.crt"]
		}

		By("staging a next CA: delta renews and gets the bundle of both CAs")
		Expect(rotate(hubtest.RotateStage)).To(Succeed())
		whileConnected("after the stage", func(g Gomega) {
			_, bundle := stored(g)
			g.Expect(certificatesIn(bundle)).To(Equal(2), "the bundle delta stored")
		})

		By("promoting the next CA: the hub serves a certificate of it and delta renews into it")
		Expect(rotate(hubtest.RotatePromote)).To(Succeed())
		newCA, _, err := hubtest.CurrentCA(ctx, hubServer.Client, rotationNamespace)
		Expect(err).NotTo(HaveOccurred())
		whileConnected("after the promotion", func(g Gomega) {
			certPEM, _ := stored(g)
			cert, err := pki.ParseCertificate(certPEM)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cert.CheckSignatureFrom(newCA)).To(Succeed(), "delta's certificate is of the new CA")
		})

		By("finishing once the hub saw delta present a certificate of the new CA")
		whileConnected("before the finish", func(g Gomega) {
			err := rotate(hubtest.RotateFinish)
			if err != nil && !errors.Is(err, hubtest.ErrOldCAInUse) {
				StopTrying("finish failed: " + err.Error()).Now()
			}
			g.Expect(err).NotTo(HaveOccurred())
		})
		_, phase, err := hubtest.CurrentCA(ctx, hubServer.Client, rotationNamespace)
		Expect(err).NotTo(HaveOccurred())
		Expect(phase).To(Equal("Stable"))

		By("delta keeps renewing and reporting with the new CA alone")
		// Once the hub followed the finish (within 10s) it no longer
		// presents the new CA signed by the previous one: a client trusting
		// only the previous CA, as delta's --hub-ca-file, fails to verify it.
		firstCA, err := os.ReadFile(caFile)
		Expect(err).NotTo(HaveOccurred())
		oldTrust, err := identity.ClientTLS(firstCA, nil, "127.0.0.1")
		Expect(err).NotTo(HaveOccurred())
		whileConnected("while the hub follows the finish", func(g Gomega) {
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", rotationHub.Address(), oldTrust)
			if err == nil {
				_ = conn.Close()
			}
			g.Expect(err).To(MatchError(ContainSubstring("unknown authority")))
		})
		before, _ := stored(Default)
		whileConnected("after the finish", func(g Gomega) {
			after, _ := stored(g)
			g.Expect(bytes.Equal(after, before)).To(BeFalse(), "delta renewed after the hub followed the finish")
		})
	})
})

// certificatesIn counts the certificates of a PEM bundle.
func certificatesIn(bundle []byte) int {
	n := 0
	for {
		var block *pem.Block
		block, bundle = pem.Decode(bundle)
		if block == nil {
			return n
		}
		n++
	}
}
