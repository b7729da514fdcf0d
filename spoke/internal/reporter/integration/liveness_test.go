package integration

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/imperator-federation/imperator/hub/hubtest"
)

// Liveness: a silent spoke goes Unknown after the grace period and comes
// back; a restarted hub serves what it persisted as stale until the spokes
// reconnect. Each spec starts once every spoke reports to the hub.
var _ = Describe("Federation: liveness and hub restarts", func() {
	BeforeEach(everySpokeReports)

	It("turns a silent spoke Unknown after the grace period and back when it returns", func(ctx SpecContext) {
		beta := spokes["beta"]
		Expect(beta.stopReporter()).To(Succeed())
		Eventually(func(g Gomega) {
			c := clusterAtHub(g, "beta")
			g.Expect(string(c.Liveness)).To(Equal("Unknown"))
			g.Expect(c.Stale()).To(BeTrue())
			m, ok := c.Machine(machineName)
			g.Expect(ok).To(BeTrue(), "figures are kept")
			g.Expect(m.GetTypes()).To(HaveLen(3))
			g.Expect(managedClusterAvailable(ctx, "beta")).To(Equal(metav1.ConditionUnknown))
		}).WithTimeout(gracePeriod + 5*time.Second).Should(Succeed())

		// Restarted without a token: it reuses the certificate it stored.
		beta.token = ""
		Expect(beta.startReporter(hubAddr)).To(Succeed())
		Eventually(func(g Gomega) {
			c := clusterAtHub(g, "beta")
			g.Expect(string(c.Liveness)).To(Equal("Available"))
			g.Expect(c.Connected).To(BeTrue())
			g.Expect(managedClusterAvailable(ctx, "beta")).To(Equal(metav1.ConditionTrue))
		}).WithTimeout(10 * time.Second).Should(Succeed())
	})

	It("serves persisted figures at once as stale after a hub restart, and is current after reconnect", func(ctx SpecContext) {
		bothCurrent := func(g Gomega) {
			for name := range spokes {
				c := clusterAtHub(g, name)
				g.Expect(c.Connected).To(BeTrue(), "%s reconnected", name)
				g.Expect(c.Stale()).To(BeFalse(), "%s current", name)
			}
		}
		// A hub whose coalesced writes are never due while the spec runs:
		// only its flush on shutdown can persist the figure below.
		Expect(hub.Stop()).To(Succeed())
		var err error
		hub, err = hubtest.Start(hubServer.Config, hubtest.Options{Address: hubAddr, Namespace: agentNamespace, GracePeriod: gracePeriod, PersistInterval: time.Hour})
		Expect(err).NotTo(HaveOccurred())
		Eventually(bothCurrent).WithTimeout(15 * time.Second).Should(Succeed())
		// A figure no earlier spec used, so that only this hub can have written it.
		setUsed(ctx, spokes["alpha"], "compute-xlarge", 3)
		Eventually(usedAtHub("alpha", "compute-xlarge")).
			WithTimeout(2 * time.Second).WithPolling(10 * time.Millisecond).Should(Equal(int32(3)))

		Expect(hub.Stop()).To(Succeed())
		hub, err = hubtest.Start(hubServer.Config, hubtest.Options{Address: hubAddr, Namespace: agentNamespace, GracePeriod: gracePeriod, PersistInterval: persistInterval})
		Expect(err).NotTo(HaveOccurred())

		// Figures are served before any spoke reconnected, marked stale.
		c, ok := hub.Cluster("alpha")
		Expect(ok).To(BeTrue())
		Expect(c.Restored).To(BeTrue())
		Expect(c.Stale()).To(BeTrue())
		Expect(usedAtHub("alpha", "compute-xlarge")(Default)).To(Equal(int32(3)))

		Eventually(bothCurrent).WithTimeout(15 * time.Second).Should(Succeed())

		setUsed(ctx, spokes["alpha"], "compute-xlarge", 2)
		Eventually(usedAtHub("alpha", "compute-xlarge")).
			WithTimeout(2 * time.Second).WithPolling(20 * time.Millisecond).Should(Equal(int32(2)))
	})

	// beta's deregistration and its return are one story, in one spec: it
	// ends with beta reporting again, as the specs after it expect.
})
