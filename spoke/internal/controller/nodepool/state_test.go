package nodepool

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

const (
	group      = "general-machine"
	xlarge     = "compute-xlarge"
	xlargeKey  = imperatorv1alpha1.Prefix + xlarge
	foreignKey = "example.com/team"
)

func TestHealth(t *testing.T) {
	cases := map[string]struct {
		node *corev1.Node
		mode imperatorv1alpha1.NodePoolMode
		want imperatorv1alpha1.NodePoolState
	}{
		"healthy node in ready mode": {
			node: wrappers.MakeNode("n").Obj(),
			mode: imperatorv1alpha1.NodePoolModeReady,
			want: imperatorv1alpha1.NodePoolReady,
		},
		"empty mode counts as ready": {
			node: wrappers.MakeNode("n").Obj(),
			want: imperatorv1alpha1.NodePoolReady,
		},
		"foreign taints do not matter": {
			node: wrappers.MakeNode("n").Taint(foreignKey, "a", corev1.TaintEffectNoExecute).
				Taint(corev1.TaintNodeMemoryPressure, "", corev1.TaintEffectNoSchedule).Obj(),
			mode: imperatorv1alpha1.NodePoolModeReady,
			want: imperatorv1alpha1.NodePoolReady,
		},
		"not-ready taint": {
			node: wrappers.MakeNode("n").Taint(corev1.TaintNodeNotReady, "", corev1.TaintEffectNoExecute).Obj(),
			mode: imperatorv1alpha1.NodePoolModeReady,
			want: imperatorv1alpha1.NodePoolNotReady,
		},
		"unreachable taint with NoSchedule effect": {
			node: wrappers.MakeNode("n").Taint(corev1.TaintNodeUnreachable, "", corev1.TaintEffectNoSchedule).Obj(),
			mode: imperatorv1alpha1.NodePoolModeReady,
			want: imperatorv1alpha1.NodePoolNotReady,
		},
		"unschedulable taint": {
			node: wrappers.MakeNode("n").Taint(corev1.TaintNodeUnschedulable, "", corev1.TaintEffectNoSchedule).Obj(),
			mode: imperatorv1alpha1.NodePoolModeReady,
			want: imperatorv1alpha1.NodePoolNotReady,
		},
		"network-unavailable taint": {
			node: wrappers.MakeNode("n").Taint(corev1.TaintNodeNetworkUnavailable, "", corev1.TaintEffectNoSchedule).Obj(),
			mode: imperatorv1alpha1.NodePoolModeReady,
			want: imperatorv1alpha1.NodePoolNotReady,
		},
		"maintenance wins over health": {
			node: wrappers.MakeNode("n").Taint(corev1.TaintNodeUnreachable, "", corev1.TaintEffectNoExecute).Obj(),
			mode: imperatorv1alpha1.NodePoolModeMaintenance,
			want: imperatorv1alpha1.NodePoolMaintenance,
		},
		"maintenance of a healthy node": {
			node: wrappers.MakeNode("n").Obj(),
			mode: imperatorv1alpha1.NodePoolModeMaintenance,
			want: imperatorv1alpha1.NodePoolMaintenance,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Health(tc.node, tc.mode); got != tc.want {
				t.Errorf("Health() = %q, want %q", got, tc.want)
			}
		})
	}
}

func noSchedule(key, value string) corev1.Taint {
	return corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffectNoSchedule}
}

func TestDesiredState(t *testing.T) {
	cases := map[string]struct {
		entry imperatorv1alpha1.NodePool
		state imperatorv1alpha1.NodePoolState
		want  OwnedState
	}{
		"untainted ready node": {
			entry: wrappers.MakeMachine("m", group).Node("n", xlarge).Obj().Spec.NodePool[0],
			state: imperatorv1alpha1.NodePoolReady,
			want: OwnedState{
				Labels: map[string]string{
					imperatorv1alpha1.MachineTypeKey: xlarge,
					xlargeKey:                        group,
					imperatorv1alpha1.NodePoolKey:    "ready",
				},
				Annotations: map[string]string{imperatorv1alpha1.MachineGroupKey: group},
			},
		},
		"tainted node in maintenance": {
			entry: wrappers.MakeMachine("m", group).Node("n", xlarge).Maintenance().Tainted().Obj().Spec.NodePool[0],
			state: imperatorv1alpha1.NodePoolMaintenance,
			want: OwnedState{
				Labels: map[string]string{
					imperatorv1alpha1.MachineTypeKey: xlarge,
					xlargeKey:                        group,
					imperatorv1alpha1.NodePoolKey:    "maintenance",
				},
				Annotations: map[string]string{imperatorv1alpha1.MachineGroupKey: group},
				Taints: []corev1.Taint{
					noSchedule(xlargeKey, group),
					noSchedule(imperatorv1alpha1.NodePoolKey, "maintenance"),
				},
			},
		},
		"entry without machine type": {
			entry: imperatorv1alpha1.NodePool{Name: "n", Taint: true},
			state: imperatorv1alpha1.NodePoolNotReady,
			want: OwnedState{
				Labels:      map[string]string{imperatorv1alpha1.NodePoolKey: "not-ready"},
				Annotations: map[string]string{imperatorv1alpha1.MachineGroupKey: group},
				Taints:      []corev1.Taint{noSchedule(imperatorv1alpha1.NodePoolKey, "not-ready")},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, DesiredState(tc.entry, group, tc.state)); diff != "" {
				t.Errorf("DesiredState() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestApply(t *testing.T) {
	tainted := DesiredState(wrappers.MakeMachine("m", group).Node("n", xlarge).Tainted().Obj().Spec.NodePool[0],
		group, imperatorv1alpha1.NodePoolReady)
	untainted := DesiredState(wrappers.MakeMachine("m", group).Node("n", xlarge).Obj().Spec.NodePool[0],
		group, imperatorv1alpha1.NodePoolReady)
	configured := wrappers.MakeNode("n").Label(foreignKey, "x").Annotation(foreignKey, "y").
		Taint(corev1.TaintNodeUnreachable, "", corev1.TaintEffectNoExecute).
		Label(imperatorv1alpha1.MachineTypeKey, xlarge).Label(xlargeKey, group).Label(imperatorv1alpha1.NodePoolKey, "ready").
		Annotation(imperatorv1alpha1.MachineGroupKey, group).
		Taint(xlargeKey, group, corev1.TaintEffectNoSchedule).
		Taint(imperatorv1alpha1.NodePoolKey, "ready", corev1.TaintEffectNoSchedule).
		Taint(foreignKey, "z", corev1.TaintEffectNoSchedule)

	cases := map[string]struct {
		node        *corev1.Node
		desired     OwnedState
		wantChanged bool
		want        *corev1.Node
	}{
		"fresh node gets everything, foreign keys kept": {
			node: wrappers.MakeNode("n").Label(foreignKey, "x").Annotation(foreignKey, "y").
				Taint(foreignKey, "z", corev1.TaintEffectNoSchedule).Obj(),
			desired:     tainted,
			wantChanged: true,
			want: wrappers.MakeNode("n").Label(foreignKey, "x").Annotation(foreignKey, "y").
				Taint(foreignKey, "z", corev1.TaintEffectNoSchedule).
				Label(imperatorv1alpha1.MachineTypeKey, xlarge).Label(xlargeKey, group).Label(imperatorv1alpha1.NodePoolKey, "ready").
				Annotation(imperatorv1alpha1.MachineGroupKey, group).
				Taint(xlargeKey, group, corev1.TaintEffectNoSchedule).
				Taint(imperatorv1alpha1.NodePoolKey, "ready", corev1.TaintEffectNoSchedule).Obj(),
		},
		"configured node in another taint order is left alone": {
			node:    configured.Obj(),
			desired: tainted,
			want:    configured.Obj(),
		},
		"taint false removes our taints only": {
			node:        configured.Obj(),
			desired:     untainted,
			wantChanged: true,
			want: wrappers.MakeNode("n").Label(foreignKey, "x").Annotation(foreignKey, "y").
				Taint(corev1.TaintNodeUnreachable, "", corev1.TaintEffectNoExecute).
				Label(imperatorv1alpha1.MachineTypeKey, xlarge).Label(xlargeKey, group).Label(imperatorv1alpha1.NodePoolKey, "ready").
				Annotation(imperatorv1alpha1.MachineGroupKey, group).
				Taint(foreignKey, "z", corev1.TaintEffectNoSchedule).Obj(),
		},
		"release removes every key of ours": {
			node:        configured.Obj(),
			desired:     OwnedState{},
			wantChanged: true,
			want: wrappers.MakeNode("n").Label(foreignKey, "x").Annotation(foreignKey, "y").
				Taint(corev1.TaintNodeUnreachable, "", corev1.TaintEffectNoExecute).
				Taint(foreignKey, "z", corev1.TaintEffectNoSchedule).Obj(),
		},
		"release of a node that never was ours changes nothing": {
			node:    wrappers.MakeNode("n").Label(foreignKey, "x").Obj(),
			desired: OwnedState{},
			want:    wrappers.MakeNode("n").Label(foreignKey, "x").Obj(),
		},
		"a taint of ours whose value was edited is put right": {
			node: wrappers.MakeNode("n").
				Label(imperatorv1alpha1.MachineTypeKey, xlarge).Label(xlargeKey, group).Label(imperatorv1alpha1.NodePoolKey, "ready").
				Annotation(imperatorv1alpha1.MachineGroupKey, group).
				Taint(xlargeKey, group, corev1.TaintEffectNoSchedule).
				Taint(imperatorv1alpha1.NodePoolKey, "maintenance", corev1.TaintEffectNoSchedule).Obj(),
			desired:     tainted,
			wantChanged: true,
			want: wrappers.MakeNode("n").
				Label(imperatorv1alpha1.MachineTypeKey, xlarge).Label(xlargeKey, group).Label(imperatorv1alpha1.NodePoolKey, "ready").
				Annotation(imperatorv1alpha1.MachineGroupKey, group).
				Taint(xlargeKey, group, corev1.TaintEffectNoSchedule).
				Taint(imperatorv1alpha1.NodePoolKey, "ready", corev1.TaintEffectNoSchedule).Obj(),
		},
		"stale type label and foreign-effect taint under our prefix are replaced": {
			node: wrappers.MakeNode("n").Label(imperatorv1alpha1.Prefix+"compute-medium", group).
				Label(imperatorv1alpha1.MachineTypeKey, "compute-medium").
				Taint(imperatorv1alpha1.NodePoolKey, "ready", corev1.TaintEffectNoExecute).Obj(),
			desired:     untainted,
			wantChanged: true,
			want: wrappers.MakeNode("n").
				Label(imperatorv1alpha1.MachineTypeKey, xlarge).Label(xlargeKey, group).Label(imperatorv1alpha1.NodePoolKey, "ready").
				Annotation(imperatorv1alpha1.MachineGroupKey, group).Obj(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			node := tc.node.DeepCopy()
			if got := Apply(node, tc.desired); got != tc.wantChanged {
				t.Errorf("Apply() changed = %v, want %v", got, tc.wantChanged)
			}
			if diff := cmp.Diff(tc.want, node, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("node mismatch (-want +got):\n%s", diff)
			}
			if !CurrentState(node).Equal(tc.desired) {
				t.Errorf("CurrentState() after Apply() = %+v, want %+v", CurrentState(node), tc.desired)
			}
		})
	}
}

func TestDesiredNodePool(t *testing.T) {
	machine := wrappers.GeneralMachine().Obj()
	got := DesiredNodePool(machine)
	want := &imperatorv1alpha1.MachineNodePool{
		ObjectMeta: metav1.ObjectMeta{
			Name:   "general-machine-node-pool",
			Labels: map[string]string{imperatorv1alpha1.MachineGroupKey: group},
		},
		Spec: imperatorv1alpha1.MachineNodePoolSpec{
			MachineGroup: group,
			NodePool:     machine.Spec.NodePool,
			MachineTypeStock: []imperatorv1alpha1.MachineTypeRef{
				{Name: "compute-medium"}, {Name: "compute-xlarge"}, {Name: "compute-large"},
			},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DesiredNodePool() mismatch (-want +got):\n%s", diff)
	}
	// The pool is a copy: changing it leaves the Machine alone.
	got.Spec.NodePool[0].MachineType[0].Name = "changed"
	if machine.Spec.NodePool[0].MachineType[0].Name != xlarge {
		t.Errorf("DesiredNodePool() shares the Machine's node pool")
	}
}

func TestReadyCondition(t *testing.T) {
	many := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"}
	cases := map[string]struct {
		failed, conflicting, missing []string
		wantStatus                   metav1.ConditionStatus
		wantReason, wantMessage      string
	}{
		"all configured": {
			wantStatus: metav1.ConditionTrue, wantReason: imperatorv1alpha1.NodePoolReasonNodesConfigured,
			wantMessage: "3 nodes configured",
		},
		"missing node": {
			missing:    []string{"eriri"},
			wantStatus: metav1.ConditionFalse, wantReason: imperatorv1alpha1.NodePoolReasonNodeMissing,
			wantMessage: "nodes that do not exist: eriri",
		},
		"update failure outranks the rest": {
			failed: []string{"utaha"}, conflicting: []string{"michiru (in other-node-pool)"}, missing: []string{"eriri"},
			wantStatus: metav1.ConditionFalse, wantReason: imperatorv1alpha1.NodePoolReasonNodeUpdateFailed,
			wantMessage: "nodes not updated yet: utaha; nodes owned by another MachineNodePool, left to it: michiru (in other-node-pool); nodes that do not exist: eriri",
		},
		"long lists are cut": {
			missing:    many,
			wantStatus: metav1.ConditionFalse, wantReason: imperatorv1alpha1.NodePoolReasonNodeMissing,
			wantMessage: "nodes that do not exist: a, b, c, d, e, f, g, h, i, j and 2 more",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := readyCondition(7, 3, tc.failed, tc.conflicting, tc.missing)
			want := metav1.Condition{
				Type: imperatorv1alpha1.NodePoolConditionReady, Status: tc.wantStatus, ObservedGeneration: 7,
				Reason: tc.wantReason, Message: tc.wantMessage,
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("readyCondition() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
