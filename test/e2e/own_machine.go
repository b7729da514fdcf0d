package e2e

import (
	"context"
	"fmt"
	"strconv"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// spokeNodes adds and removes kwok-simulated nodes of a spoke (*fleet.Fleet
// does); an attached fleet cannot, and journeys that need their own node are
// skipped there.
type spokeNodes interface {
	AddSpokeNode(ctx context.Context, spoke string, node *corev1.Node) error
	DeleteSpokeNode(ctx context.Context, spoke, name string) error
}

// addOwnMachine gives a journey a Machine of its own on a node of its own,
// so that it needs nothing another journey made: node is added to spoke and
// machine created, and the journey waits until the hub shows every unit of
// machine's types free. Both are deleted when the spec ends, the Machine
// first (its reservations and the labels it put on the node go with it).
// node must not match the node selector of another Machine of the spoke
// (the samples select H100 nodes by nvidia.com/gpu.product
// NVIDIA-H100-80GB-HBM3): that Machine would take the node, and machine be
// refused it.
func addOwnMachine(ctx context.Context, env *Env, spoke string, node *corev1.Node, machine *imperatorv1alpha1.Machine) {
	GinkgoHelper()
	nodes, ok := env.Fleet.(spokeNodes)
	if !ok {
		Skip("the journey adds a node of its own: it needs a fleet it started")
	}
	c := env.Spoke(spoke).Client
	group := machine.Labels[imperatorv1alpha1.MachineGroupKey]

	By(fmt.Sprintf("adding node %s and Machine %s to %s: the journey's own units", node.Name, machine.Name, spoke))
	Expect(nodes.AddSpokeNode(ctx, spoke, node)).To(Succeed())
	DeferCleanup(func(ctx context.Context) { Expect(nodes.DeleteSpokeNode(ctx, spoke, node.Name)).To(Succeed()) })
	Expect(c.Create(ctx, machine)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		Expect(client.IgnoreNotFound(c.Delete(ctx, machine))).To(Succeed())
		Eventually(ctx, func() bool {
			return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(machine), &imperatorv1alpha1.Machine{}))
		}).WithTimeout(spokeTimeout).WithPolling(poll).Should(BeTrue(), "Machine %s on %s is gone", machine.Name, spoke)
	})
	Eventually(ctx, func(g Gomega) {
		resp, err := env.Ctl.Usage(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		for _, mt := range machine.Spec.MachineTypes {
			u := UsageOf(resp, spoke, group, mt.Name)
			g.Expect(u).NotTo(BeNil(), "the hub shows %s/%s of %s", group, mt.Name, spoke)
			g.Expect(u.GetReserved()).To(Equal(mt.Available), "reserved units of %s on %s", mt.Name, spoke)
			g.Expect(u.GetFree()).To(Equal(mt.Available), "free units of %s on %s", mt.Name, spoke)
		}
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
}

// addOwnXlarge is addOwnMachine with a Machine named group whose one type
// typ has units units the size of the samples' compute-xlarge (40 CPUs,
// 128Gi, 2 nvidia.com/gpu of the hopper family), all on node, an H100 node
// just big enough for them (of another product than the one the samples
// select their pool by).
func addOwnXlarge(ctx context.Context, env *Env, spoke, node, group, typ string, units int32) {
	GinkgoHelper()
	addOwnMachine(ctx, env, spoke,
		wrappers.MakeNode(node).Capacity(corev1.ResourceCPU, strconv.Itoa(48*int(units))).
			Capacity(corev1.ResourceMemory, strconv.Itoa(160*int(units))+"Gi").GPU(2*int(units), "NVIDIA-H100-PCIe", "hopper").Obj(),
		wrappers.MakeMachine(group, group).Type(typ, "40", "128Gi", units).GPU("nvidia.com/gpu", 2, "", "hopper").
			Node(node, typ).Tainted().Obj())
}

// useSampleMachine makes sure the sample Machine of file is on spoke, for a
// journey that asks the hub about what that sample offers and so runs alone
// as well as after the journey that applies it (MachineSpec). A Machine of
// that name already there is used as it is. Otherwise it is applied, the
// journey waits until wantReserved units of each type are reserved or used
// by guests (nil: every unit, when the fleet's nodes serve every type of the
// sample) and the hub shows its figures, and it is deleted when the spec
// ends.
func useSampleMachine(ctx context.Context, env *Env, spoke, file string, wantReserved map[string]int32) {
	GinkgoHelper()
	want, err := ReadMachine(file)
	Expect(err).NotTo(HaveOccurred())
	c := env.Spoke(spoke).Client
	err = c.Get(ctx, client.ObjectKeyFromObject(want), &imperatorv1alpha1.Machine{})
	if err == nil {
		return
	}
	Expect(apierrors.IsNotFound(err)).To(BeTrue(), "reading Machine %s on %s: %v", want.Name, spoke, err)

	By(fmt.Sprintf("applying the sample Machine %s on %s, which no earlier journey applied", want.Name, spoke))
	Expect(ApplyMachine(ctx, c, want)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		By(fmt.Sprintf("deleting the sample Machine %s the journey applied", want.Name))
		Expect(client.IgnoreNotFound(c.Delete(ctx, want))).To(Succeed())
		Eventually(ctx, func() bool {
			return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(want), &imperatorv1alpha1.Machine{}))
		}).WithTimeout(spokeTimeout).WithPolling(poll).Should(BeTrue(), "Machine %s on %s is gone", want.Name, spoke)
	})
	Eventually(ctx, func(g Gomega) {
		m := &imperatorv1alpha1.Machine{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(want), m)).To(Succeed())
		g.Expect(MachineReady(m)).To(BeTrue(), "Ready condition of Machine %s: %+v", m.Name, m.Status.Conditions)
		for _, mt := range m.Spec.MachineTypes {
			reserved, ok := wantReserved[mt.Name]
			if wantReserved == nil {
				reserved, ok = mt.Available, true
			}
			g.Expect(ok).To(BeTrue(), "wantReserved names machine type %s", mt.Name)
			u := StatusUsage(m, mt.Name)
			g.Expect(u).NotTo(BeNil(), "status usage of %s in Machine %s", mt.Name, m.Name)
			// Guests an earlier journey left running hold units of their own.
			g.Expect(u.Reserved+u.Used).To(Equal(reserved), "reserved and used units of %s in Machine %s: %s", mt.Name, m.Name, statusUsageString(u))
		}
		expectHubMatchesMachine(g, ctx, env.Ctl, spoke, m)
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
}
