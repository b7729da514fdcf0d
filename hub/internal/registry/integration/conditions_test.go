package integration

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/hub/internal/query"
	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/internal/pki"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// spoke is a cluster joined to the hub that streams a Snapshot and then
// heartbeats every heartbeatInterval until the spec ends.
type spoke struct {
	// unreachableSince, when set, goes in every heartbeat as
	// api_server_unreachable_since.
	unreachableSince atomic.Pointer[time.Time]
}

// startSpoke joins cluster and starts its Report stream.
func startSpoke(ctx context.Context, cluster string) *spoke {
	GinkgoHelper()
	token, err := hubtest.CreateToken(ctx, hubClient, hubNamespace, time.Hour, "")
	Expect(err).NotTo(HaveOccurred())
	csrPEM, keyPEM, err := pki.NewCSR(cluster)
	Expect(err).NotTo(HaveOccurred())
	joined, err := federationv1.NewFederationClient(dial(nil)).Join(ctx, &federationv1.JoinRequest{ClusterName: cluster, Token: token, Csr: csrPEM})
	Expect(err).NotTo(HaveOccurred())
	cert, err := tls.X509KeyPair(joined.GetCertificate(), keyPEM)
	Expect(err).NotTo(HaveOccurred())

	streamCtx, cancel := context.WithCancel(context.Background())
	DeferCleanup(cancel)
	stream, err := federationv1.NewFederationClient(dial(&cert)).Report(streamCtx)
	Expect(err).NotTo(HaveOccurred())
	epoch := uint64(time.Now().UnixNano())
	for _, m := range []*federationv1.SpokeMessage{
		{Kind: &federationv1.SpokeMessage_Hello{Hello: &federationv1.Hello{ClusterName: cluster, AgentVersion: "registry", Epoch: epoch}}},
		{Kind: &federationv1.SpokeMessage_Snapshot{Snapshot: &federationv1.Snapshot{Generation: 1, ObservedAt: timestamppb.Now(), Machines: []*federationv1.Machine{{
			Name: "gpu", Group: cluster, Types: []*federationv1.MachineType{{Name: "compute-xlarge", Cpu: "40", Memory: "128Gi", Available: 2,
				Usage: &federationv1.Usage{Maximum: 2, Reserved: 2}}},
		}}}}},
	} {
		Expect(stream.Send(m)).To(Succeed())
	}
	first, err := stream.Recv()
	Expect(err).NotTo(HaveOccurred())
	Expect(first.GetAck().GetGeneration()).To(Equal(uint64(1)), "the hub acknowledges the Snapshot")
	s := &spoke{}
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
	go func() {
		ticker := time.NewTicker(heartbeatInterval)
		defer ticker.Stop()
		for {
			select {
			case <-streamCtx.Done():
				return
			case <-ticker.C:
			}
			hb := &federationv1.Heartbeat{Generation: 1}
			if since := s.unreachableSince.Load(); since != nil {
				hb.ApiServerUnreachableSince = timestamppb.New(*since)
			}
			if err := stream.Send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Heartbeat{Heartbeat: hb}}); err != nil {
				if !errors.Is(err, io.EOF) {
					GinkgoWriter.Println("heartbeat:", err)
				}
				return
			}
		}
	}()
	return s
}

// available returns the cluster's ManagedClusterConditionAvailable condition.
func available(ctx context.Context, g Gomega, cluster string) *metav1.Condition {
	mc := &clusterv1.ManagedCluster{}
	g.Expect(hubClient.Get(ctx, client.ObjectKey{Name: cluster}, mc)).To(Succeed())
	cond := meta.FindStatusCondition(mc.Status.Conditions, clusterv1.ManagedClusterConditionAvailable)
	g.Expect(cond).NotTo(BeNil(), "no Available condition")
	return cond
}

// applyCondition writes cond on the cluster's ManagedCluster by server-side
// apply as manager, as OCM's registration controller or a person would.
func applyCondition(ctx context.Context, cluster, manager string, cond metav1.Condition) {
	GinkgoHelper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": clusterv1.GroupVersion.String(),
		"kind":       "ManagedCluster",
		"metadata":   map[string]any{"name": cluster},
		"status": map[string]any{"conditions": []any{map[string]any{
			"type": cond.Type, "status": string(cond.Status), "reason": cond.Reason, "message": cond.Message,
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
		}}},
	}}
	Expect(hubClient.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(manager), client.ForceOwnership)).To(Succeed())
}

// viewer is a viewer certificate for the query API.
func viewer() *tls.Certificate {
	GinkgoHelper()
	certPEM, keyPEM, err := ca.IssueClient("registry-viewer", []string{query.ViewerOrganization}, time.Hour)
	Expect(err).NotTo(HaveOccurred())
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	Expect(err).NotTo(HaveOccurred())
	return &pair
}

// listed is the cluster as ListClusters shows it.
func listed(ctx context.Context, g Gomega, q queryv1.QueryClient, cluster string) *queryv1.Cluster {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := q.ListClusters(ctx, &queryv1.ListClustersRequest{})
	g.Expect(err).NotTo(HaveOccurred())
	for _, c := range resp.GetClusters() {
		if c.GetName() == cluster {
			return c
		}
	}
	g.Expect(resp.GetClusters()).To(ContainElement(HaveField("Name", cluster)))
	return nil
}

var _ = Describe("ManagedCluster conditions", func() {
	It("keeps a condition another field manager wrote through every Available write of the hub", func(ctx context.Context) {
		const cluster = "ssa-joined"
		s := startSpoke(ctx, cluster)
		Eventually(func(g Gomega) {
			g.Expect(available(ctx, g, cluster).Status).To(Equal(metav1.ConditionTrue))
		}).WithTimeout(10 * time.Second).Should(Succeed())

		By("OCM's registration controller writing ManagedClusterJoined")
		joined := metav1.Condition{Type: clusterv1.ManagedClusterConditionJoined, Status: metav1.ConditionTrue, Reason: "ManagedClusterJoined", Message: "Managed cluster joined"}
		applyCondition(ctx, cluster, "registration-controller", joined)

		By("the spoke's agent losing its API server: the hub writes Available=False")
		since := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
		s.unreachableSince.Store(&since)
		Eventually(func(g Gomega) {
			cond := available(ctx, g, cluster)
			g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(cond.Reason).To(Equal(registry.ReasonAPIServerUnreachable))
			g.Expect(cond.Message).To(ContainSubstring(since.Format(time.RFC3339)))
		}).WithTimeout(10 * time.Second).Should(Succeed())

		By("the agent reaching its API server again: Available=True, written again")
		s.unreachableSince.Store(nil)
		Eventually(func(g Gomega) {
			g.Expect(available(ctx, g, cluster).Status).To(Equal(metav1.ConditionTrue))
		}).WithTimeout(10 * time.Second).Should(Succeed())

		mc := &clusterv1.ManagedCluster{}
		Expect(hubClient.Get(ctx, client.ObjectKey{Name: cluster}, mc)).To(Succeed())
		got := meta.FindStatusCondition(mc.Status.Conditions, clusterv1.ManagedClusterConditionJoined)
		Expect(got).NotTo(BeNil(), "the hub's writes dropped OCM's ManagedClusterJoined condition")
		Expect(got.Status).To(Equal(metav1.ConditionTrue))
		Expect(got.Reason).To(Equal(joined.Reason))
		var managers []string
		for _, f := range mc.ManagedFields {
			if f.Subresource == "status" {
				managers = append(managers, f.Manager)
			}
		}
		Expect(managers).To(ContainElements(registry.FieldManager, "registration-controller"))
	}, SpecTimeout(time.Minute))

	It("makes a heartbeating cluster marked Unknown by hand Available again within two heartbeat intervals", func(ctx context.Context) {
		const cluster = "ssa-unknown-by-hand"
		startSpoke(ctx, cluster)
		Eventually(func(g Gomega) {
			g.Expect(available(ctx, g, cluster).Status).To(Equal(metav1.ConditionTrue))
		}).WithTimeout(10 * time.Second).Should(Succeed())

		By("someone marking the live cluster Unknown")
		applyCondition(ctx, cluster, "someone", metav1.Condition{Type: clusterv1.ManagedClusterConditionAvailable, Status: metav1.ConditionUnknown, Reason: "ByHand", Message: "marked by hand"})
		marked := time.Now()
		Eventually(func(g Gomega) {
			cond := available(ctx, g, cluster)
			g.Expect(cond.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(cond.Reason).To(Equal(registry.ReasonAvailable))
		}).WithTimeout(2*heartbeatInterval + gracePeriod/8 + time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		GinkgoWriter.Println("Available again after", time.Since(marked))
	}, SpecTimeout(time.Minute))
})

var _ = Describe("A spoke whose agent cannot reach its own API server", func() {
	It("is shown stale with the reason while its heartbeats say so, and current at once when they stop", func(ctx context.Context) {
		const cluster = "api-server-down"
		s := startSpoke(ctx, cluster)
		// One connection: the hub bounds the connections of one certificate.
		q := queryv1.NewQueryClient(dial(viewer()))
		Eventually(func(g Gomega) {
			g.Expect(listed(ctx, g, q, cluster).GetState()).To(Equal(queryv1.ClusterState_CLUSTER_STATE_AVAILABLE))
		}).WithTimeout(10 * time.Second).Should(Succeed())

		since := time.Now().Add(-45 * time.Second).UTC().Truncate(time.Second)
		s.unreachableSince.Store(&since)
		Eventually(func(g Gomega) {
			c := listed(ctx, g, q, cluster)
			g.Expect(c.GetState()).To(Equal(queryv1.ClusterState_CLUSTER_STATE_STALE))
			g.Expect(c.GetStateMessage()).To(ContainSubstring("cannot reach its own cluster's API server since " + since.Format(time.RFC3339)))
		}).WithTimeout(3 * heartbeatInterval).Should(Succeed())

		ctxQ, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		found, err := q.FindCapacity(ctxQ, &queryv1.FindCapacityRequest{
			Target: &queryv1.FindCapacityRequest_MachineType{MachineType: &queryv1.MachineTypeRef{Type: "compute-xlarge"}}, Count: 1,
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(found.GetCandidates()).NotTo(ContainElement(HaveField("Cluster", cluster)), "a stale cluster is offered as capacity")
		Expect(found.GetExcluded()).To(ContainElement(And(HaveField("Cluster", cluster), HaveField("Reason", queryv1.ExclusionReason_EXCLUSION_REASON_STALE))))

		s.unreachableSince.Store(nil)
		Eventually(func(g Gomega) {
			c := listed(ctx, g, q, cluster)
			g.Expect(c.GetState()).To(Equal(queryv1.ClusterState_CLUSTER_STATE_AVAILABLE))
			g.Expect(c.GetStateMessage()).To(BeEmpty())
		}).WithTimeout(3 * heartbeatInterval).Should(Succeed())
	}, SpecTimeout(time.Minute))
})
