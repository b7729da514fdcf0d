package integration

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/internal/pki"
)

// hellosReceived is the number of Report streams the hub has opened (the
// Hellos it received), of every cluster.
func hellosReceived() float64 {
	GinkgoHelper()
	families, err := hub.Metrics().Gather()
	Expect(err).NotTo(HaveOccurred())
	total := 0.0
	for _, f := range families {
		if f.GetName() != "imperator_hub_stream_messages_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["direction"] == "received" && labels["type"] == "hello" {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// restartHub replaces the running hub with one started with opts.
func restartHub(opts hubtest.Options) {
	GinkgoHelper()
	Expect(hub.Stop()).To(Succeed())
	opts.Address, opts.Namespace, opts.GracePeriod, opts.PersistInterval = hubAddr, agentNamespace, gracePeriod, persistInterval
	var err error
	hub, err = hubtest.Start(hubServer.Config, opts)
	Expect(err).NotTo(HaveOccurred())
}

var _ = Describe("Stream hand-over", Ordered, func() {
	It("renews a short-lived certificate at two thirds of its life while streaming, through three renewals, without the cluster ever shown Unknown", func(ctx SpecContext) {
		// Renewal is due 8s after each certificate is obtained.
		const validity = 12 * time.Second
		restartHub(hubtest.Options{ClientCertValidity: validity})
		DeferCleanup(restartHub, hubtest.Options{})

		// A spoke that joins this hub, so that its certificates are short-lived.
		gamma := startSpoke(ctx, "gamma", spokes["alpha"].caFile)
		DeferCleanup(deregister, "gamma")
		Expect(gamma.startReporter(hubAddr)).To(Succeed())
		DeferCleanup(gamma.stopReporter)

		Eventually(func(g Gomega) {
			c := clusterAtHub(g, "gamma")
			g.Expect(c.Connected).To(BeTrue())
			g.Expect(string(c.Liveness)).To(Equal("Available"))
			g.Expect(managedClusterAvailable(ctx, "gamma")).To(Equal(metav1.ConditionTrue))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		first, err := pki.ParseCertificate(storedCertificate(ctx, Default, gamma))
		Expect(err).NotTo(HaveOccurred())
		Expect(first.NotAfter).To(BeTemporally("<", time.Now().Add(validity+time.Second)), "a certificate of the short-lived hub")
		hellos := hellosReceived()

		// From now on the cluster must be connected and Available at every
		// look, at the hub and in its ManagedCluster, while the agent renews.
		serials := map[string]bool{first.SerialNumber.String(): true}
		last := first
		Eventually(func(g Gomega) {
			c, ok := hub.Cluster("gamma")
			if !ok || !c.Connected || string(c.Liveness) != "Available" {
				StopTrying("gamma is no longer shown connected and Available at the hub while renewing").Now()
			}
			if managedClusterAvailable(ctx, "gamma") != metav1.ConditionTrue {
				StopTrying("gamma's ManagedCluster is no longer Available while renewing").Now()
			}
			cert, err := pki.ParseCertificate(storedCertificate(ctx, g, gamma))
			g.Expect(err).NotTo(HaveOccurred())
			if !serials[cert.SerialNumber.String()] {
				serials[cert.SerialNumber.String()] = true
				if !cert.NotAfter.After(last.NotAfter) {
					StopTrying("a renewed certificate does not outlive the one it replaces").Now()
				}
				last = cert
			}
			g.Expect(serials).To(HaveLen(4), "the joined certificate and three renewals")
		}).WithTimeout(4*validity + 20*time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())

		// Every renewal moved the stream to the new certificate: a new Report
		// stream each time (other spokes may have opened more). The last
		// one's Hello may reach the hub just after its certificate is stored.
		Eventually(func() float64 { return hellosReceived() - hellos }).
			WithTimeout(5 * time.Second).WithPolling(20 * time.Millisecond).Should(BeNumerically(">=", 3))
		// The joined certificate has long expired; the stream is live.
		Expect(time.Now()).To(BeTemporally(">", first.NotAfter))
		setUsed(ctx, gamma, "compute-xlarge", 1)
		Eventually(usedAtHub("gamma", "compute-xlarge")).
			WithTimeout(5 * time.Second).WithPolling(20 * time.Millisecond).Should(Equal(int32(1)))
	})

	It("moves its streams to new connections when the hub recycles them, without being shown disconnected", func(ctx SpecContext) {
		const age = 2 * time.Second
		restartHub(hubtest.Options{MaxConnectionAge: age, MaxConnectionAgeGrace: 10 * time.Second})
		DeferCleanup(restartHub, hubtest.Options{})
		everyConnected := func(g Gomega) {
			for name := range spokes {
				c := clusterAtHub(g, name)
				g.Expect(c.Connected).To(BeTrue(), "%s connected", name)
				g.Expect(string(c.Liveness)).To(Equal("Available"), "%s Available", name)
			}
		}
		Eventually(everyConnected).WithTimeout(15 * time.Second).Should(Succeed())
		hellos := hellosReceived()
		// Each connection lives age (+10% jitter); the spokes move to new
		// ones within the grace, while the old ones still serve.
		Consistently(everyConnected).WithTimeout(4 * age).WithPolling(20 * time.Millisecond).Should(Succeed())
		Expect(hellosReceived()-hellos).To(BeNumerically(">=", 2*len(spokes)), "each spoke's connection was recycled at least twice")
	})
})
