package integration

import (
	"bytes"
	"context"
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
		rotationHub, delta, caFile := startRotation(ctx, "delta", hubtest.Options{Namespace: rotationNamespace, ClientCertValidity: validity})

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

// earlyRotationNamespace holds the CA of the early-renewal spec's hub.
const earlyRotationNamespace = "imperator-rotation-early"

var _ = Describe("Hub CA rotation with long-lived spoke certificates", func() {
	It("moves a spoke to the promoted CA by an early renewal, so that finish needs no --force", func(ctx SpecContext) {
		// Certificates of an hour: their scheduled renewal (at 40 minutes)
		// plays no part. The hub recycles connections every 10s, as it does
		// every --max-connection-age: each new connection shows the spoke
		// which CA the hub serves with.
		const (
			validity = time.Hour
			age      = 10 * time.Second
			grace    = 5 * time.Second
			// The promotion reaches the hub within its CA refresh (10s), the
			// spoke at its next connection (age +10% + grace) and it renews
			// within caRenewalJitter (1m).
			moveBound = 10*time.Second + age*11/10 + grace + time.Minute + 15*time.Second
		)
		rotationHub, echo, _ := startRotation(ctx, "echo", hubtest.Options{
			Namespace: earlyRotationNamespace, ClientCertValidity: validity, MaxConnectionAge: age, MaxConnectionAgeGrace: grace,
		})
		isConnected := func() bool {
			c, ok := rotationHub.Cluster("echo")
			return ok && c.Connected
		}
		rotate := func(step string) error { return hubtest.RotateCA(ctx, hubServer.Client, earlyRotationNamespace, step) }
		joined := storedCertificate(ctx, Default, echo)

		By("staging a next CA: the hub still serves with the first one, echo keeps its certificate")
		Expect(rotate(hubtest.RotateStage)).To(Succeed())
		// Longer than the hub's CA refresh plus a connection's age: echo
		// reconnected at least once to a hub that follows the stage.
		Consistently(func(g Gomega) {
			g.Expect(isConnected()).To(BeTrue(), "echo connected")
			g.Expect(storedCertificate(ctx, g, echo)).To(Equal(joined), "echo's certificate")
		}).WithTimeout(10*time.Second + age*11/10 + grace).WithPolling(500 * time.Millisecond).Should(Succeed())

		By("promoting the next CA: echo renews into it on its own, long before its scheduled renewal")
		Expect(rotate(hubtest.RotatePromote)).To(Succeed())
		newCA, _, err := hubtest.CurrentCA(ctx, hubServer.Client, earlyRotationNamespace)
		Expect(err).NotTo(HaveOccurred())
		var renewed []byte
		Eventually(func(g Gomega) {
			if !isConnected() {
				StopTrying("echo is no longer connected to the hub after the promotion").Now()
			}
			renewed = storedCertificate(ctx, g, echo)
			cert, err := pki.ParseCertificate(renewed)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cert.CheckSignatureFrom(newCA)).To(Succeed(), "echo's certificate is of the new CA")
		}).WithTimeout(moveBound).WithPolling(500 * time.Millisecond).Should(Succeed())

		By("finishing without --force once the hub saw echo present its new certificate")
		Eventually(func(g Gomega) {
			if !isConnected() {
				StopTrying("echo is no longer connected to the hub before the finish").Now()
			}
			err := rotate(hubtest.RotateFinish)
			if err != nil && !errors.Is(err, hubtest.ErrOldCAInUse) {
				StopTrying("finish failed: " + err.Error()).Now()
			}
			g.Expect(err).NotTo(HaveOccurred())
		}).WithTimeout(45 * time.Second).WithPolling(time.Second).Should(Succeed())
		_, phase, err := hubtest.CurrentCA(ctx, hubServer.Client, earlyRotationNamespace)
		Expect(err).NotTo(HaveOccurred())
		Expect(phase).To(Equal("Stable"))

		By("echo renews no more: its certificate is of the CA the hub signs with")
		// Several connections later (the hub follows the finish within 10s,
		// then recycles echo's connection every 10s), still the one renewed.
		Consistently(func(g Gomega) {
			g.Expect(isConnected()).To(BeTrue(), "echo connected")
			g.Expect(storedCertificate(ctx, g, echo)).To(Equal(renewed), "echo's certificate")
		}).WithTimeout(10*time.Second + 2*(age*11/10+grace)).WithPolling(500 * time.Millisecond).Should(Succeed())
	})
})

// startRotation starts the hub of a rotation spec, with the suite's grace
// period and persist interval, in its own namespace opts.Namespace (whose
// CA the suite's spokes know nothing of), and spoke cluster joined to it and
// reporting; the node's DeferCleanup stops both. The spoke trusts only the
// hub's first CA through its --hub-ca-file, caFile, which nobody updates
// during the rotation.
func startRotation(ctx context.Context, cluster string, opts hubtest.Options) (rotationHub *hubtest.Hub, s *spoke, caFile string) {
	GinkgoHelper()
	Expect(client.IgnoreAlreadyExists(hubServer.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opts.Namespace}}))).To(Succeed())
	caFile, err := hubtest.WriteCAFile(ctx, hubServer.Client, opts.Namespace, GinkgoT().TempDir())
	Expect(err).NotTo(HaveOccurred())
	opts.GracePeriod, opts.PersistInterval = gracePeriod, persistInterval
	rotationHub, err = hubtest.Start(hubServer.Config, opts)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(rotationHub.Stop)

	s = startSpoke(ctx, cluster, caFile)
	s.token, err = hubtest.CreateToken(ctx, hubServer.Client, opts.Namespace, time.Hour, "")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(deregister, cluster)
	Expect(s.startReporter(rotationHub.Address())).To(Succeed())
	DeferCleanup(s.stopReporter)
	Eventually(func(g Gomega) {
		c, ok := rotationHub.Cluster(cluster)
		g.Expect(ok).To(BeTrue())
		g.Expect(c.Connected).To(BeTrue())
	}).WithTimeout(30 * time.Second).Should(Succeed())
	return rotationHub, s, caFile
}

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
