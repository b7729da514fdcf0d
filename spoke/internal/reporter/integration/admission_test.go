package integration

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// Who may report: the hub lets a stream in only over TLS, with the
// certificate of the cluster it reports for, while that cluster's
// ManagedCluster accepts the client. Each spec starts once every spoke
// reports to the hub.
var _ = Describe("Federation: who may report", func() {
	BeforeEach(everySpokeReports)

	It("refuses a spoke that presents another cluster's certificate", func(ctx SpecContext) {
		fed := dialHub(spokeCertificate(ctx, spokes["alpha"]))
		stream, err := fed.Report(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(stream.Send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Hello{Hello: &federationv1.Hello{ClusterName: "beta", Epoch: 1}}})).To(Succeed())
		_, err = stream.Recv()
		Expect(status.Code(err)).To(Equal(codes.PermissionDenied), "error: %v", err)
		Expect(err.Error()).To(ContainSubstring(`identifies cluster "alpha"`))
		Expect(connected("beta")).To(BeTrue(), "beta's own stream must survive")
	})

	It("refuses Report without a client certificate", func(ctx SpecContext) {
		stream, err := dialHub(nil).Report(ctx)
		Expect(err).NotTo(HaveOccurred())
		_, err = stream.Recv()
		Expect(status.Code(err)).To(Equal(codes.Unauthenticated), "error: %v", err)
	})

	It("refuses a plain-text client", func(ctx SpecContext) {
		conn, err := grpc.NewClient(hubAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(conn.Close)
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = federationv1.NewFederationClient(conn).Join(callCtx, joinRequest("gamma", "abcdef.0123456789abcdef"))
		Expect(err).To(HaveOccurred())
		Expect(status.Code(err)).To(Equal(codes.Unavailable), "error: %v", err)
	})

	It("refuses reports while the ManagedCluster does not accept the client", func(ctx SpecContext) {
		setAccepts := func(accept bool) {
			var mc clusterv1.ManagedCluster
			Expect(hubServer.Client.Get(ctx, client.ObjectKey{Name: "beta"}, &mc)).To(Succeed())
			patch := client.MergeFrom(mc.DeepCopy())
			mc.Spec.HubAcceptsClient = accept
			Expect(hubServer.Client.Patch(ctx, &mc, patch)).To(Succeed())
		}
		setAccepts(false)
		Eventually(func() bool { return connected("beta") }).
			WithTimeout(10 * time.Second).Should(BeFalse())
		Consistently(func() bool { return connected("beta") }).
			WithTimeout(time.Second).Should(BeFalse())
		setAccepts(true)
		Eventually(func() bool { return connected("beta") }).
			WithTimeout(10 * time.Second).Should(BeTrue())
	})
})
