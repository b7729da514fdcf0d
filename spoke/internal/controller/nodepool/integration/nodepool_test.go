package nodepool_test

import (
	"context"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/controller/nodepool"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

const (
	timeout  = 10 * time.Second
	interval = 50 * time.Millisecond

	medium = "compute-medium"
	xlarge = "compute-xlarge"
)

// What every test node carries besides what the controller puts on it; it
// must survive everything byte for byte.
const (
	foreignLabel      = "example.com/team"
	foreignAnnotation = "example.com/owner"
	foreignTaint      = "example.com/dedicated"
)

// foreign is what a node carries outside the controller's prefix.
type foreign struct {
	Labels      map[string]string
	Annotations map[string]string
	Taints      []corev1.Taint
}

func foreignOf(node *corev1.Node) foreign {
	var f foreign
	for k, v := range node.Labels {
		if !strings.HasPrefix(k, imperatorv1alpha1.Prefix) {
			if f.Labels == nil {
				f.Labels = map[string]string{}
			}
			f.Labels[k] = v
		}
	}
	for k, v := range node.Annotations {
		if !strings.HasPrefix(k, imperatorv1alpha1.Prefix) {
			if f.Annotations == nil {
				f.Annotations = map[string]string{}
			}
			f.Annotations[k] = v
		}
	}
	for _, t := range node.Spec.Taints {
		if !strings.HasPrefix(t.Key, imperatorv1alpha1.Prefix) {
			f.Taints = append(f.Taints, t)
		}
	}
	return f
}

// createNodes creates healthy nodes carrying foreign keys and deletes them
// when the spec ends. It returns what each carries outside our prefix.
func createNodes(ctx context.Context, names ...string) map[string]foreign {
	out := map[string]foreign{}
	for _, name := range names {
		node := wrappers.MakeNode(name).Label(foreignLabel, "ml").Annotation(foreignAnnotation, "alice").
			Taint(foreignTaint, "gpu", corev1.TaintEffectNoSchedule).Obj()
		Expect(k8s.Create(ctx, node)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, node))).To(Succeed())
		})
		// The API server's TaintNodesByCondition admission taints a new node
		// not-ready; the node lifecycle controller, absent here, would lift
		// the taint once the node reports Ready.
		updateNode(ctx, name, func(n *corev1.Node) { n.Spec.Taints = removeTaint(n.Spec.Taints, corev1.TaintNodeNotReady) })
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(node), node)).To(Succeed())
		out[name] = foreignOf(node)
	}
	return out
}

// createMachine creates machine and, when the spec ends, deletes it and its
// MachineNodePool (envtest has no garbage collector) and waits until the
// pool's finalizer has cleaned up.
func createMachine(ctx context.Context, machine *imperatorv1alpha1.Machine) {
	Expect(k8s.Create(ctx, machine)).To(Succeed())
	DeferCleanup(func(ctx context.Context) { deleteMachine(ctx, machine.Name) })
}

func deleteMachine(ctx context.Context, name string) {
	machine := &imperatorv1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name}}
	Expect(client.IgnoreNotFound(k8s.Delete(ctx, machine))).To(Succeed())
	// What the garbage collector would do for the owned pool.
	pool := &imperatorv1alpha1.MachineNodePool{ObjectMeta: metav1.ObjectMeta{Name: imperatorv1alpha1.NodePoolName(name)}}
	Eventually(func(g Gomega) {
		g.Expect(client.IgnoreNotFound(k8s.Delete(ctx, pool))).To(Succeed())
		g.Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(pool), pool))).To(BeTrue(), "MachineNodePool %s still exists", pool.Name)
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
}

// updateMachine applies mutate to the Machine's spec.
func updateMachine(ctx context.Context, name string, mutate func(*imperatorv1alpha1.Machine)) {
	Eventually(func(g Gomega) {
		machine := &imperatorv1alpha1.Machine{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, machine)).To(Succeed())
		patch := client.MergeFromWithOptions(machine.DeepCopy(), client.MergeFromWithOptimisticLock{})
		mutate(machine)
		g.Expect(k8s.Patch(ctx, machine, patch)).To(Succeed())
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
}

// updateNode applies mutate to a node.
func updateNode(ctx context.Context, name string, mutate func(*corev1.Node)) {
	Eventually(func(g Gomega) {
		node := &corev1.Node{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
		patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
		mutate(node)
		g.Expect(k8s.Patch(ctx, node, patch)).To(Succeed())
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
}

// configured is what a node of group serving machineType carries in state,
// spelled out with the contract's keys.
func configured(group, machineType string, state imperatorv1alpha1.NodePoolState, tainted bool) nodepool.OwnedState {
	s := nodepool.OwnedState{
		Labels: map[string]string{
			"imperator.tenzen-y.io/" + machineType: group,
			"imperator.tenzen-y.io/machine-type":   machineType,
			"imperator.tenzen-y.io/node-pool":      string(state),
		},
		Annotations: map[string]string{"imperator.tenzen-y.io/machine-group": group},
	}
	if tainted {
		s.Taints = []corev1.Taint{
			{Key: "imperator.tenzen-y.io/" + machineType, Value: group, Effect: corev1.TaintEffectNoSchedule},
			{Key: "imperator.tenzen-y.io/node-pool", Value: string(state), Effect: corev1.TaintEffectNoSchedule},
		}
	}
	return s
}

var ownedStateOpts = []cmp.Option{cmpopts.EquateEmpty(), cmpopts.IgnoreFields(corev1.Taint{}, "TimeAdded")}

// expectNode waits until node carries exactly want under our prefix and
// before outside it.
func expectNode(ctx context.Context, name string, want nodepool.OwnedState, before foreign) {
	GinkgoHelper()
	expectNodeIn(ctx, k8s, name, want, before)
}

// expectNodeIn is expectNode against the API server of c.
func expectNodeIn(ctx context.Context, c client.Client, name string, want nodepool.OwnedState, before foreign) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		node := &corev1.Node{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
		g.Expect(cmp.Diff(want, nodepool.CurrentState(node), ownedStateOpts...)).To(BeEmpty(), "keys of node %s under our prefix (-want +got)", name)
		g.Expect(cmp.Diff(before, foreignOf(node))).To(BeEmpty(), "foreign keys of node %s (-before +now)", name)
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
}

// expectPoolStatus waits until the pool reports nodes and a Ready condition
// of readyStatus/readyReason for its current generation.
func expectPoolStatus(ctx context.Context, machine string, nodes []imperatorv1alpha1.NodePoolStatus, readyStatus metav1.ConditionStatus, readyReason string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		pool := &imperatorv1alpha1.MachineNodePool{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: imperatorv1alpha1.NodePoolName(machine)}, pool)).To(Succeed())
		g.Expect(cmp.Diff(nodes, pool.Status.NodePool, cmpopts.EquateEmpty())).To(BeEmpty(), "status.nodePool (-want +got)")
		ready := meta.FindStatusCondition(pool.Status.Conditions, imperatorv1alpha1.NodePoolConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(readyStatus), "Ready condition: %s", ready.Message)
		g.Expect(ready.Reason).To(Equal(readyReason))
		g.Expect(ready.ObservedGeneration).To(Equal(pool.Generation))
		g.Expect(pool.Status.ObservedGeneration).To(Equal(pool.Generation))
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
}

func nodeStatus(name, machineType string, condition imperatorv1alpha1.NodeCondition) imperatorv1alpha1.NodePoolStatus {
	return imperatorv1alpha1.NodePoolStatus{Name: name, MachineType: machineType, Condition: condition}
}

var _ = Describe("MachineNodePool of a Machine", func() {
	It("is created from the Machine, owned by it, and follows its spec", func(ctx context.Context) {
		machine := wrappers.MakeMachine("owner", "owner-group").
			Type(medium, "6", "48Gi", 1).Type(xlarge, "40", "128Gi", 1).
			Node("owner-a", medium).Tainted().Obj()
		createMachine(ctx, machine)

		pool := &imperatorv1alpha1.MachineNodePool{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "owner-node-pool"}, pool)).To(Succeed())
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(machine), machine)).To(Succeed())
		Expect(pool.Labels).To(HaveKeyWithValue(imperatorv1alpha1.MachineGroupKey, "owner-group"))
		Expect(pool.OwnerReferences).To(ConsistOf(metav1.OwnerReference{
			APIVersion: imperatorv1alpha1.GroupVersion.String(), Kind: "Machine", Name: "owner", UID: machine.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}))
		Expect(pool.Spec.MachineGroup).To(Equal("owner-group"))
		Expect(pool.Spec.NodePool).To(Equal(machine.Spec.NodePool))
		Expect(pool.Spec.MachineTypeStock).To(Equal([]imperatorv1alpha1.MachineTypeRef{{Name: medium}, {Name: xlarge}}))
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "owner-node-pool"}, pool)).To(Succeed())
			g.Expect(pool.Finalizers).To(ContainElement(imperatorv1alpha1.NodePoolFinalizer))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		By("changing the Machine's node pool")
		updateMachine(ctx, "owner", func(m *imperatorv1alpha1.Machine) {
			m.Spec.NodePool[0].Mode = imperatorv1alpha1.NodePoolModeMaintenance
		})
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "owner-node-pool"}, pool)).To(Succeed())
			g.Expect(pool.Spec.NodePool[0].Mode).To(Equal(imperatorv1alpha1.NodePoolModeMaintenance))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		By("editing the pool by hand: the Machine's spec comes back")
		patch := client.MergeFrom(pool.DeepCopy())
		pool.Spec.NodePool = nil
		Expect(k8s.Patch(ctx, pool, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "owner-node-pool"}, pool)).To(Succeed())
			g.Expect(pool.Spec.NodePool).To(HaveLen(1))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	})
})

var _ = Describe("Node-pool controller", func() {
	It("configures exactly the listed nodes and reports missing ones", func(ctx context.Context) {
		before := createNodes(ctx, "create-a", "create-b", "create-outsider")
		createMachine(ctx, wrappers.MakeMachine("create", "create-group").
			Type(medium, "6", "48Gi", 1).Type(xlarge, "40", "128Gi", 1).
			Node("create-a", xlarge).Tainted().
			Node("create-b", medium).Maintenance().
			Node("create-late", medium).Tainted().Obj())

		expectNode(ctx, "create-a", configured("create-group", xlarge, imperatorv1alpha1.NodePoolReady, true), before["create-a"])
		expectNode(ctx, "create-b", configured("create-group", medium, imperatorv1alpha1.NodePoolMaintenance, false), before["create-b"])
		expectNode(ctx, "create-outsider", nodepool.OwnedState{}, before["create-outsider"])
		expectPoolStatus(ctx, "create", []imperatorv1alpha1.NodePoolStatus{
			nodeStatus("create-a", xlarge, imperatorv1alpha1.NodeConditionReady),
			nodeStatus("create-b", medium, imperatorv1alpha1.NodeConditionMaintenance),
			nodeStatus("create-late", medium, imperatorv1alpha1.NodeConditionMissing),
		}, metav1.ConditionFalse, imperatorv1alpha1.NodePoolReasonNodeMissing)

		By("the missing node joining the cluster")
		late := createNodes(ctx, "create-late")
		expectNode(ctx, "create-late", configured("create-group", medium, imperatorv1alpha1.NodePoolReady, true), late["create-late"])
		expectPoolStatus(ctx, "create", []imperatorv1alpha1.NodePoolStatus{
			nodeStatus("create-a", xlarge, imperatorv1alpha1.NodeConditionReady),
			nodeStatus("create-b", medium, imperatorv1alpha1.NodeConditionMaintenance),
			nodeStatus("create-late", medium, imperatorv1alpha1.NodeConditionReady),
		}, metav1.ConditionTrue, imperatorv1alpha1.NodePoolReasonNodesConfigured)
	})

	It("follows the mode from ready to maintenance and back", func(ctx context.Context) {
		before := createNodes(ctx, "mode-a")
		createMachine(ctx, wrappers.MakeMachine("mode", "mode-group").
			Type(medium, "6", "48Gi", 1).Node("mode-a", medium).Tainted().Obj())
		expectNode(ctx, "mode-a", configured("mode-group", medium, imperatorv1alpha1.NodePoolReady, true), before["mode-a"])

		setMode := func(mode imperatorv1alpha1.NodePoolMode) {
			updateMachine(ctx, "mode", func(m *imperatorv1alpha1.Machine) { m.Spec.NodePool[0].Mode = mode })
		}
		setMode(imperatorv1alpha1.NodePoolModeMaintenance)
		expectNode(ctx, "mode-a", configured("mode-group", medium, imperatorv1alpha1.NodePoolMaintenance, true), before["mode-a"])
		expectPoolStatus(ctx, "mode", []imperatorv1alpha1.NodePoolStatus{
			nodeStatus("mode-a", medium, imperatorv1alpha1.NodeConditionMaintenance),
		}, metav1.ConditionTrue, imperatorv1alpha1.NodePoolReasonNodesConfigured)

		setMode(imperatorv1alpha1.NodePoolModeReady)
		expectNode(ctx, "mode-a", configured("mode-group", medium, imperatorv1alpha1.NodePoolReady, true), before["mode-a"])
		expectPoolStatus(ctx, "mode", []imperatorv1alpha1.NodePoolStatus{
			nodeStatus("mode-a", medium, imperatorv1alpha1.NodeConditionReady),
		}, metav1.ConditionTrue, imperatorv1alpha1.NodePoolReasonNodesConfigured)
	})

	It("marks a node not-ready while it is unreachable", func(ctx context.Context) {
		before := createNodes(ctx, "health-a")
		createMachine(ctx, wrappers.MakeMachine("health", "health-group").
			Type(medium, "6", "48Gi", 1).Node("health-a", medium).Tainted().Obj())
		expectNode(ctx, "health-a", configured("health-group", medium, imperatorv1alpha1.NodePoolReady, true), before["health-a"])

		unreachable := corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}
		updateNode(ctx, "health-a", func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, unreachable) })
		withUnreachable := before["health-a"]
		withUnreachable.Taints = append(append([]corev1.Taint{}, withUnreachable.Taints...), unreachable)
		expectNode(ctx, "health-a", configured("health-group", medium, imperatorv1alpha1.NodePoolNotReady, true), withUnreachable)
		expectPoolStatus(ctx, "health", []imperatorv1alpha1.NodePoolStatus{
			nodeStatus("health-a", medium, imperatorv1alpha1.NodeConditionNotReady),
		}, metav1.ConditionTrue, imperatorv1alpha1.NodePoolReasonNodesConfigured)

		updateNode(ctx, "health-a", func(n *corev1.Node) {
			n.Spec.Taints = removeTaint(n.Spec.Taints, corev1.TaintNodeUnreachable)
		})
		expectNode(ctx, "health-a", configured("health-group", medium, imperatorv1alpha1.NodePoolReady, true), before["health-a"])
		expectPoolStatus(ctx, "health", []imperatorv1alpha1.NodePoolStatus{
			nodeStatus("health-a", medium, imperatorv1alpha1.NodeConditionReady),
		}, metav1.ConditionTrue, imperatorv1alpha1.NodePoolReasonNodesConfigured)
	})

	It("removes only its own taints when taint flips to false", func(ctx context.Context) {
		before := createNodes(ctx, "taint-a")
		createMachine(ctx, wrappers.MakeMachine("taint", "taint-group").
			Type(medium, "6", "48Gi", 1).Node("taint-a", medium).Tainted().Obj())
		expectNode(ctx, "taint-a", configured("taint-group", medium, imperatorv1alpha1.NodePoolReady, true), before["taint-a"])

		updateMachine(ctx, "taint", func(m *imperatorv1alpha1.Machine) { m.Spec.NodePool[0].Taint = false })
		expectNode(ctx, "taint-a", configured("taint-group", medium, imperatorv1alpha1.NodePoolReady, false), before["taint-a"])
	})

	It("cleans a node that leaves the pool and re-labels one whose type changes", func(ctx context.Context) {
		before := createNodes(ctx, "move-a", "move-b")
		createMachine(ctx, wrappers.MakeMachine("move", "move-group").
			Type(medium, "6", "48Gi", 1).Type(xlarge, "40", "128Gi", 1).
			Node("move-a", medium).Tainted().
			Node("move-b", medium).Tainted().Obj())
		expectNode(ctx, "move-a", configured("move-group", medium, imperatorv1alpha1.NodePoolReady, true), before["move-a"])
		expectNode(ctx, "move-b", configured("move-group", medium, imperatorv1alpha1.NodePoolReady, true), before["move-b"])

		updateMachine(ctx, "move", func(m *imperatorv1alpha1.Machine) {
			m.Spec.NodePool = m.Spec.NodePool[1:]
			m.Spec.NodePool[0].MachineType = []imperatorv1alpha1.MachineTypeRef{{Name: xlarge}}
		})
		expectNode(ctx, "move-a", nodepool.OwnedState{}, before["move-a"])
		expectNode(ctx, "move-b", configured("move-group", xlarge, imperatorv1alpha1.NodePoolReady, true), before["move-b"])
		expectPoolStatus(ctx, "move", []imperatorv1alpha1.NodePoolStatus{
			nodeStatus("move-b", xlarge, imperatorv1alpha1.NodeConditionReady),
		}, metav1.ConditionTrue, imperatorv1alpha1.NodePoolReasonNodesConfigured)
	})

	It("takes everything off all nodes when the Machine is deleted", func(ctx context.Context) {
		before := createNodes(ctx, "gone-a", "gone-b")
		createMachine(ctx, wrappers.MakeMachine("gone", "gone-group").
			Type(medium, "6", "48Gi", 1).
			Node("gone-a", medium).Tainted().
			Node("gone-b", medium).Maintenance().Obj())
		expectNode(ctx, "gone-a", configured("gone-group", medium, imperatorv1alpha1.NodePoolReady, true), before["gone-a"])
		expectNode(ctx, "gone-b", configured("gone-group", medium, imperatorv1alpha1.NodePoolMaintenance, false), before["gone-b"])

		deleteMachine(ctx, "gone")
		expectNode(ctx, "gone-a", nodepool.OwnedState{}, before["gone-a"])
		expectNode(ctx, "gone-b", nodepool.OwnedState{}, before["gone-b"])
	})

	It("leaves a node listed by two pools to the older one and hands it over when that one goes", func(ctx context.Context) {
		before := createNodes(ctx, "shared-a")
		// Without the validator (not in this suite), two Machines can list
		// the same node, as after racing admissions.
		createMachine(ctx, wrappers.MakeMachine("first", "first-group").
			Type(medium, "6", "48Gi", 1).Node("shared-a", medium).Tainted().Obj())
		expectNode(ctx, "shared-a", configured("first-group", medium, imperatorv1alpha1.NodePoolReady, true), before["shared-a"])
		expectPoolStatus(ctx, "first", []imperatorv1alpha1.NodePoolStatus{
			nodeStatus("shared-a", medium, imperatorv1alpha1.NodeConditionReady),
		}, metav1.ConditionTrue, imperatorv1alpha1.NodePoolReasonNodesConfigured)

		createMachine(ctx, wrappers.MakeMachine("second", "second-group").
			Type(xlarge, "40", "128Gi", 1).Node("shared-a", xlarge).Obj())
		expectPoolStatus(ctx, "second", []imperatorv1alpha1.NodePoolStatus{
			nodeStatus("shared-a", xlarge, imperatorv1alpha1.NodeConditionConflict),
		}, metav1.ConditionFalse, imperatorv1alpha1.NodePoolReasonNodeConflict)
		Consistently(func(g Gomega) {
			node := &corev1.Node{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "shared-a"}, node)).To(Succeed())
			g.Expect(cmp.Diff(configured("first-group", medium, imperatorv1alpha1.NodePoolReady, true),
				nodepool.CurrentState(node), ownedStateOpts...)).To(BeEmpty())
		}).WithTimeout(2 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())

		deleteMachine(ctx, "first")
		expectNode(ctx, "shared-a", configured("second-group", xlarge, imperatorv1alpha1.NodePoolReady, false), before["shared-a"])
		expectPoolStatus(ctx, "second", []imperatorv1alpha1.NodePoolStatus{
			nodeStatus("shared-a", xlarge, imperatorv1alpha1.NodeConditionReady),
		}, metav1.ConditionTrue, imperatorv1alpha1.NodePoolReasonNodesConfigured)
	})

	It("leaves no key behind when nodes are listed and dropped in quick succession", func(ctx context.Context) {
		before := createNodes(ctx, "churn-a", "churn-b")
		createMachine(ctx, wrappers.MakeMachine("churn", "churn-group").
			Type(medium, "6", "48Gi", 1).Node("churn-a", medium).Tainted().Node("churn-b", medium).Tainted().Obj())
		// No waiting between the steps: the controller sees them while its
		// own node writes are still on their way into its cache.
		updateMachine(ctx, "churn", func(m *imperatorv1alpha1.Machine) { m.Spec.NodePool = m.Spec.NodePool[1:] })
		deleteMachine(ctx, "churn")
		expectNode(ctx, "churn-a", nodepool.OwnedState{}, before["churn-a"])
		expectNode(ctx, "churn-b", nodepool.OwnedState{}, before["churn-b"])
		Consistently(func(g Gomega) {
			for _, name := range []string{"churn-a", "churn-b"} {
				node := &corev1.Node{}
				g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
				g.Expect(nodepool.CurrentState(node).Empty()).To(BeTrue(), "node %s carries %+v", name, nodepool.CurrentState(node))
			}
		}).WithTimeout(2 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	})

	It("writes nothing at steady state", func(ctx context.Context) {
		before := createNodes(ctx, "steady-a", "steady-b")
		createMachine(ctx, wrappers.MakeMachine("steady", "steady-group").
			Type(medium, "6", "48Gi", 1).
			Node("steady-a", medium).Tainted().
			Node("steady-b", medium).Maintenance().
			Node("steady-missing", medium).Obj())
		expectNode(ctx, "steady-a", configured("steady-group", medium, imperatorv1alpha1.NodePoolReady, true), before["steady-a"])
		expectNode(ctx, "steady-b", configured("steady-group", medium, imperatorv1alpha1.NodePoolMaintenance, false), before["steady-b"])
		expectPoolStatus(ctx, "steady", []imperatorv1alpha1.NodePoolStatus{
			nodeStatus("steady-a", medium, imperatorv1alpha1.NodeConditionReady),
			nodeStatus("steady-b", medium, imperatorv1alpha1.NodeConditionMaintenance),
			nodeStatus("steady-missing", medium, imperatorv1alpha1.NodeConditionMissing),
		}, metav1.ConditionFalse, imperatorv1alpha1.NodePoolReasonNodeMissing)

		resourceVersions := func(g Gomega) map[string]string {
			out := map[string]string{}
			for _, obj := range []client.Object{
				&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "steady-a"}},
				&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "steady-b"}},
				&imperatorv1alpha1.MachineNodePool{ObjectMeta: metav1.ObjectMeta{Name: "steady-node-pool"}},
				&imperatorv1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "steady"}},
			} {
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
				out[obj.GetName()] = obj.GetResourceVersion()
			}
			// Events are writes too: the one about the missing node is
			// neither sent again nor counted again in a series.
			evs, eventVersions := machineEvents(ctx, g, "steady")
			for i, ev := range evs {
				out["event "+ev.Reason+" "+ev.Node] = eventVersions[i]
			}
			return out
		}
		Eventually(func(g Gomega) {
			evs, _ := machineEvents(ctx, g, "steady")
			g.Expect(evs).To(ConsistOf(machineEvent{
				Type: corev1.EventTypeWarning, Reason: "NodeMissing", Node: "steady-missing", Count: 1,
				Note: "node steady-missing listed in spec.nodePool does not exist",
			}))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		settled := resourceVersions(Default)
		Consistently(resourceVersions).WithTimeout(3 * time.Second).WithPolling(200 * time.Millisecond).Should(Equal(settled))

		By("a foreign label change on a listed node: read, not rewritten")
		updateNode(ctx, "steady-a", func(n *corev1.Node) { n.Labels["example.com/rack"] = "r1" })
		touched := resourceVersions(Default)
		Consistently(resourceVersions).WithTimeout(2 * time.Second).WithPolling(200 * time.Millisecond).Should(Equal(touched))
	})
})

var _ = Describe("Machine API", func() {
	It("documents machine.spec.machineTypes for kubectl explain", func() {
		// The API server publishes a new CRD's OpenAPI schema a few seconds
		// after the CRD is established; kubectl explain needs that schema.
		var out string
		Eventually(func() error {
			var err error
			out, err = kubectl(env, "explain", "machines.spec.machineTypes")
			return err
		}).WithTimeout(30 * time.Second).WithPolling(time.Second).Should(Succeed())
		Expect(out).To(ContainSubstring("machineTypes are the named shapes"))
		Expect(out).To(ContainSubstring("available"))
	})
})

func removeTaint(taints []corev1.Taint, key string) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range taints {
		if t.Key != key {
			out = append(out, t)
		}
	}
	return out
}
