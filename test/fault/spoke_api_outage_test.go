package fault

import (
	"context"
	"fmt"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
	"github.com/imperator-federation/imperator/test/e2e"
)

// SpokeAPIOutageInput configures SpokeAPIOutageSpec.
type SpokeAPIOutageInput struct {
	Input
	// Spoke is the cluster whose kube-apiserver stops (etcd keeps running)
	// for For.
	Spoke string
	For   time.Duration
	// NextAvailable is the change made to the spoke's burst Machine right
	// after its API server is back: the hub must learn it.
	NextAvailable int32
}

// SpokeAPIOutageSpec stops a spoke cluster's kube-apiserver: its agent loses
// its leader Lease but does not exit, and as the last leader keeps reporting,
// so the hub shows the spoke STALE (with the reason) once the agent's
// --api-server-stale-after has passed — never OFFLINE, never missing — and
// the other spokes stay Available. Once the API server is back, the hub shows
// the spoke current again, including a Machine change made right away.
func SpokeAPIOutageSpec(ctx context.Context, in SpokeAPIOutageInput) {
	env := in.Env
	WaitRecovered(ctx, env, time.Now())
	cluster := in.Fleet.Spokes[in.Spoke]
	Expect(cluster).NotTo(BeNil(), "the fleet has a spoke %s", in.Spoke)
	others := slices.DeleteFunc(spokeNames(env), func(n string) bool { return n == in.Spoke })

	// watch fails on any state of the spoke but AVAILABLE and STALE, and
	// returns the state it saw.
	watch := func(g Gomega) queryv1.ClusterState {
		resp, err := env.Ctl.Clusters(ctx)
		g.Expect(err).NotTo(HaveOccurred(), "the hub answers while a spoke's API server is down")
		c := e2e.ClusterNamed(resp, in.Spoke)
		g.Expect(c).NotTo(BeNil(), "the hub knows %s", in.Spoke)
		st := c.GetState()
		if st != queryv1.ClusterState_CLUSTER_STATE_AVAILABLE && st != queryv1.ClusterState_CLUSTER_STATE_STALE {
			StopTrying(fmt.Sprintf("the hub shows %s %s (%q): it must stay Available, then Stale", in.Spoke, st, c.GetStateMessage())).Now()
		}
		if st == queryv1.ClusterState_CLUSTER_STATE_STALE {
			g.Expect(c.GetStateMessage()).NotTo(BeEmpty(), "the hub says why %s is stale", in.Spoke)
		}
		return st
	}

	var detect time.Duration
	ExpectAlwaysAvailable(ctx, env, others, func() {
		By(fmt.Sprintf("stopping %s's API server for %s", in.Spoke, in.For))
		// Counted from the stop's start: kube-apiserver takes seconds to
		// shut down, and stops answering at its start.
		stopped := time.Now()
		Expect(cluster.StopAPIServer()).To(Succeed())
		DeferCleanup(func(ctx context.Context) { Expect(cluster.StartAPIServer(ctx)).To(Succeed()) })

		By("the hub shows the spoke stale, never offline")
		Eventually(ctx, watch).WithTimeout(in.For).WithPolling(poll).
			Should(Equal(queryv1.ClusterState_CLUSTER_STATE_STALE), "the hub shows %s stale within the outage", in.Spoke)
		detect = time.Since(stopped)
		Consistently(ctx, watch).WithTimeout(max(in.For-time.Since(stopped), 0)).WithPolling(poll).
			Should(Equal(queryv1.ClusterState_CLUSTER_STATE_STALE), "%s stays stale until its API server is back", in.Spoke)
		Expect(in.Fleet.AgentRunning(in.Spoke)).To(BeTrue(), "the agent of %s exited during the outage", in.Spoke)
	})

	By("starting the API server again and changing a Machine at once: the hub shows the spoke current, with the change")
	Expect(cluster.StartAPIServer(ctx)).To(Succeed())
	restarted := time.Now()
	Eventually(ctx, func() error { return SetBurstAvailable(ctx, env.Spoke(in.Spoke).Client, in.NextAvailable) }).
		WithTimeout(settle).WithPolling(poll).Should(Succeed(), "a Machine write once the API server is back")
	Eventually(ctx, func(g Gomega) {
		watch(g)
		g.Expect(HubMatchesSpokes(ctx, env)).To(Succeed())
	}).WithTimeout(settle).WithPolling(poll).Should(Succeed(), "the hub's answer equals the spokes' truth again, never offline meanwhile")
	recovered := time.Since(restarted)
	Expect(in.Fleet.AgentRunning(in.Spoke)).To(BeTrue(), "the agent of %s exited", in.Spoke)
	in.Table.Add(Row{
		Fault:   fmt.Sprintf("%s's API server stopped for %s", in.Spoke, in.For),
		Detect:  detect,
		Recover: recovered,
		Note:    "detect = shown STALE, from the API server's stop (agent's --api-server-stale-after 30 s); never OFFLINE, agent never exited; a change made right after the restart arrived; other spokes Available throughout",
	})
}
