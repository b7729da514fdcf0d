package e2e

import (
	"context"
	"fmt"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// HubRestartInput configures HubRestartSpec.
type HubRestartInput struct {
	Env    *Env
	Spokes []string
	// Type and Count: a capacity question whose answer must survive.
	Type        string
	Count       int32
	WantCluster string
}

// HubRestartSpec is journey 7: the hub restarts; the spokes reconnect by
// themselves, and the clusters, their usage and capacity answers are what
// they were before.
func HubRestartSpec(ctx context.Context, in HubRestartInput) {
	if in.Env.Fleet == nil {
		Skip("the fleet's processes are not under the suite's control (E2E_FLEET)")
	}
	ctl := in.Env.Ctl

	// The figures compared across the restart are taken once the hub shows
	// the spokes' own (their Machines' statuses): on two replicas, the
	// figures of a spoke streaming to the other replica reach this one
	// through the hub cluster's API, up to a persistence interval late, so
	// right after the previous journey (reservations growing back on a
	// node uncordoned) this replica may still show older ones, which the
	// restarted replica, reading the latest persisted inventory, rightly
	// no longer shows.
	By("every spoke is Available before the restart and the hub shows its figures")
	var before *queryv1.GetUsageResponse
	Eventually(ctx, func(g Gomega) {
		resp, err := ctl.Clusters(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		for _, name := range in.Spokes {
			g.Expect(ClusterNamed(resp, name).GetState()).To(Equal(queryv1.ClusterState_CLUSTER_STATE_AVAILABLE), "state of %s", name)
		}
		expectHubMatchesSpokes(g, ctx, in.Env, in.Spokes)
		before, err = ctl.Usage(ctx)
		g.Expect(err).NotTo(HaveOccurred())
	}).WithTimeout(joinTimeout).WithPolling(poll).Should(Succeed())
	Expect(usageTable(before)).NotTo(BeEmpty())
	tokensBefore, err := ctl.Tokens(ctx)
	Expect(err).NotTo(HaveOccurred())
	Expect(tokensBefore.GetTokens()).NotTo(BeEmpty())

	By("stopping the hub: imperatorctl says the hub is unreachable")
	Expect(in.Env.Fleet.StopHub()).To(Succeed())
	DeferCleanup(func(ctx context.Context) { Expect(in.Env.Fleet.StartHub(ctx)).To(Succeed()) })
	res, err := ctl.Run(ctx, "clusters")
	Expect(err).NotTo(HaveOccurred())
	Expect(res.ExitCode).To(Equal(3), "%s", res)

	By("starting the hub again: the spokes reconnect by themselves")
	restarted := time.Now()
	Expect(in.Env.Fleet.StartHub(ctx)).To(Succeed())
	Eventually(ctx, func(g Gomega) {
		resp, err := ctl.Clusters(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		for _, name := range in.Spokes {
			c := ClusterNamed(resp, name)
			g.Expect(c.GetState()).To(Equal(queryv1.ClusterState_CLUSTER_STATE_AVAILABLE), "state of %s", name)
			g.Expect(c.GetConnected()).To(BeTrue(), "%s connected", name)
		}
	}).WithTimeout(reconnectTimeout).WithPolling(poll).Should(Succeed())
	AddReportEntry("hub restart", fmt.Sprintf("every spoke Available again %s after the hub started", time.Since(restarted).Round(time.Millisecond)))

	By("nothing is lost: usage (the spokes' figures), ManagedClusters, tokens and capacity answers are as before")
	Eventually(ctx, func(g Gomega) {
		after, err := ctl.Usage(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(usageTable(after)).To(Equal(usageTable(before)))
		expectHubMatchesSpokes(g, ctx, in.Env, in.Spokes)
		for _, name := range in.Spokes {
			expectManagedCluster(g, ctx, in.Env.Hub.Client, name, metav1.ConditionTrue)
		}
		tokens, err := ctl.Tokens(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(tokenTable(tokens)).To(Equal(tokenTable(tokensBefore)), "the hub's bootstrap tokens")
		answer, code, err := ctl.Capacity(ctx, in.Type, "--count", strconv.Itoa(int(in.Count)), "--same-cluster")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(BeZero())
		g.Expect(CandidateNames(answer)).To(HaveExactElements(in.WantCluster), "candidates")
	}).WithTimeout(hubPropagation).WithPolling(poll).Should(Succeed())
}
