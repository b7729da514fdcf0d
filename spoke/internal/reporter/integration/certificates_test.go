package integration

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/internal/pki"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// Certificates: they renew without a token, are bound to the registration
// they were issued for, and are kept while the hub does not accept the
// cluster. Each spec starts once every spoke reports to the hub.
var _ = Describe("Federation: certificates and registrations", func() {
	BeforeEach(everySpokeReports)

	It("renews at start a stored certificate past two thirds of its life, without a token", func(ctx SpecContext) {
		beta := spokes["beta"]
		Expect(beta.stopReporter()).To(Succeed())
		// A certificate the hub issued to beta with 12 seconds of life: its
		// life counted from its NotBefore (the Secret does not say when the
		// agent obtained it), two thirds of it are long gone.
		restartHub(hubtest.Options{ClientCertValidity: 12 * time.Second})
		csr, keyPEM, err := pki.NewCSR("beta")
		Expect(err).NotTo(HaveOccurred())
		resp, err := dialHub(spokeCertificate(ctx, beta)).Renew(ctx, &federationv1.RenewRequest{Csr: csr})
		Expect(err).NotTo(HaveOccurred())
		restartHub(hubtest.Options{})
		var secret corev1.Secret
		Expect(beta.Client.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: credentialsSecret}, &secret)).To(Succeed())
		secret.Data[corev1.TLSCertKey] = resp.GetCertificate()
		secret.Data[corev1.TLSPrivateKeyKey] = keyPEM
		Expect(beta.Client.Update(ctx, &secret)).To(Succeed())

		beta.token = ""
		Expect(beta.startReporter(hubAddr)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(beta.Client.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: credentialsSecret}, &secret)).To(Succeed())
			cert, err := pki.ParseCertificate(secret.Data[corev1.TLSCertKey])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cert.Subject.CommonName).To(Equal("beta"))
			g.Expect(cert.NotAfter).To(BeTemporally(">", time.Now().Add(300*24*time.Hour)))
			g.Expect(connected("beta")).To(BeTrue())
		}).WithTimeout(15 * time.Second).Should(Succeed())
	})

	It("refuses the certificates of an earlier registration once the cluster is deregistered and joined again", func(ctx SpecContext) {
		const cluster = "delta"
		DeferCleanup(deregister, cluster)
		token, err := hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, "")
		Expect(err).NotTo(HaveOccurred())
		earlier := joinForCertificate(ctx, cluster, token)
		Expect(reportWith(ctx, earlier, cluster)).To(Succeed())

		deregister(ctx, cluster)
		token, err = hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, "")
		Expect(err).NotTo(HaveOccurred())
		current := joinForCertificate(ctx, cluster, token)

		// The hub's cache may lag behind the API for a moment; then the old
		// certificate is refused for good.
		Eventually(func() error { return reportWith(ctx, earlier, cluster) }).
			WithTimeout(10 * time.Second).Should(refusedFor(cluster))
		Consistently(func() error { return reportWith(ctx, earlier, cluster) }).
			WithTimeout(time.Second).Should(refusedFor(cluster))
		csr, _, err := pki.NewCSR(cluster)
		Expect(err).NotTo(HaveOccurred())
		_, err = dialHub(earlier).Renew(ctx, &federationv1.RenewRequest{Csr: csr})
		Expect(err).To(refusedFor(cluster), "the old certificate cannot be renewed into a current one")

		Expect(reportWith(ctx, current, cluster)).To(Succeed())
	})

	It("refuses a certificate once its cluster's ManagedCluster is deleted and created again by someone else", func(ctx SpecContext) {
		const cluster = "epsilon"
		DeferCleanup(deregister, cluster)
		token, err := hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, "")
		Expect(err).NotTo(HaveOccurred())
		cert := joinForCertificate(ctx, cluster, token)
		Expect(reportWith(ctx, cert, cluster)).To(Succeed())

		deregister(ctx, cluster)
		Expect(hubServer.Client.Create(ctx, &clusterv1.ManagedCluster{
			ObjectMeta: metav1.ObjectMeta{Name: cluster},
			Spec:       clusterv1.ManagedClusterSpec{HubAcceptsClient: true},
		})).To(Succeed())
		Eventually(func() error { return reportWith(ctx, cert, cluster) }).
			WithTimeout(10 * time.Second).Should(refusedFor(cluster))

		// A token bound to the name adopts the new ManagedCluster: its
		// certificate works, the earlier one still does not.
		token, err = hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, cluster)
		Expect(err).NotTo(HaveOccurred())
		adopted := joinForCertificate(ctx, cluster, token)
		Expect(reportWith(ctx, adopted, cluster)).To(Succeed())
		Expect(reportWith(ctx, cert, cluster)).To(refusedFor(cluster))
	})

	It("keeps its certificate while the hub does not accept the cluster, and does not spend a token", func(ctx SpecContext) {
		alpha := spokes["alpha"]
		before := storedCertificate(ctx, Default, alpha)
		// A token the agent could join with: a wrong re-join would use it and
		// replace the certificate.
		bound, err := hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, "alpha")
		Expect(err).NotTo(HaveOccurred())
		Expect(alpha.writeToken(bound)).To(Succeed())
		DeferCleanup(alpha.writeToken, alpha.token)

		setHubAcceptsClient(ctx, "alpha", false)
		DeferCleanup(setHubAcceptsClient, "alpha", true)
		Eventually(func() bool { return connected("alpha") }).WithTimeout(10 * time.Second).Should(BeFalse())
		// The agent retries every second at most: several refusals.
		Consistently(func(g Gomega) {
			g.Expect(connected("alpha")).To(BeFalse())
			g.Expect(storedCertificate(ctx, g, alpha)).To(Equal(before))
			g.Expect(tokenUsedBy(ctx, g, bound)).To(BeEmpty())
		}).WithTimeout(3 * time.Second).Should(Succeed())

		setHubAcceptsClient(ctx, "alpha", true)
		Eventually(func() bool { return connected("alpha") }).WithTimeout(10 * time.Second).Should(BeTrue())
		Expect(storedCertificate(ctx, Default, alpha)).To(Equal(before))
		Expect(tokenUsedBy(ctx, Default, bound)).To(BeEmpty())
	})
})
