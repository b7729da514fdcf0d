package e2e

import (
	"context"
	"fmt"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// OfflineInput configures OfflineSpec.
type OfflineInput struct {
	Env   *Env
	Spoke string
	// MachineName is a Machine of the spoke whose figures the hub shows.
	MachineName string
	// Type and Count: a capacity question the spoke answers while online.
	Type  string
	Count int32
	// Node is a node of the Machine's pool that is cordoned while the agent
	// is down: the hub must show it not-ready once the agent is back.
	Node string
}

// OfflineSpec is journey 6: a spoke's agent stops; the hub marks the spoke
// offline within its grace period and leaves it out of capacity answers;
// when the agent is back the spoke is Available again with current figures.
func OfflineSpec(ctx context.Context, in OfflineInput) {
	if in.Env.Fleet == nil {
		Skip("the fleet's processes are not under the suite's control (E2E_FLEET)")
	}
	ctl := in.Env.Ctl
	spoke := in.Env.Spoke(in.Spoke)
	m := &imperatorv1alpha1.Machine{}
	Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.MachineName}, m)).To(Succeed())
	group := Group(m)
	entry := poolEntry(ctx, spoke.Client, m, in.Node)
	Expect(entry).NotTo(BeNil(), "%s is in the pool of %s", in.Node, m.Name)
	typ := entry.MachineType[0].Name
	capacityArgs := []string{in.Type, "--count", strconv.Itoa(int(in.Count)), "--same-cluster"}
	var countsBefore string
	Eventually(ctx, func(g Gomega) { countsBefore = countsString(hubNodeCounts(g, ctx, ctl, in.Spoke, group, typ)) }).
		WithTimeout(hubPropagation).WithPolling(poll).Should(Succeed())

	By(fmt.Sprintf("stopping the agent of %s", in.Spoke))
	Expect(in.Env.Fleet.StopAgent(in.Spoke)).To(Succeed())
	stopped := time.Now()
	DeferCleanup(func(ctx context.Context) { Expect(in.Env.Fleet.StartAgent(ctx, in.Spoke)).To(Succeed()) })

	By(fmt.Sprintf("the hub marks %s offline within its grace period (%s)", in.Spoke, in.Env.GracePeriod))
	Eventually(ctx, func(g Gomega) {
		resp, err := ctl.Clusters(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		c := ClusterNamed(resp, in.Spoke)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.GetState()).To(Equal(queryv1.ClusterState_CLUSTER_STATE_OFFLINE), "state of %s", in.Spoke)
		g.Expect(c.GetConnected()).To(BeFalse())
	}).WithTimeout(in.Env.GracePeriod + offlineSlack).WithPolling(poll).Should(Succeed())
	AddReportEntry("offline detection", fmt.Sprintf("%s offline %s after its agent stopped (grace period %s)",
		in.Spoke, time.Since(stopped).Round(time.Millisecond), in.Env.GracePeriod))

	By("its ManagedCluster is no longer available and the other spokes are unaffected")
	Eventually(ctx, func(g Gomega) {
		expectManagedCluster(g, ctx, in.Env.Hub.Client, in.Spoke, metav1.ConditionUnknown)
		resp, err := ctl.Clusters(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		for name := range in.Env.Spokes {
			if name != in.Spoke {
				g.Expect(ClusterNamed(resp, name).GetState()).To(Equal(queryv1.ClusterState_CLUSTER_STATE_AVAILABLE), "state of %s", name)
			}
		}
	}).WithTimeout(hubPropagation).WithPolling(poll).Should(Succeed())

	By("capacity answers leave it out as offline")
	answer, code, err := ctl.Capacity(ctx, capacityArgs...)
	Expect(err).NotTo(HaveOccurred())
	Expect(CandidateNames(answer)).NotTo(ContainElement(in.Spoke), "an offline spoke is no candidate")
	Expect(ExclusionOf(answer, in.Spoke).GetReason()).To(Equal(queryv1.ExclusionReason_EXCLUSION_REASON_OFFLINE))
	Expect(code == 0).To(Equal(answer.GetSatisfiable()), "exit code %d and satisfiable %t agree", code, answer.GetSatisfiable())

	By(fmt.Sprintf("%s changes while its agent is down: %s is cordoned", in.Spoke, in.Node))
	Expect(UpdateNode(ctx, spoke.Client, in.Node, func(n *corev1.Node) { n.Spec.Unschedulable = true })).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		Expect(UpdateNode(ctx, spoke.Client, in.Node, func(n *corev1.Node) { n.Spec.Unschedulable = false })).To(Succeed())
	})

	By(fmt.Sprintf("starting the agent of %s again", in.Spoke))
	restarted := time.Now()
	Expect(in.Env.Fleet.StartAgent(ctx, in.Spoke)).To(Succeed())
	Eventually(ctx, func(g Gomega) {
		resp, err := ctl.Clusters(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		c := ClusterNamed(resp, in.Spoke)
		g.Expect(c.GetState()).To(Equal(queryv1.ClusterState_CLUSTER_STATE_AVAILABLE), "state of %s", in.Spoke)
		g.Expect(c.GetConnected()).To(BeTrue())
		// The figures read before the stop are older than the restart by
		// the grace period at least. observedAt is the agent's instant on
		// the replica holding the spoke's stream; a replica that follows
		// the spoke through the hub cluster's API (the spoke streams to
		// another replica) reads it from its ClusterInventory's
		// status.observedAt, a metav1.Time kept in whole seconds, so the
		// figures of the new run may show the restart's second itself.
		g.Expect(c.GetObservedAt().AsTime()).To(BeTemporally(">=", restarted.Truncate(time.Second)), "figures observed after the restart (in whole seconds)")
		expectManagedCluster(g, ctx, in.Env.Hub.Client, in.Spoke, metav1.ConditionTrue)
	}).WithTimeout(joinTimeout).WithPolling(poll).Should(Succeed())

	By("the hub's figures are current: the node cordoned meanwhile is not-ready, usage matches the Machine")
	Eventually(ctx, func(g Gomega) {
		g.Expect(countsString(hubNodeCounts(g, ctx, ctl, in.Spoke, group, typ))).
			To(Equal(shiftCounts(countsBefore, "ready", "notReady")), "hub node counts of %s", typ)
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.MachineName}, m)).To(Succeed())
		expectHubMatchesMachine(g, ctx, ctl, in.Spoke, m)
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By(fmt.Sprintf("%s is uncordoned and %s takes capacity again", in.Node, in.Spoke))
	Expect(UpdateNode(ctx, spoke.Client, in.Node, func(n *corev1.Node) { n.Spec.Unschedulable = false })).To(Succeed())
	Eventually(ctx, func(g Gomega) {
		g.Expect(countsString(hubNodeCounts(g, ctx, ctl, in.Spoke, group, typ))).To(Equal(countsBefore), "hub node counts of %s", typ)
		answer, code, err := ctl.Capacity(ctx, capacityArgs...)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(BeZero())
		g.Expect(CandidateNames(answer)).To(ContainElement(in.Spoke), "%s is a candidate again", in.Spoke)
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
}
