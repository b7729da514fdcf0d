package integration

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/internal/pki"
)

// Joining: a spoke joins with a bootstrap token that is unused, unexpired
// and, for a registered cluster, bound to its name; a deregistered spoke
// joins again by itself. Each spec starts once every spoke reports to the
// hub.
var _ = Describe("Federation: joining with tokens", func() {
	BeforeEach(everySpokeReports)

	It("refuses a reused token", func(ctx SpecContext) {
		_, err := join(ctx, joinRequest("gamma", spokes["alpha"].token))
		Expect(status.Code(err)).To(Equal(codes.Unauthenticated), "error: %v", err)
		Expect(err.Error()).To(ContainSubstring("already used"))
	})

	It("lets only a token bound to its name re-join a registered cluster", func(ctx SpecContext) {
		unbound, err := hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, "")
		Expect(err).NotTo(HaveOccurred())
		_, err = join(ctx, joinRequest("alpha", unbound))
		Expect(status.Code(err)).To(Equal(codes.PermissionDenied), "error: %v", err)
		Expect(err.Error()).To(ContainSubstring("already registered"))

		alpha := spokes["alpha"]
		before := storedCertificate(ctx, Default, alpha)
		bound, err := hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, "alpha")
		Expect(err).NotTo(HaveOccurred())
		resp, err := join(ctx, joinRequest("alpha", bound))
		Expect(err).NotTo(HaveOccurred())
		cert, err := pki.ParseCertificate(resp.GetCertificate())
		Expect(err).NotTo(HaveOccurred())
		Expect(cert.Subject.CommonName).To(Equal("alpha"))

		// The re-join retired the certificates issued before it, the agent's
		// among them: given a new token bound to its name, the agent joins
		// again by itself.
		again, err := hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, "alpha")
		Expect(err).NotTo(HaveOccurred())
		Expect(alpha.writeToken(again)).To(Succeed())
		registration := registrationOf(ctx, "alpha")
		Eventually(func(g Gomega) {
			g.Expect(storedCertificate(ctx, g, alpha)).NotTo(Equal(before))
			reportsAgainUnder(ctx, g, alpha, registration)
		}).WithTimeout(15 * time.Second).Should(Succeed())
		Expect(tokenUsedBy(ctx, Default, again)).To(Equal("alpha"))
	})

	It("refuses an expired token", func(ctx SpecContext) {
		token, err := hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, "")
		Expect(err).NotTo(HaveOccurred())
		var secret corev1.Secret
		Expect(hubServer.Client.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: "imperator-bootstrap-token-" + token[:6]}, &secret)).To(Succeed())
		patch := client.MergeFrom(secret.DeepCopy())
		secret.Data["expiration"] = []byte(time.Now().Add(-time.Minute).UTC().Format(time.RFC3339))
		Expect(hubServer.Client.Patch(ctx, &secret, patch)).To(Succeed())

		_, err = join(ctx, joinRequest("gamma", token))
		Expect(status.Code(err)).To(Equal(codes.Unauthenticated), "error: %v", err)
		Expect(err.Error()).To(ContainSubstring("expired"))
	})

	It("forgets a deregistered cluster and ends its stream, and the spoke joins again by itself with a token bound to its name once someone else created its ManagedCluster again", func(ctx SpecContext) {
		var inv imperatorv1alpha1.ClusterInventory
		Expect(hubServer.Client.Get(ctx, client.ObjectKey{Namespace: "beta", Name: "beta"}, &inv)).To(Succeed())
		Expect(inv.OwnerReferences).To(ConsistOf(And(HaveField("Kind", "ManagedCluster"), HaveField("Name", "beta"))),
			"the garbage collector deletes the inventory with its ManagedCluster")

		Expect(hubServer.Client.Delete(ctx, &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: "beta"}})).To(Succeed())
		Eventually(func() bool { _, ok := hub.Cluster("beta"); return ok }).WithTimeout(10 * time.Second).Should(BeFalse())
		// The spoke keeps trying and is refused.
		Consistently(func() bool { _, ok := hub.Cluster("beta"); return ok }).WithTimeout(2 * time.Second).Should(BeFalse())
		Expect(connected("alpha")).To(BeTrue())

		By("someone creates beta's ManagedCluster again; beta joins with a token bound to its name")
		// The token file holds none or a used one: beta cannot join by itself.
		beta := spokes["beta"]
		before := storedCertificate(ctx, Default, beta)
		Expect(hubServer.Client.Create(ctx, &clusterv1.ManagedCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "beta"},
			Spec:       clusterv1.ManagedClusterSpec{HubAcceptsClient: true},
		})).To(Succeed())
		current := registrationOf(ctx, "beta")
		Consistently(func(g Gomega) {
			g.Expect(connected("beta")).To(BeFalse())
			g.Expect(storedCertificate(ctx, g, beta)).To(Equal(before))
		}).WithTimeout(2 * time.Second).Should(Succeed())

		token, err := hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, "beta")
		Expect(err).NotTo(HaveOccurred())
		Expect(beta.writeToken(token)).To(Succeed())
		Eventually(func(g Gomega) { reportsAgainUnder(ctx, g, beta, current) }).
			WithTimeout(15 * time.Second).Should(Succeed())
		Expect(registrationOf(ctx, "beta")).To(Equal(current), "the join adopted the ManagedCluster")
	})

	It("joins again by itself once its cluster is deregistered and a new token is written to its token file", func(ctx SpecContext) {
		alpha := spokes["alpha"]
		earlier := registrationOf(ctx, "alpha")
		before := storedCertificate(ctx, Default, alpha)
		// The token file still holds the token alpha joined with, used.
		deregister(ctx, "alpha")
		Eventually(func() bool { _, ok := hub.Cluster("alpha"); return ok }).WithTimeout(10 * time.Second).Should(BeFalse())
		// The used token cannot register it again, and the agent deletes
		// nothing: it waits with its credentials as they are.
		Consistently(func(g Gomega) {
			g.Expect(connected("alpha")).To(BeFalse())
			g.Expect(apierrors.IsNotFound(hubServer.Client.Get(ctx, client.ObjectKey{Name: "alpha"}, &clusterv1.ManagedCluster{}))).To(BeTrue(), "no new registration")
			g.Expect(storedCertificate(ctx, g, alpha)).To(Equal(before))
		}).WithTimeout(3 * time.Second).Should(Succeed())

		token, err := hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(alpha.writeToken(token)).To(Succeed())
		var current string
		Eventually(func(g Gomega) {
			var mc clusterv1.ManagedCluster
			g.Expect(hubServer.Client.Get(ctx, client.ObjectKey{Name: "alpha"}, &mc)).To(Succeed())
			current = string(mc.UID)
		}).WithTimeout(15 * time.Second).Should(Succeed())
		Expect(current).NotTo(Equal(earlier))
		Eventually(func(g Gomega) { reportsAgainUnder(ctx, g, alpha, current) }).
			WithTimeout(15 * time.Second).Should(Succeed())
		Expect(tokenUsedBy(ctx, Default, token)).To(Equal("alpha"))
	})
})
