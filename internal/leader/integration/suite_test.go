// Package integration proves, against a real control plane whose API server
// is stopped and started again, that the hub's leader campaign steps down
// and wins the lead back without ending the process.
package integration

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/imperator-federation/imperator/internal/leader"
	"github.com/imperator-federation/imperator/test/util/framework"
	"github.com/imperator-federation/imperator/test/util/harness"
)

func TestLeader(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Hub leader campaign")
}

const namespace = "imperator-system"

var cluster *harness.Cluster

var _ = BeforeSuite(func(ctx SpecContext) {
	framework.SetLogger(0)
	cluster = framework.StartSuite(ctx, framework.Options{Name: "leader", Harness: true, Namespaces: []string{namespace}}).Cluster
}, NodeTimeout(3*time.Minute))

// replica is one hub replica's campaign and the leader-only work it runs.
type replica struct {
	campaign *leader.Campaign
	// working counts the leader runnables running now.
	working atomic.Int32
	ended   chan error
}

func startReplica(ctx context.Context, name string) *replica {
	r := &replica{ended: make(chan error, 1)}
	r.campaign = &leader.Campaign{
		Config: cluster.Config, Namespace: namespace, Name: "imperator-hub-leader", Identity: name,
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
		Log: ctrl.Log.WithName(name),
		Setup: func(mgr manager.Manager) error {
			return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
				r.working.Add(1)
				defer r.working.Add(-1)
				<-ctx.Done()
				return nil
			}))
		},
	}
	go func() { r.ended <- r.campaign.Start(ctx) }()
	return r
}

var _ = Describe("Leader campaign", func() {
	It("steps down when the hub cluster's API server stops, keeps the process up, and leads again when it is back", func(ctx SpecContext) {
		runCtx, stop := context.WithCancel(context.Background())
		a, b := startReplica(runCtx, "replica-a"), startReplica(runCtx, "replica-b")
		DeferCleanup(func() {
			stop()
			for _, r := range []*replica{a, b} {
				Eventually(r.ended).WithTimeout(30 * time.Second).Should(Receive(BeNil()))
			}
		})
		leaders := func() int {
			n := 0
			for _, r := range []*replica{a, b} {
				if r.campaign.Leading() {
					n++
					Expect(r.working.Load()).To(BeEquivalentTo(1), "the leader runs its work")
				} else {
					Expect(r.working.Load()).To(BeEquivalentTo(0), "a replica that does not lead runs no leader work")
				}
			}
			return n
		}

		By("exactly one replica leads and runs the leader's work")
		Eventually(leaders).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Equal(1))
		Consistently(leaders).WithTimeout(3 * time.Second).WithPolling(100 * time.Millisecond).Should(Equal(1))
		terms := a.campaign.Terms() + b.campaign.Terms()

		By("stopping the API server: the leader steps down within its renew deadline, and no campaign ends")
		Expect(cluster.StopAPIServer()).To(Succeed())
		DeferCleanup(func(ctx context.Context) { Expect(cluster.StartAPIServer(ctx)).To(Succeed()) })
		Eventually(leaders).WithTimeout(15 * time.Second).WithPolling(100 * time.Millisecond).Should(Equal(0))
		Consistently(func() int { return len(a.ended) + len(b.ended) }).WithTimeout(5*time.Second).Should(Equal(0),
			"a campaign ended: losing the lead must not end the replica")

		By("starting the API server again: one replica leads again, in a new term")
		Expect(cluster.StartAPIServer(ctx)).To(Succeed())
		Eventually(leaders).WithTimeout(60 * time.Second).WithPolling(100 * time.Millisecond).Should(Equal(1))
		Expect(a.campaign.Terms() + b.campaign.Terms()).To(BeNumerically(">", terms))
	}, SpecTimeout(3*time.Minute))
})
