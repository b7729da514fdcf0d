package nodepool_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/controller/nodepool"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// machineEvent is what a user reads of an Event in kubectl describe machine,
// plus the node it is about and the series count of a repeated event.
type machineEvent struct {
	Type, Reason, Note, Node string
	Count                    int32
}

// machineEvents lists the Events of the node-pool controller regarding the
// Machine name, with their resourceVersions. Machines are cluster-scoped:
// their Events are in the default namespace.
func machineEvents(ctx context.Context, g Gomega, name string) ([]machineEvent, []string) {
	list := &eventsv1.EventList{}
	g.Expect(k8s.List(ctx, list, client.InNamespace(metav1.NamespaceDefault))).To(Succeed())
	var evs []machineEvent
	var resourceVersions []string
	for _, e := range list.Items {
		if e.ReportingController != nodepool.ControllerName || e.Regarding.Kind != "Machine" || e.Regarding.Name != name {
			continue
		}
		ev := machineEvent{Type: e.Type, Reason: e.Reason, Note: e.Note, Count: 1}
		if e.Related != nil && e.Related.Kind == "Node" {
			ev.Node = e.Related.Name
		}
		if e.Series != nil {
			ev.Count = e.Series.Count
		}
		evs = append(evs, ev)
		resourceVersions = append(resourceVersions, e.ResourceVersion)
	}
	return evs, resourceVersions
}

// expectMachineEvents waits until the Machine has exactly want (in any
// order), then checks that no Event about it is created or updated for a
// few seconds.
func expectMachineEvents(ctx context.Context, name string, want ...machineEvent) {
	GinkgoHelper()
	var settled []string
	Eventually(func(g Gomega) {
		var evs []machineEvent
		evs, settled = machineEvents(ctx, g, name)
		g.Expect(evs).To(ConsistOf(want), "events of Machine %s", name)
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	Consistently(func(g Gomega) []string {
		_, rvs := machineEvents(ctx, g, name)
		return rvs
	}).WithTimeout(2*time.Second).WithPolling(200*time.Millisecond).Should(ConsistOf(settled), "no Event about Machine %s is written again", name)
}

var _ = Describe("Node-pool events on the Machine", func() {
	It("warns once about a missing node and tells when it joins", func(ctx context.Context) {
		before := createNodes(ctx, "ev-a")
		createMachine(ctx, wrappers.MakeMachine("ev", "ev-group").
			Type(medium, "6", "48Gi", 1).Node("ev-a", medium).Tainted().Node("ev-late", medium).Obj())
		expectNode(ctx, "ev-a", configured("ev-group", medium, imperatorv1alpha1.NodePoolReady, true), before["ev-a"])
		missingLate := machineEvent{
			Type: corev1.EventTypeWarning, Reason: "NodeMissing", Node: "ev-late", Count: 1,
			Note: "node ev-late listed in spec.nodePool does not exist",
		}
		expectMachineEvents(ctx, "ev", missingLate)

		By("reconciling again at steady state: a foreign label change on a listed node")
		updateNode(ctx, "ev-a", func(n *corev1.Node) { n.Labels["example.com/rack"] = "r1" })
		expectMachineEvents(ctx, "ev", missingLate)

		By("the missing node joining the cluster")
		late := createNodes(ctx, "ev-late")
		expectNode(ctx, "ev-late", configured("ev-group", medium, imperatorv1alpha1.NodePoolReady, false), late["ev-late"])
		joined := machineEvent{
			Type: corev1.EventTypeNormal, Reason: "NodeJoined", Node: "ev-late", Count: 1,
			Note: "node ev-late joined the pool",
		}
		expectMachineEvents(ctx, "ev", missingLate, joined)

		By("a node of the pool being deleted")
		Expect(k8s.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ev-a"}})).To(Succeed())
		expectMachineEvents(ctx, "ev", missingLate, joined, machineEvent{
			Type: corev1.EventTypeWarning, Reason: "NodeMissing", Node: "ev-a", Count: 1,
			Note: "node ev-a listed in spec.nodePool does not exist",
		})
	})

	It("warns once about a node another Machine owns and tells when it is handed over", func(ctx context.Context) {
		before := createNodes(ctx, "ev-shared")
		createMachine(ctx, wrappers.MakeMachine("ev-first", "ev-first-group").
			Type(medium, "6", "48Gi", 1).Node("ev-shared", medium).Obj())
		expectNode(ctx, "ev-shared", configured("ev-first-group", medium, imperatorv1alpha1.NodePoolReady, false), before["ev-shared"])
		expectMachineEvents(ctx, "ev-first")

		createMachine(ctx, wrappers.MakeMachine("ev-second", "ev-second-group").
			Type(xlarge, "40", "128Gi", 1).Node("ev-shared", xlarge).Obj())
		conflict := machineEvent{
			Type: corev1.EventTypeWarning, Reason: "NodeConflict", Node: "ev-shared", Count: 1,
			Note: "node ev-shared is left alone: Machine ev-first (MachineNodePool ev-first-node-pool) listed it first and owns it",
		}
		expectMachineEvents(ctx, "ev-second", conflict)
		expectMachineEvents(ctx, "ev-first")

		deleteMachine(ctx, "ev-first")
		expectNode(ctx, "ev-shared", configured("ev-second-group", xlarge, imperatorv1alpha1.NodePoolReady, false), before["ev-shared"])
		expectMachineEvents(ctx, "ev-second", conflict, machineEvent{
			Type: corev1.EventTypeNormal, Reason: "NodeJoined", Node: "ev-shared", Count: 1,
			Note: "node ev-shared joined the pool",
		})
	})
})
