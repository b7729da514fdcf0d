package integration

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/hub/internal/persist"
	"github.com/imperator-federation/imperator/hub/internal/scores"
	"github.com/imperator-federation/imperator/hub/internal/store"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// usedOf is the used count of compute-xlarge in a cluster's gpu-<group> Machine.
func usedOf(c *hubtest.ClusterView, group string) int32 {
	m, ok := c.Machine("gpu-" + group)
	if !ok || len(m.GetTypes()) == 0 {
		return -1
	}
	return m.GetTypes()[0].GetUsage().GetUsed()
}

// availableCondition is the status of the Available condition of the
// cluster's ClusterInventory and ManagedCluster.
func availableCondition(ctx context.Context, g Gomega, cluster string) (inventory, managed metav1.ConditionStatus) {
	var inv imperatorv1alpha1.ClusterInventory
	g.Expect(hubClient.Get(ctx, client.ObjectKey{Namespace: cluster, Name: persist.InventoryName(cluster)}, &inv)).To(Succeed())
	var mc clusterv1.ManagedCluster
	g.Expect(hubClient.Get(ctx, client.ObjectKey{Name: cluster}, &mc)).To(Succeed())
	if c := meta.FindStatusCondition(inv.Status.Conditions, imperatorv1alpha1.ConditionAvailable); c != nil {
		inventory = c.Status
	}
	if c := meta.FindStatusCondition(mc.Status.Conditions, clusterv1.ManagedClusterConditionAvailable); c != nil {
		managed = c.Status
	}
	return inventory, managed
}

// Two hub replicas share one hub cluster, as deploy/hub runs them: the
// suite's hub (started first, so the elected leader) and a second one.
var _ = Describe("Several hub replicas", Ordered, func() {
	const cluster, group = "omega", "team-o"
	var (
		second *hubtest.Hub
		omega  *simSpoke
	)

	BeforeAll(func(ctx context.Context) {
		var err error
		second, err = hubtest.Start(hubClientConfig, hubtest.Options{Namespace: hubNamespace, GracePeriod: gracePeriod, PersistInterval: 200 * time.Millisecond})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() error { return second.Stop() })

		omega, err = joinSpokeVia(ctx, second.Address(), cluster)
		Expect(err).NotTo(HaveOccurred())
		omega.mode = federationv1.AgentMode_AGENT_MODE_HOSTED
		Expect(omega.start(gpuMachine(group, 4, 0))).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(omega.stop()).To(Succeed())
			// Deregister, so that the other specs see the fleet they expect.
			Expect(client.IgnoreNotFound(hubClient.Delete(ctx, &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster}}))).To(Succeed())
			Eventually(func() bool { _, ok := hub.Cluster(cluster); return ok }, 30*time.Second, 100*time.Millisecond).Should(BeFalse())
		})
	}, NodeTimeout(2*time.Minute))

	It("answers for a spoke that reports to another replica", func(ctx context.Context) {
		Eventually(func(g Gomega) {
			c, ok := hub.Cluster(cluster)
			g.Expect(ok).To(BeTrue())
			g.Expect(c.Liveness).To(Equal(store.LivenessAvailable))
			g.Expect(c.Connected).To(BeTrue())
			g.Expect(c.Stale()).To(BeFalse(), "figures of a live replica are current")
			g.Expect(usedOf(c, group)).To(BeEquivalentTo(0))
			local, _ := second.Cluster(cluster)
			g.Expect(c.Replica).To(Equal(local.Replica), "the replica holding the stream")
			g.Expect(c.AgentMode).To(Equal("hosted"), "imperatorctl clusters -o wide shows the mode on every replica")
		}, 30*time.Second, 100*time.Millisecond).Should(Succeed())

		By("publishing its placement score from the leader only")
		Eventually(func(g Gomega) {
			obj, err := placementScore(ctx, cluster)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(scoreOf(obj, "compute-xlarge")).To(Equal(scores.Value(4)))
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	}, SpecTimeout(time.Minute))

	It("follows the usage the other replica receives", func(ctx context.Context) {
		Expect(omega.update(gpuMachine(group, 4, 3))).To(Succeed())
		Eventually(func(g Gomega) {
			c, ok := hub.Cluster(cluster)
			g.Expect(ok).To(BeTrue())
			g.Expect(usedOf(c, group)).To(BeEquivalentTo(3))
			obj, err := placementScore(ctx, cluster)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(scoreOf(obj, "compute-xlarge")).To(Equal(scores.Value(1)))
		}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	}, SpecTimeout(time.Minute))

	It("keeps a spoke available while it moves between replicas", func(ctx context.Context) {
		Expect(omega.stop()).To(Succeed())
		omega.addr = hub.Address()
		Expect(omega.start(gpuMachine(group, 4, 2))).To(Succeed())
		Eventually(func(g Gomega) {
			c, ok := second.Cluster(cluster)
			g.Expect(ok).To(BeTrue())
			local, _ := hub.Cluster(cluster)
			g.Expect(c.Replica).To(Equal(local.Replica), "the second replica sees who holds the stream now")
			g.Expect(usedOf(c, group)).To(BeEquivalentTo(2))
		}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
		Consistently(func(g Gomega) {
			for _, h := range []*hubtest.Hub{hub, second} {
				c, ok := h.Cluster(cluster)
				g.Expect(ok).To(BeTrue())
				g.Expect(c.Liveness).To(Equal(store.LivenessAvailable))
				g.Expect(c.Stale()).To(BeFalse())
			}
			inventory, managed := availableCondition(ctx, g, cluster)
			g.Expect(inventory).To(Equal(metav1.ConditionTrue))
			g.Expect(managed).To(Equal(metav1.ConditionTrue))
		}, 3*gracePeriod, 200*time.Millisecond).Should(Succeed())
	}, SpecTimeout(time.Minute))

	It("marks a cluster Unknown when its replica went away with it", func(ctx context.Context) {
		By("moving the spoke back to the second replica")
		Expect(omega.stop()).To(Succeed())
		omega.addr = second.Address()
		Expect(omega.start(gpuMachine(group, 4, 2))).To(Succeed())
		Eventually(func(g Gomega) {
			c, ok := hub.Cluster(cluster)
			g.Expect(ok).To(BeTrue())
			local, _ := second.Cluster(cluster)
			g.Expect(local.Connected).To(BeTrue())
			g.Expect(c.Replica).To(Equal(local.Replica))
		}, 30*time.Second, 100*time.Millisecond).Should(Succeed())

		By("stopping that replica, then the spoke: nobody else may write for it but the leader")
		Expect(second.Stop()).To(Succeed())
		Expect(omega.stop()).To(Succeed())
		Eventually(func(g Gomega) {
			c, ok := hub.Cluster(cluster)
			g.Expect(ok).To(BeTrue())
			g.Expect(c.Liveness).To(Equal(store.LivenessUnknown))
			g.Expect(c.Connected).To(BeFalse())
			inventory, managed := availableCondition(ctx, g, cluster)
			g.Expect(inventory).To(Equal(metav1.ConditionUnknown))
			g.Expect(managed).To(Equal(metav1.ConditionUnknown))
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	}, SpecTimeout(time.Minute))
})
