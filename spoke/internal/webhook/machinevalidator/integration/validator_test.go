package machinevalidator_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

const timeout = 10 * time.Second

// createMachine creates machine, deletes it when the spec ends, and waits
// until the validator's cache has it: admissions after this see it.
func createMachine(ctx context.Context, machine *imperatorv1alpha1.Machine) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, machine)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, machine))).To(Succeed())
	})
	Eventually(func() error {
		return env.Manager.Cache.Get(ctx, client.ObjectKeyFromObject(machine), &imperatorv1alpha1.Machine{})
	}).WithTimeout(timeout).Should(Succeed())
}

// expectRejected asserts that err is the API server refusing a Machine with
// a message containing every part.
func expectRejected(err error, parts ...string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred())
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid error, got %v", err)
	for _, part := range parts {
		Expect(err.Error()).To(ContainSubstring(part))
	}
}

var _ = Describe("Machine validator", func() {
	It("admits the sample general-machine Machine, whose nodes need not exist yet", func(ctx context.Context) {
		createMachine(ctx, wrappers.GeneralMachine().Obj())
	})

	It("refuses a second Machine claiming a node, naming the node and its Machine", func(ctx context.Context) {
		createMachine(ctx, wrappers.MakeMachine("claim-first", "claim-first").
			Type("compute-medium", "6", "48Gi", 1).Node("claim-node", "compute-medium").Obj())

		second := wrappers.MakeMachine("claim-second", "claim-second").
			Type("compute-xlarge", "40", "128Gi", 1).
			Node("claim-other", "compute-xlarge").Node("claim-node", "compute-xlarge").Obj()
		expectRejected(k8s.Create(ctx, second),
			`spec.nodePool[1].name: Invalid value: "claim-node": node claim-node is already in Machine claim-first (machine group "claim-first"); a node belongs to one Machine`)

		By("the second Machine without the node, then adding it by an update")
		second.Spec.NodePool = second.Spec.NodePool[:1]
		createMachine(ctx, second)
		patch := client.MergeFrom(second.DeepCopy())
		second.Spec.NodePool = append(second.Spec.NodePool, imperatorv1alpha1.NodePool{
			Name: "claim-node", MachineType: []imperatorv1alpha1.MachineTypeRef{{Name: "compute-xlarge"}},
		})
		expectRejected(k8s.Patch(ctx, second, patch), "node claim-node is already in Machine claim-first")

		By("the first Machine letting the node go")
		first := &imperatorv1alpha1.Machine{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: "claim-first"}, first)).To(Succeed())
		release := client.MergeFrom(first.DeepCopy())
		first.Spec.NodePool = nil
		Expect(k8s.Patch(ctx, first, release)).To(Succeed())
		Eventually(func(g Gomega) {
			current := &imperatorv1alpha1.Machine{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(second), current)).To(Succeed())
			take := client.MergeFrom(current.DeepCopy())
			current.Spec.NodePool = second.Spec.NodePool
			g.Expect(k8s.Patch(ctx, current, take)).To(Succeed())
		}).WithTimeout(timeout).Should(Succeed())
	})

	It("requires the machine-group label and keeps it immutable and unique", func(ctx context.Context) {
		unlabelled := wrappers.MakeMachine("label", "").Label(imperatorv1alpha1.MachineGroupKey, "").
			Type("compute-medium", "6", "48Gi", 1).Obj()
		expectRejected(k8s.Create(ctx, unlabelled),
			"metadata.labels[imperator.tenzen-y.io/machine-group]: Required value")

		machine := wrappers.MakeMachine("label", "label-group").Type("compute-medium", "6", "48Gi", 1).Obj()
		createMachine(ctx, machine)
		patch := client.MergeFrom(machine.DeepCopy())
		machine.Labels[imperatorv1alpha1.MachineGroupKey] = "renamed"
		expectRejected(k8s.Patch(ctx, machine, patch),
			`metadata.labels[imperator.tenzen-y.io/machine-group]: Invalid value: "renamed": is immutable (was "label-group")`)

		duplicate := wrappers.MakeMachine("label-copy", "label-group").Type("compute-medium", "6", "48Gi", 1).Obj()
		expectRejected(k8s.Create(ctx, duplicate), `machine group "label-group" is already used by Machine label`)
	})

	It("refuses a machine type named slot, whose node key would be the guest queue's scheduling gate", func(ctx context.Context) {
		slot := wrappers.MakeMachine("slot-machine", "slot-group").Type("slot", "6", "48Gi", 1).Obj()
		expectRejected(k8s.Create(ctx, slot),
			`spec.machineTypes[0].name: Invalid value: "slot": is reserved: imperator.tenzen-y.io/slot is one of Imperator's own keys`)
	})

	It("refuses non-positive quantities and machine types that do not exist", func(ctx context.Context) {
		zero := wrappers.MakeMachine("shape", "shape").Type("compute-medium", "6", "48Gi", 1).Obj()
		zero.Spec.MachineTypes[0].Spec.CPU = resource.MustParse("0")
		expectRejected(k8s.Create(ctx, zero), `spec.machineTypes[0].spec.cpu: Invalid value: "0": must be positive`)

		unknown := wrappers.MakeMachine("shape", "shape").Type("compute-medium", "6", "48Gi", 1).
			Node("shape-node", "compute-huge").Obj()
		// The CRD's CEL rule answers before the webhook is called.
		expectRejected(k8s.Create(ctx, unknown), "spec.nodePool[].machineType[].name must name an entry of spec.machineTypes")

		twoTypes := wrappers.MakeMachine("shape", "shape").Type("compute-medium", "6", "48Gi", 1).
			Node("shape-node", "compute-medium").Obj()
		twoTypes.Spec.NodePool[0].MachineType = append(twoTypes.Spec.NodePool[0].MachineType, imperatorv1alpha1.MachineTypeRef{Name: "compute-medium"})
		expectRejected(k8s.Create(ctx, twoTypes), "spec.nodePool[0].machineType")
	})

	It("refuses a selector taking a node another Machine names or selects, naming the node and both Machines", func(ctx context.Context) {
		product := map[string]string{imperatorv1alpha1.GPUProductLabel: "ov-H100"}
		for _, name := range []string{"ov-kasumi", "ov-megumi"} {
			node := wrappers.MakeNode(name).Label(imperatorv1alpha1.GPUProductLabel, "ov-H100").Obj()
			Expect(k8s.Create(ctx, node)).To(Succeed())
			DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, node))).To(Succeed()) })
			Eventually(func() error {
				return env.Manager.Cache.Get(ctx, client.ObjectKeyFromObject(node), &corev1.Node{})
			}).WithTimeout(timeout).Should(Succeed())
		}
		createMachine(ctx, wrappers.MakeMachine("ov-named", "ov-named").
			Type("compute-medium", "6", "48Gi", 1).Node("ov-kasumi", "compute-medium").Obj())

		selector := wrappers.MakeMachine("ov-selects", "ov-selects").
			Type("compute-xlarge", "40", "128Gi", 1).Select(product, "compute-xlarge").Obj()
		expectRejected(k8s.Create(ctx, selector), `Machine.imperator.tenzen-y.io "ov-selects" is invalid`,
			`spec.nodePool[0].nodeSelector: Invalid value: "nvidia.com/gpu.product=ov-H100": selects node ov-kasumi, which Machine ov-named (machine group "ov-named") names; a node belongs to one Machine`)

		By("a selector of the nodes nobody has, then a second selector of another group matching them")
		selector.Spec.NodePool[0].NodeSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{
			Key: corev1.LabelHostname, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"ov-kasumi"},
		}}
		createMachine(ctx, selector)
		other := wrappers.MakeMachine("ov-other", "ov-other").
			Type("compute-xlarge", "40", "128Gi", 1).Select(product, "compute-xlarge").Obj()
		expectRejected(k8s.Create(ctx, other), `selects node ov-megumi, which Machine ov-selects (machine group "ov-selects") selects by its spec.nodePool[0].nodeSelector`)

		By("naming a node another Machine's selector takes")
		naming := wrappers.MakeMachine("ov-other", "ov-other").
			Type("compute-xlarge", "40", "128Gi", 1).Node("ov-megumi", "compute-xlarge").Obj()
		expectRejected(k8s.Create(ctx, naming), `spec.nodePool[0].name: Invalid value: "ov-megumi": node ov-megumi is already in Machine ov-selects (machine group "ov-selects") through its spec.nodePool[0].nodeSelector`)
	})

	It("refuses an entry with both or neither of name and nodeSelector, and an empty selector, naming the field", func(ctx context.Context) {
		both := wrappers.MakeMachine("choice", "choice").Type("compute-medium", "6", "48Gi", 1).
			Select(map[string]string{"example.com/pool": "a"}, "compute-medium").Obj()
		both.Spec.NodePool[0].Name = "choice-node"
		expectRejected(k8s.Create(ctx, both), "spec.nodePool[]: exactly one of name and nodeSelector must be set")

		neither := wrappers.MakeMachine("choice", "choice").Type("compute-medium", "6", "48Gi", 1).Node("", "compute-medium").Obj()
		expectRejected(k8s.Create(ctx, neither), "spec.nodePool[]: exactly one of name and nodeSelector must be set")

		empty := wrappers.MakeMachine("choice", "choice").Type("compute-medium", "6", "48Gi", 1).Select(nil, "compute-medium").Obj()
		expectRejected(k8s.Create(ctx, empty), "spec.nodePool[].nodeSelector must not be empty")
	})
})
