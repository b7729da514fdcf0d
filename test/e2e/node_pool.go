package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// NodePoolInput configures NodePoolSpec.
type NodePoolInput struct {
	Env         *Env
	Spoke       string
	MachineName string
	// MaintenanceNode is a node of the pool in mode maintenance.
	MaintenanceNode string
	// UnhealthyNode is a ready node that is cordoned.
	UnhealthyNode string
}

// NodePoolSpec is journey 4: the node-pool follows a platform engineer's
// mode changes and the nodes' health, and so do the hub's answers.
//
// A maintenance node is put into ready and back: its labels, the
// MachineNodePool status and the hub's node counts follow.
//
// A ready node becomes unhealthy: the agent treats any of the
// node.kubernetes.io/{not-ready,unschedulable,network-unavailable,
// unreachable} taints alike. The journey cordons the node, which gives it
// node.kubernetes.io/unschedulable:NoSchedule. It does not taint it
// unreachable by hand: on a node whose kubelet (kwok) keeps reporting Ready,
// kube-controller-manager's node lifecycle controller removes a hand-made
// unreachable or not-ready NoSchedule taint within a second, so the agent
// never sees a stable unhealthy node. Cordoning keeps the reservation pods
// bound (NoSchedule does not evict), but a guest's injected affinity asks
// for node-pool=ready nodes, so the units held there are not reserved any
// more: the Machine's reserved count and the hub's free units drop by them
// (to 0 when the node is the type's only ready one), the InsufficientCapacity
// condition names the node, and all of it comes back with the uncordon.
func NodePoolSpec(ctx context.Context, in NodePoolInput) {
	spoke := in.Env.Spoke(in.Spoke)
	m := &imperatorv1alpha1.Machine{}
	Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.MachineName}, m)).To(Succeed())
	group := Group(m)
	maintenance := poolEntry(ctx, spoke.Client, m, in.MaintenanceNode)
	Expect(maintenance).NotTo(BeNil(), "%s is in the pool of %s", in.MaintenanceNode, m.Name)
	Expect(maintenance.Mode).To(Equal(imperatorv1alpha1.NodePoolModeMaintenance))
	unhealthy := poolEntry(ctx, spoke.Client, m, in.UnhealthyNode)
	Expect(unhealthy).NotTo(BeNil(), "%s is in the pool of %s", in.UnhealthyNode, m.Name)
	Expect(unhealthy.Mode).To(Equal(imperatorv1alpha1.NodePoolModeReady))

	counts := func(typ string) string {
		var out string
		Eventually(ctx, func(g Gomega) { out = countsString(hubNodeCounts(g, ctx, in.Env.Ctl, in.Spoke, group, typ)) }).
			WithTimeout(hubPropagation).WithPolling(poll).Should(Succeed())
		return out
	}
	maintenanceType := maintenance.MachineType[0].Name
	maintenanceCountsBefore := counts(maintenanceType)

	setMode := func(mode imperatorv1alpha1.NodePoolMode) {
		GinkgoHelper()
		Expect(UpdateMachine(ctx, spoke.Client, in.MachineName, func(m *imperatorv1alpha1.Machine) {
			poolEntry(ctx, spoke.Client, m, in.MaintenanceNode).Mode = mode
		})).To(Succeed())
	}
	DeferCleanup(func(ctx context.Context) {
		Expect(UpdateMachine(ctx, spoke.Client, in.MachineName, func(m *imperatorv1alpha1.Machine) {
			poolEntry(ctx, spoke.Client, m, in.MaintenanceNode).Mode = imperatorv1alpha1.NodePoolModeMaintenance
		})).To(Succeed())
	})

	By(fmt.Sprintf("%s: mode maintenance → ready", in.MaintenanceNode))
	setMode(imperatorv1alpha1.NodePoolModeReady)
	Eventually(ctx, func(g Gomega) {
		expectPoolNode(g, ctx, spoke.Client, group, in.MaintenanceNode, *maintenance, imperatorv1alpha1.NodePoolReady)
		expectPoolCondition(g, ctx, spoke.Client, in.MachineName, in.MaintenanceNode, imperatorv1alpha1.NodeConditionReady)
		after := hubNodeCounts(g, ctx, in.Env.Ctl, in.Spoke, group, maintenanceType)
		g.Expect(countsString(after)).To(Equal(shiftCounts(maintenanceCountsBefore, "maintenance", "ready")), "hub node counts of %s", maintenanceType)
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By(fmt.Sprintf("%s: mode ready → maintenance", in.MaintenanceNode))
	setMode(imperatorv1alpha1.NodePoolModeMaintenance)
	Eventually(ctx, func(g Gomega) {
		expectPoolNode(g, ctx, spoke.Client, group, in.MaintenanceNode, *maintenance, imperatorv1alpha1.NodePoolMaintenance)
		expectPoolCondition(g, ctx, spoke.Client, in.MachineName, in.MaintenanceNode, imperatorv1alpha1.NodeConditionMaintenance)
		g.Expect(countsString(hubNodeCounts(g, ctx, in.Env.Ctl, in.Spoke, group, maintenanceType))).To(Equal(maintenanceCountsBefore))
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	unhealthyType := unhealthy.MachineType[0].Name
	unhealthyCountsBefore := counts(unhealthyType)
	var reservedBefore int32
	Eventually(ctx, func(g Gomega) {
		onNode := 0
		for _, p := range boundPods(reservationPods(g, ctx, spoke.Client, in.Env.Namespace, group, unhealthyType)) {
			if p.Spec.NodeName == in.UnhealthyNode {
				onNode++
			}
		}
		g.Expect(onNode).To(BeNumerically(">", 0), "%s reservation pods bound to %s", unhealthyType, in.UnhealthyNode)
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.MachineName}, m)).To(Succeed())
		u := StatusUsage(m, unhealthyType)
		g.Expect(u).NotTo(BeNil())
		g.Expect(u.Reserved).To(Equal(reservedOnReadyNodes(g, ctx, spoke.Client, in.Env.Namespace, group, unhealthyType)))
		reservedBefore = u.Reserved
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
	capacityBefore, code, err := in.Env.Ctl.Capacity(ctx, unhealthyType)
	Expect(err).NotTo(HaveOccurred())
	Expect(code).To(BeZero(), "capacity %s while %s is healthy", unhealthyType, in.UnhealthyNode)
	Expect(CandidateNames(capacityBefore)).To(ContainElement(in.Spoke), "capacity %s lists %s", unhealthyType, in.Spoke)
	freeBefore := CandidateOf(capacityBefore, in.Spoke).GetFree()

	setUnschedulable := func(ctx context.Context, unschedulable bool) {
		GinkgoHelper()
		Expect(UpdateNode(ctx, spoke.Client, in.UnhealthyNode, func(n *corev1.Node) { n.Spec.Unschedulable = unschedulable })).To(Succeed())
	}
	DeferCleanup(setUnschedulable, false)

	By(fmt.Sprintf("%s is cordoned: it gets the unschedulable taint and the pool marks it not-ready", in.UnhealthyNode))
	setUnschedulable(ctx, true)
	Eventually(ctx, func(g Gomega) {
		node := &corev1.Node{}
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.UnhealthyNode}, node)).To(Succeed())
		g.Expect(hasTaint(node, corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule)).To(BeTrue(), "taints of %s: %v", node.Name, node.Spec.Taints)
		expectPoolNode(g, ctx, spoke.Client, group, in.UnhealthyNode, *unhealthy, imperatorv1alpha1.NodePoolNotReady)
		expectPoolCondition(g, ctx, spoke.Client, in.MachineName, in.UnhealthyNode, imperatorv1alpha1.NodeConditionNotReady)
		g.Expect(countsString(hubNodeCounts(g, ctx, in.Env.Ctl, in.Spoke, group, unhealthyType))).
			To(Equal(shiftCounts(unhealthyCountsBefore, "ready", "notReady")), "hub node counts of %s", unhealthyType)
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By(fmt.Sprintf("the units held on %s are not reserved: no guest can take them, the capacity answer drops them", in.UnhealthyNode))
	var freeWhileNotReady int32
	var usageWhileNotReady string
	Eventually(ctx, func(g Gomega) {
		// What a guest can take now: reservations bound to the type's
		// other node-pool=ready nodes.
		onReady := reservedOnReadyNodes(g, ctx, spoke.Client, in.Env.Namespace, group, unhealthyType)
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.MachineName}, m)).To(Succeed())
		u := StatusUsage(m, unhealthyType)
		g.Expect(u).NotTo(BeNil())
		usageWhileNotReady = statusUsageString(u)
		g.Expect(u.Reserved).To(Equal(onReady), "reserved %s units of Machine %s while %s is not-ready (%s)",
			unhealthyType, in.MachineName, in.UnhealthyNode, usageWhileNotReady)
		g.Expect(m.Status.Conditions).To(ContainElement(And(
			HaveField("Type", imperatorv1alpha1.ConditionInsufficientCapacity),
			HaveField("Status", metav1.ConditionTrue),
			HaveField("Message", And(
				ContainSubstring(unhealthyType+": "),
				ContainSubstring("reservation pods on nodes that are not ready"),
				ContainSubstring(in.UnhealthyNode+" ("+string(imperatorv1alpha1.NodePoolNotReady)+")"))))),
			"conditions of Machine %s", in.MachineName)
		answer, _, err := in.Env.Ctl.Capacity(ctx, unhealthyType)
		g.Expect(err).NotTo(HaveOccurred())
		freeWhileNotReady = 0
		if c := CandidateOf(answer, in.Spoke); c != nil {
			freeWhileNotReady = c.GetFree()
		} else if e := ExclusionOf(answer, in.Spoke); e != nil {
			freeWhileNotReady = e.GetFree()
		}
		g.Expect(freeWhileNotReady).To(Equal(max(0, min(onReady, u.Maximum-u.Used-u.Waiting))),
			"free %s units of %s at the hub while %s is not-ready (Machine status %s)", unhealthyType, in.Spoke, in.UnhealthyNode, usageWhileNotReady)
	}).WithTimeout(hubPropagation).WithPolling(poll).Should(Succeed())
	Expect(freeWhileNotReady).To(BeNumerically("<", freeBefore), "free %s units of %s: the units on %s still count", unhealthyType, in.Spoke, in.UnhealthyNode)
	AddReportEntry(fmt.Sprintf("capacity %s while %s is not-ready", unhealthyType, in.UnhealthyNode),
		fmt.Sprintf("free %d (before: %d); Machine status %s", freeWhileNotReady, freeBefore, usageWhileNotReady))

	By(fmt.Sprintf("%s is uncordoned: ready again, and so are the hub's answers", in.UnhealthyNode))
	setUnschedulable(ctx, false)
	Eventually(ctx, func(g Gomega) {
		expectPoolNode(g, ctx, spoke.Client, group, in.UnhealthyNode, *unhealthy, imperatorv1alpha1.NodePoolReady)
		expectPoolCondition(g, ctx, spoke.Client, in.MachineName, in.UnhealthyNode, imperatorv1alpha1.NodeConditionReady)
		g.Expect(countsString(hubNodeCounts(g, ctx, in.Env.Ctl, in.Spoke, group, unhealthyType))).To(Equal(unhealthyCountsBefore))
		answer, code, err := in.Env.Ctl.Capacity(ctx, unhealthyType)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(BeZero())
		g.Expect(CandidateOf(answer, in.Spoke).GetFree()).To(Equal(freeBefore))
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.MachineName}, m)).To(Succeed())
		g.Expect(StatusUsage(m, unhealthyType)).To(HaveField("Reserved", reservedBefore), "reserved %s units of Machine %s", unhealthyType, in.MachineName)
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
}

// reservedOnReadyNodes counts the reservation pods of group/typ bound to a
// node labelled node-pool=ready for the type: the units a guest, whose
// injected affinity asks for such a node, can take.
func reservedOnReadyNodes(g Gomega, ctx context.Context, c client.Client, namespace, group, typ string) int32 {
	nodes := &corev1.NodeList{}
	g.Expect(c.List(ctx, nodes, client.MatchingLabels{
		imperatorv1alpha1.NodePoolKey:            string(imperatorv1alpha1.NodePoolReady),
		imperatorv1alpha1.MachineTypeKeyFor(typ): group,
	})).To(Succeed())
	ready := map[string]bool{}
	for _, n := range nodes.Items {
		ready[n.Name] = true
	}
	var n int32
	for _, p := range boundPods(reservationPods(g, ctx, c, namespace, group, typ)) {
		if ready[p.Spec.NodeName] {
			n++
		}
	}
	return n
}

// shiftCounts moves one node from bucket from to bucket to in a countsString.
func shiftCounts(counts, from, to string) string {
	fields := strings.Fields(counts)
	for i, f := range fields {
		key, value, _ := strings.Cut(f, "=")
		n, _ := strconv.Atoi(value)
		switch key {
		case from:
			n--
		case to:
			n++
		}
		fields[i] = key + "=" + strconv.Itoa(n)
	}
	return strings.Join(fields, " ")
}
