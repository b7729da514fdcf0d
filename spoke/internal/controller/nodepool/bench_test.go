package nodepool

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// BenchmarkSteadyStateDecision is the work the reconciler does per listed
// node when nothing changed: classify health, build the desired state and
// find the node already carries it. Run with
// `go test -run '^$' -bench . ./spoke/internal/controller/nodepool/`.
func BenchmarkSteadyStateDecision(b *testing.B) {
	entry := wrappers.MakeMachine("m", group).Node("n", xlarge).Tainted().Obj().Spec.NodePool[0]
	node := wrappers.MakeNode("n").Label(foreignKey, "x").Taint(foreignKey, "y", corev1.TaintEffectNoSchedule).Obj()
	Apply(node, DesiredState(entry, group, imperatorv1alpha1.NodePoolReady))
	b.ReportAllocs()
	for b.Loop() {
		if Apply(node, DesiredState(entry, group, Health(node, entry.Mode))) {
			b.Fatal("a configured node was changed")
		}
	}
}

// BenchmarkApply configures a node carrying many foreign labels and taints.
func BenchmarkApply(b *testing.B) {
	entry := wrappers.MakeMachine("m", group).Node("n", xlarge).Tainted().Obj().Spec.NodePool[0]
	w := wrappers.MakeNode("n")
	for i := range 50 {
		w.Label(fmt.Sprintf("example.com/label-%d", i), "v").Taint(fmt.Sprintf("example.com/taint-%d", i), "v", corev1.TaintEffectNoSchedule)
	}
	fresh := w.Obj()
	desired := DesiredState(entry, group, imperatorv1alpha1.NodePoolReady)
	b.ReportAllocs()
	for b.Loop() {
		if !Apply(fresh.DeepCopy(), desired) {
			b.Fatal("a fresh node was not changed")
		}
	}
}

// BenchmarkSelectorPoolDecisions is the in-process work of one reconcile of
// a selector pool of 1,000 configured nodes when nothing changed, with four
// other selector pools in the cluster: find the members, decide each node's
// owner and find it carries its desired state already (API reads and the
// status comparison aside). Run with
// `go test -run '^$' -bench SelectorPool ./spoke/internal/controller/nodepool/`.
func BenchmarkSelectorPoolDecisions(b *testing.B) {
	const nodes = 1000
	pool := poolOf(wrappers.MakeMachine("m", group).Select(byProduct(h100), xlarge).Tainted().Obj(), time.Now())
	pools := []*imperatorv1alpha1.MachineNodePool{pool}
	for i := range 4 {
		pools = append(pools, poolOf(wrappers.MakeMachine(fmt.Sprintf("other-%d", i), fmt.Sprintf("other-%d", i)).
			Select(byProduct(fmt.Sprintf("other-product-%d", i)), xlarge).Obj(), time.Now()))
	}
	selected := make([]*corev1.Node, 0, nodes)
	for i := range nodes {
		node := wrappers.MakeNode(fmt.Sprintf("n-%04d", i)).Label(imperatorv1alpha1.GPUProductLabel, h100).Obj()
		Apply(node, DesiredState(pool.Spec.NodePool[0], group, imperatorv1alpha1.NodePoolReady))
		selected = append(selected, node)
	}
	byName := make(map[string]*corev1.Node, nodes)
	for _, node := range selected {
		byName[node.Name] = node
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, m := range Members(pool.Spec.NodePool, selected) {
			node := byName[m.name]
			if Owner(node, pools) != pool {
				b.Fatal("the pool does not own its node")
			}
			if Apply(node, DesiredState(m.entry, group, Health(node, m.entry.Mode))) {
				b.Fatal("a configured node was changed")
			}
		}
	}
}
