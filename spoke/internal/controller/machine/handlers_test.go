package machine

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
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

func TestPodViewChangesOnlyWithWhatTheCountReads(t *testing.T) {
	failed := func(p *corev1.Pod) *corev1.Pod {
		p = p.DeepCopy()
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
		return p
	}
	stamped := func(p *corev1.Pod) *corev1.Pod {
		p = p.DeepCopy()
		p.Annotations = map[string]string{imperatorv1alpha1.InjectedAnnotation: `{"machineGroup":"general-machine","machineType":"compute-small"}`}
		return p
	}
	stray := wrappers.MakePod("squat", "s").Guest(group, "compute-small").Obj()
	reservation := wrappers.MakePod(agentNS, "compute-small-general-machine-0").
		Label(imperatorv1alpha1.MachineGroupKey, group).Label(imperatorv1alpha1.MachineTypeKey, "compute-small").
		Label(imperatorv1alpha1.PodRoleKey, string(imperatorv1alpha1.PodRoleReservation)).Obj()
	cases := map[string]struct {
		old, new *corev1.Pod
		want     bool
	}{
		"a guest or stray the scheduler could not place: no reconcile": {old: stray, new: failed(stray), want: true},
		"a reservation pod the scheduler could not place":              {old: reservation, new: failed(reservation)},
		"the injector's record appears or goes":                        {old: stray, new: stamped(stray)},
		"a reservation pod's controller changes (adopted or released)": {old: reservation, new: func() *corev1.Pod {
			p := reservation.DeepCopy()
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "compute-small-general-machine",
				UID: "sts", Controller: ptr.To(true)}}
			return p
		}()},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := podView(tc.old) == podView(tc.new); got != tc.want {
				t.Errorf("podView(old) == podView(new) is %v, want %v", got, tc.want)
			}
		})
	}
}
