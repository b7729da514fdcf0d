package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// MachineInput configures MachineSpec.
type MachineInput struct {
	Env   *Env
	Spoke string
	// MachineFile is a sample Machine (deploy/spoke/samples).
	MachineFile string
	// WantReserved is the number of reservation pods each machine type of
	// the Machine must get: what its ready nodes can hold of available.
	WantReserved map[string]int32
	// WantPool is what each node of the Machine's pool must show once the
	// agent configured it; every node of the pool must be named.
	WantPool map[string]PoolNode
}

// PoolNode is what a user sees of one node of a Machine's pool: its
// imperator.tenzen-y.io/node-pool label (and taint, when the pool taints)
// and its condition in the MachineNodePool status.
type PoolNode struct {
	State     imperatorv1alpha1.NodePoolState
	Condition imperatorv1alpha1.NodeCondition
}

// MachineSpec is journey 2 (and the first half of 5): a platform engineer
// applies a Machine on a spoke; it becomes Ready, every node of its pool is
// labelled (and tainted when taint: true) after its mode, reservation pods
// run on the ready nodes serving their type, and the hub's usage shows the
// Machine's maximum/reserved figures.
func MachineSpec(ctx context.Context, in MachineInput) {
	spoke := in.Env.Spoke(in.Spoke)
	want, err := ReadMachine(in.MachineFile)
	Expect(err).NotTo(HaveOccurred())
	group := Group(want)
	Expect(group).NotTo(BeEmpty(), "%s has a machine-group label", in.MachineFile)

	By(fmt.Sprintf("applying Machine %s on %s", want.Name, in.Spoke))
	Expect(ApplyMachine(ctx, spoke.Client, want)).To(Succeed())

	By("the Machine becomes Ready")
	m := &imperatorv1alpha1.Machine{}
	Eventually(ctx, func(g Gomega) {
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: want.Name}, m)).To(Succeed())
		g.Expect(MachineReady(m)).To(BeTrue(), "Ready condition of Machine %s: %+v", m.Name, m.Status.Conditions)
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By("every node of the pool carries the labels, annotation and taints of its mode")
	Eventually(ctx, func(g Gomega) {
		pool, err := poolNodes(ctx, spoke.Client, want)
		g.Expect(err).NotTo(HaveOccurred())
		names := slices.Sorted(maps.Keys(pool))
		g.Expect(names).To(ConsistOf(slices.Sorted(maps.Keys(in.WantPool))), "the nodes the pool of %s takes, by name or by selector", want.Name)
		for _, name := range names {
			node := in.WantPool[name]
			expectPoolNode(g, ctx, spoke.Client, group, name, *pool[name], node.State)
			expectPoolCondition(g, ctx, spoke.Client, want.Name, name, node.Condition)
		}
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By("reservation pods run on ready nodes that serve their machine type")
	Eventually(ctx, func(g Gomega) {
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: want.Name}, m)).To(Succeed())
		for _, mt := range want.Spec.MachineTypes {
			wantReserved, ok := in.WantReserved[mt.Name]
			g.Expect(ok).To(BeTrue(), "WantReserved names machine type %s", mt.Name)
			pods := boundPods(reservationPods(g, ctx, spoke.Client, in.Env.Namespace, group, mt.Name))
			g.Expect(pods).To(HaveLen(int(wantReserved)), "bound reservation pods of %s: %v", mt.Name, describePods(pods))
			nodes := readyNodesServing(g, ctx, spoke.Client, want, in.WantPool, mt.Name)
			for _, p := range pods {
				g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "reservation pod %s", p.Name)
				g.Expect(nodes).To(ContainElement(p.Spec.NodeName), "reservation pod %s of %s runs on a ready node serving it", p.Name, mt.Name)
			}
			g.Expect(statusUsageString(StatusUsage(m, mt.Name))).To(Equal(usageString(mt.Available, wantReserved, 0, 0)),
				"status usage of %s in Machine %s", mt.Name, m.Name)
		}
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By("the hub's usage shows the Machine's maximum and reserved figures")
	Eventually(ctx, func(g Gomega) {
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: want.Name}, m)).To(Succeed())
		expectHubMatchesMachine(g, ctx, in.Env.Ctl, in.Spoke, m)
	}).WithTimeout(joinTimeout).WithPolling(poll).Should(Succeed())
}

// readyNodesServing are the nodes of m's pool that serve typ and that pool
// says must be ready.
func readyNodesServing(g Gomega, ctx context.Context, c client.Client, m *imperatorv1alpha1.Machine, pool map[string]PoolNode, typ string) []string {
	entries, err := poolNodes(ctx, c, m)
	g.Expect(err).NotTo(HaveOccurred())
	var nodes []string
	for name, entry := range entries {
		if pool[name].State == imperatorv1alpha1.NodePoolReady && slices.ContainsFunc(entry.MachineType, func(r imperatorv1alpha1.MachineTypeRef) bool { return r.Name == typ }) {
			nodes = append(nodes, name)
		}
	}
	slices.Sort(nodes)
	return nodes
}
