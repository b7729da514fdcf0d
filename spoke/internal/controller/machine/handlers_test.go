package machine

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

func TestNodePoolChanged(t *testing.T) {
	base := func() *wrappers.NodeWrapper {
		return wrappers.MakeNode("eriri").
			Label(imperatorv1alpha1.NodePoolKey, string(imperatorv1alpha1.NodePoolReady)).
			Label(imperatorv1alpha1.MachineTypeKey, "compute-medium").
			Label(imperatorv1alpha1.MachineTypeKeyFor("compute-medium"), group).
			Annotation(imperatorv1alpha1.MachineGroupKey, group)
	}
	cases := map[string]struct {
		newNode *wrappers.NodeWrapper
		want    bool
	}{
		"node-pool label changes": {
			newNode: base().Label(imperatorv1alpha1.NodePoolKey, string(imperatorv1alpha1.NodePoolNotReady)), want: true,
		},
		"machine-type label changes": {
			newNode: base().Label(imperatorv1alpha1.MachineTypeKey, "compute-xlarge"), want: true,
		},
		"machine-group annotation changes": {
			newNode: base().Annotation(imperatorv1alpha1.MachineGroupKey, "other"), want: true,
		},
		// A waiting guest's nodeSelector may name it: the node may take it now.
		"another label changes": {newNode: base().Label("topology.kubernetes.io/zone", "a"), want: true},
		"a taint is added":      {newNode: base().Taint("example.com/drain", "", corev1.TaintEffectNoSchedule), want: true},
		"an annotation changes": {newNode: base().Annotation("node.alpha.kubernetes.io/ttl", "0")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := nodePoolChanged().Update(event.UpdateEvent{ObjectOld: base().Obj(), ObjectNew: tc.newNode.Obj()})
			if got != tc.want {
				t.Errorf("nodePoolChanged().Update() = %v, want %v", got, tc.want)
			}
		})
	}
}
