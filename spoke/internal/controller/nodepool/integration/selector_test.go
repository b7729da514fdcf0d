package nodepool_test

import (
	"context"
	"maps"
	"time"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/controller/nodepool"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// product labels nodes as GPU Feature Discovery does; each spec uses its own
// value so that no other spec's node matches its selectors.
func product(value string) map[string]string {
	return map[string]string{imperatorv1alpha1.GPUProductLabel: value}
}

// labelNode puts the GPU product label on node (removes it when value is
// empty) and returns what the node carries outside our prefix afterwards.
func labelNode(ctx context.Context, name string, before foreign, value string) foreign {
	updateNode(ctx, name, func(n *corev1.Node) {
		if value == "" {
			delete(n.Labels, imperatorv1alpha1.GPUProductLabel)
			return
		}
		n.Labels[imperatorv1alpha1.GPUProductLabel] = value
	})
	after := before
	after.Labels = maps.Clone(before.Labels)
	if value == "" {
		delete(after.Labels, imperatorv1alpha1.GPUProductLabel)
	} else {
		after.Labels[imperatorv1alpha1.GPUProductLabel] = value
	}
	return after
}

// expectNodeStays checks for a while that node keeps exactly want under our
// prefix: nobody writes it back and forth.
func expectNodeStays(ctx context.Context, name string, want nodepool.OwnedState) {
	GinkgoHelper()
	Consistently(func(g Gomega) {
		node := &corev1.Node{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
		g.Expect(cmp.Diff(want, nodepool.CurrentState(node), ownedStateOpts...)).To(BeEmpty(), "keys of node %s under our prefix (-want +got)", name)
	}).WithTimeout(2 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
}

var _ = Describe("Node-pool controller with a selector entry", func() {
	It("takes in nodes as they appear or are labelled and releases them as they go or stop matching, as named nodes", func(ctx context.Context) {
		before := createNodes(ctx, "sel-a", "sel-b", "sel-named")
		before["sel-a"] = labelNode(ctx, "sel-a", before["sel-a"], "sel-H100")
		createMachine(ctx, wrappers.MakeMachine("sel", "sel-group").
			Type(medium, "6", "48Gi", 1).Type(xlarge, "40", "128Gi", 1).
			Select(product("sel-H100"), xlarge).Tainted().
			Node("sel-named", medium).Obj())

		By("configuring the matching node exactly as a named one, and not the other")
		expectNode(ctx, "sel-a", configured("sel-group", xlarge, imperatorv1alpha1.NodePoolReady, true), before["sel-a"])
		expectNode(ctx, "sel-named", configured("sel-group", medium, imperatorv1alpha1.NodePoolReady, false), before["sel-named"])
		expectNode(ctx, "sel-b", nodepool.OwnedState{}, before["sel-b"])
		expectPoolStatus(ctx, "sel", []imperatorv1alpha1.NodePoolStatus{
			nodeStatus("sel-named", medium, imperatorv1alpha1.NodeConditionReady),
			nodeStatus("sel-a", xlarge, imperatorv1alpha1.NodeConditionReady),
		}, metav1.ConditionTrue, imperatorv1alpha1.NodePoolReasonNodesConfigured)

		By("taking in a node labelled afterwards")
		before["sel-b"] = labelNode(ctx, "sel-b", before["sel-b"], "sel-H100")
		expectNode(ctx, "sel-b", configured("sel-group", xlarge, imperatorv1alpha1.NodePoolReady, true), before["sel-b"])

		By("taking in a node that appears with the label")
		node := wrappers.MakeNode("sel-new").Label(imperatorv1alpha1.GPUProductLabel, "sel-H100").Obj()
		Expect(k8s.Create(ctx, node)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, node))).To(Succeed()) })
		// The API server taints a new node not-ready: the pool says so.
		expectNode(ctx, "sel-new", configured("sel-group", xlarge, imperatorv1alpha1.NodePoolNotReady, true), foreign{
			Labels: map[string]string{imperatorv1alpha1.GPUProductLabel: "sel-H100", corev1.LabelHostname: "sel-new"},
			Taints: []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}},
		})
		expectPoolStatus(ctx, "sel", []imperatorv1alpha1.NodePoolStatus{
			nodeStatus("sel-named", medium, imperatorv1alpha1.NodeConditionReady),
			nodeStatus("sel-a", xlarge, imperatorv1alpha1.NodeConditionReady),
			nodeStatus("sel-b", xlarge, imperatorv1alpha1.NodeConditionReady),
			nodeStatus("sel-new", xlarge, imperatorv1alpha1.NodeConditionNotReady),
		}, metav1.ConditionTrue, imperatorv1alpha1.NodePoolReasonNodesConfigured)

		By("following the selector entry's mode to maintenance")
		updateMachine(ctx, "sel", func(m *imperatorv1alpha1.Machine) {
			m.Spec.NodePool[0].Mode = imperatorv1alpha1.NodePoolModeMaintenance
		})
		expectNode(ctx, "sel-a", configured("sel-group", xlarge, imperatorv1alpha1.NodePoolMaintenance, true), before["sel-a"])

		By("releasing a node whose label is taken off, and forgetting a deleted node")
		before["sel-a"] = labelNode(ctx, "sel-a", before["sel-a"], "")
		expectNode(ctx, "sel-a", nodepool.OwnedState{}, before["sel-a"])
		Expect(k8s.Delete(ctx, node)).To(Succeed())
		expectPoolStatus(ctx, "sel", []imperatorv1alpha1.NodePoolStatus{
			nodeStatus("sel-named", medium, imperatorv1alpha1.NodeConditionReady),
			nodeStatus("sel-b", xlarge, imperatorv1alpha1.NodeConditionMaintenance),
		}, metav1.ConditionTrue, imperatorv1alpha1.NodePoolReasonNodesConfigured)

		By("taking everything off the selected nodes when the Machine is deleted")
		deleteMachine(ctx, "sel")
		expectNode(ctx, "sel-b", nodepool.OwnedState{}, before["sel-b"])
		expectNode(ctx, "sel-named", nodepool.OwnedState{}, before["sel-named"])
	})

	It("leaves a node another Machine names or already holds to it, says so, and takes it when that Machine goes", func(ctx context.Context) {
		before := createNodes(ctx, "selov-named", "selov-held")
		createMachine(ctx, wrappers.MakeMachine("selov-names", "selov-names-group").
			Type(medium, "6", "48Gi", 1).Node("selov-named", medium).Obj())
		createMachine(ctx, wrappers.MakeMachine("selov-first", "selov-first-group").
			Type(xlarge, "40", "128Gi", 1).Select(product("selov-H100"), xlarge).Tainted().Obj())
		expectNode(ctx, "selov-named", configured("selov-names-group", medium, imperatorv1alpha1.NodePoolReady, false), before["selov-named"])

		By("keeping a named node with its Machine when it gets a selected label later")
		before["selov-named"] = labelNode(ctx, "selov-named", before["selov-named"], "selov-H100")
		expectPoolStatus(ctx, "selov-first", []imperatorv1alpha1.NodePoolStatus{
			nodeStatus("selov-named", xlarge, imperatorv1alpha1.NodeConditionConflict),
		}, metav1.ConditionFalse, imperatorv1alpha1.NodePoolReasonNodeConflict)
		expectMachineEvents(ctx, "selov-first", machineEvent{
			Type: corev1.EventTypeWarning, Reason: "NodeConflict", Node: "selov-named", Count: 1,
			Note: "node selov-named is left alone: Machine selov-names (MachineNodePool selov-names-node-pool) names it and owns it",
		})
		expectNodeStays(ctx, "selov-named", configured("selov-names-group", medium, imperatorv1alpha1.NodePoolReady, false))

		By("keeping a node with the selector that holds it when a younger selector matches it too")
		before["selov-held"] = labelNode(ctx, "selov-held", before["selov-held"], "selov-H100")
		expectNode(ctx, "selov-held", configured("selov-first-group", xlarge, imperatorv1alpha1.NodePoolReady, true), before["selov-held"])
		createMachine(ctx, wrappers.MakeMachine("selov-second", "selov-second-group").
			Type(medium, "6", "48Gi", 1).Select(product("selov-H100"), medium).Obj())
		expectPoolStatus(ctx, "selov-second", []imperatorv1alpha1.NodePoolStatus{
			nodeStatus("selov-held", medium, imperatorv1alpha1.NodeConditionConflict),
			nodeStatus("selov-named", medium, imperatorv1alpha1.NodeConditionConflict),
		}, metav1.ConditionFalse, imperatorv1alpha1.NodePoolReasonNodeConflict)
		expectNodeStays(ctx, "selov-held", configured("selov-first-group", xlarge, imperatorv1alpha1.NodePoolReady, true))

		By("handing the node over when the Machine holding it is deleted")
		deleteMachine(ctx, "selov-first")
		expectNode(ctx, "selov-held", configured("selov-second-group", medium, imperatorv1alpha1.NodePoolReady, false), before["selov-held"])
		expectNodeStays(ctx, "selov-named", configured("selov-names-group", medium, imperatorv1alpha1.NodePoolReady, false))
	})
})
