package nodepool

import (
	"fmt"
	"testing"

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
