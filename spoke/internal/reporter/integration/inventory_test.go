package integration

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// What a spoke reports reaches the hub: its registration, its Machines and
// their figures, promptly, and nothing is written while nothing changes.
// Each spec starts once every spoke reports to the hub.
var _ = Describe("Federation: what a spoke reports", func() {
	BeforeEach(everySpokeReports)

	It("registers joined spokes: ManagedCluster, ClusterInventory and the hub's index", func(ctx SpecContext) {
		for name := range spokes {
			Eventually(func(g Gomega) {
				c, ok := hub.Cluster(name)
				g.Expect(ok).To(BeTrue(), "cluster %s in the hub index", name)
				g.Expect(c.Connected).To(BeTrue())
				g.Expect(c.Stale()).To(BeFalse())
				m, ok := c.Machine(machineName)
				g.Expect(ok).To(BeTrue())
				g.Expect(m.GetGroup()).To(Equal(machineName))
				g.Expect(m.GetTypes()).To(HaveLen(3))
			}).WithTimeout(30 * time.Second).Should(Succeed())

			Eventually(func(g Gomega) {
				var mc clusterv1.ManagedCluster
				g.Expect(hubServer.Client.Get(ctx, client.ObjectKey{Name: name}, &mc)).To(Succeed())
				g.Expect(mc.Spec.HubAcceptsClient).To(BeTrue())
				g.Expect(managedClusterAvailable(ctx, name)).To(Equal(metav1.ConditionTrue))

				var inv imperatorv1alpha1.ClusterInventory
				g.Expect(hubServer.Client.Get(ctx, client.ObjectKey{Namespace: name, Name: name}, &inv)).To(Succeed())
				g.Expect(inv.Spec.ClusterName).To(Equal(name))
				g.Expect(inv.Status.ObservedAt).NotTo(BeNil())
				g.Expect(inv.Status.Machines).To(ConsistOf(HaveField("Name", machineName)))
			}).WithTimeout(10 * time.Second).Should(Succeed())
		}
	})

	It("does not write to the hub cluster while nothing changes", func(ctx SpecContext) {
		resourceVersions := func(g Gomega) []string {
			var inv imperatorv1alpha1.ClusterInventory
			g.Expect(hubServer.Client.Get(ctx, client.ObjectKey{Namespace: "alpha", Name: "alpha"}, &inv)).To(Succeed())
			var mc clusterv1.ManagedCluster
			g.Expect(hubServer.Client.Get(ctx, client.ObjectKey{Name: "alpha"}, &mc)).To(Succeed())
			return []string{inv.ResourceVersion, mc.ResourceVersion}
		}
		// An earlier spec's change may still be on its way (the hub coalesces
		// writes per persist interval): start once nothing was written for
		// two intervals.
		var before []string
		Eventually(func(g Gomega) {
			first := resourceVersions(g)
			time.Sleep(2 * persistInterval)
			g.Expect(resourceVersions(g)).To(Equal(first))
			before = first
		}).WithTimeout(10 * persistInterval).Should(Succeed())
		// A dead reporter writes nothing either: the hub must keep hearing
		// alpha's heartbeats (every 300ms) all along the window.
		windowStart := time.Now()
		Consistently(func(g Gomega) []string {
			c := clusterAtHub(g, "alpha")
			g.Expect(c.Connected).To(BeTrue(), "alpha's reporter is connected")
			g.Expect(c.LastHeartbeat).To(BeTemporally(">", time.Now().Add(-2*time.Second)), "alpha's reporter heartbeats")
			return resourceVersions(g)
		}).WithTimeout(5 * persistInterval).Should(Equal(before))
		Expect(clusterAtHub(Default, "alpha").LastHeartbeat).To(BeTemporally(">", windowStart),
			"alpha's reporter heartbeated during the window: the quiet came from no change, not from a silent reporter")
	})

	It("shows a Machine status change on a spoke at the hub within 2 seconds", func(ctx SpecContext) {
		betaUsed := usedAtHub("beta", "compute-xlarge")(Default)
		setUsed(ctx, spokes["alpha"], "compute-xlarge", 1)
		Eventually(usedAtHub("alpha", "compute-xlarge")).
			WithTimeout(2 * time.Second).WithPolling(20 * time.Millisecond).Should(Equal(int32(1)))
		// The other cluster is still at the hub, its figures untouched.
		Consistently(usedAtHub("beta", "compute-xlarge")).
			WithTimeout(500 * time.Millisecond).Should(Equal(betaUsed))
	})

	It("shows a spoke's new Machine and its node-pool health at the hub, and drops the Machine once it is deleted", func(ctx SpecContext) {
		s := spokes["alpha"]
		const name, group = "extra-machine", "extra"
		machine := wrappers.MakeMachine(name, group).Type("compute-medium", "6", "48Gi", 1).Node("extra-node", "compute-medium").Obj()
		pool := &imperatorv1alpha1.MachineNodePool{
			ObjectMeta: metav1.ObjectMeta{Name: imperatorv1alpha1.NodePoolName(name)},
			Spec:       imperatorv1alpha1.MachineNodePoolSpec{MachineGroup: group},
		}
		Expect(s.Client.Create(ctx, machine)).To(Succeed())
		Expect(s.Client.Create(ctx, pool)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(s.Client.Delete(ctx, pool))).To(Succeed())
			Expect(client.IgnoreNotFound(s.Client.Delete(ctx, machine))).To(Succeed())
		})
		nodesAtHub := func(g Gomega) *federationv1.NodeCounts {
			m, ok := clusterAtHub(g, "alpha").Machine(name)
			g.Expect(ok).To(BeTrue(), "Machine %s at the hub", name)
			g.Expect(m.GetTypes()).To(HaveLen(1))
			return m.GetTypes()[0].GetNodes()
		}
		Eventually(nodesAtHub).WithTimeout(10 * time.Second).Should(HaveField("NotReady", int32(0)))

		By("the node-pool controller finding the pool's node not ready")
		patch := client.MergeFrom(pool.DeepCopy())
		pool.Status.NodePool = []imperatorv1alpha1.NodePoolStatus{
			{Name: "extra-node", MachineType: "compute-medium", Condition: imperatorv1alpha1.NodeConditionNotReady},
		}
		Expect(s.Client.Status().Patch(ctx, pool, patch)).To(Succeed())
		Eventually(nodesAtHub).WithTimeout(2 * time.Second).WithPolling(20 * time.Millisecond).
			Should(HaveField("NotReady", int32(1)))

		By("deleting the Machine on the spoke")
		Expect(s.Client.Delete(ctx, machine)).To(Succeed())
		Eventually(func(g Gomega) bool {
			_, ok := clusterAtHub(g, "alpha").Machine(name)
			return ok
		}).WithTimeout(2 * time.Second).WithPolling(20 * time.Millisecond).Should(BeFalse())
		_, ok := clusterAtHub(Default, "alpha").Machine(machineName)
		Expect(ok).To(BeTrue(), "the spoke's other Machine stays at the hub")
	})
})
