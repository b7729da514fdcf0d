package nodepool

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

const (
	h100    = "NVIDIA-H100-80GB-HBM3"
	rtx3090 = "NVIDIA-GeForce-RTX-3090"
	small   = "compute-small"
)

var byProduct = func(product string) map[string]string {
	return map[string]string{imperatorv1alpha1.GPUProductLabel: product}
}

// poolOf is the MachineNodePool of machine, created at created.
func poolOf(machine *imperatorv1alpha1.Machine, created time.Time) *imperatorv1alpha1.MachineNodePool {
	return &imperatorv1alpha1.MachineNodePool{
		ObjectMeta: metav1.ObjectMeta{Name: imperatorv1alpha1.NodePoolName(machine.Name), CreationTimestamp: metav1.NewTime(created)},
		Spec: imperatorv1alpha1.MachineNodePoolSpec{
			MachineGroup: machine.Labels[imperatorv1alpha1.MachineGroupKey],
			NodePool:     machine.Spec.NodePool,
		},
	}
}

func TestEntryFor(t *testing.T) {
	h100Node := wrappers.MakeNode("kasumi").Label(imperatorv1alpha1.GPUProductLabel, h100).Obj()
	cases := map[string]struct {
		machine   *imperatorv1alpha1.Machine
		node      *corev1.Node
		wantType  string
		wantNamed bool
		wantOK    bool
	}{
		"a selector takes a node with its label": {
			machine:  wrappers.MakeMachine("m", group).Select(byProduct(h100), xlarge).Obj(),
			node:     h100Node,
			wantType: xlarge, wantOK: true,
		},
		"a selector leaves a node without its label": {
			machine: wrappers.MakeMachine("m", group).Select(byProduct(rtx3090), xlarge).Obj(),
			node:    h100Node,
		},
		"a name wins over an earlier selector of the same Machine": {
			machine:  wrappers.MakeMachine("m", group).Select(byProduct(h100), xlarge).Node("kasumi", small).Obj(),
			node:     h100Node,
			wantType: small, wantNamed: true, wantOK: true,
		},
		"the first matching selector decides the type": {
			machine: wrappers.MakeMachine("m", group).Select(byProduct(rtx3090), small).
				Select(byProduct(h100), xlarge).Select(map[string]string{"kubernetes.io/os": "linux"}, small).Obj(),
			node:     wrappers.MakeNode("kasumi").Label(imperatorv1alpha1.GPUProductLabel, h100).Label("kubernetes.io/os", "linux").Obj(),
			wantType: xlarge, wantOK: true,
		},
		"an empty selector takes nothing": {
			machine: &imperatorv1alpha1.Machine{Spec: imperatorv1alpha1.MachineSpec{NodePool: []imperatorv1alpha1.NodePool{{
				NodeSelector: &metav1.LabelSelector{}, MachineType: []imperatorv1alpha1.MachineTypeRef{{Name: xlarge}},
			}}}},
			node: h100Node,
		},
		"a selector that does not parse takes nothing": {
			machine: &imperatorv1alpha1.Machine{Spec: imperatorv1alpha1.MachineSpec{NodePool: []imperatorv1alpha1.NodePool{{
				NodeSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: imperatorv1alpha1.GPUProductLabel, Operator: "Near"}}},
				MachineType:  []imperatorv1alpha1.MachineTypeRef{{Name: xlarge}},
			}}}},
			node: h100Node,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			entry, named, ok := EntryFor(tc.machine.Spec.NodePool, tc.node)
			gotType := ""
			if ok {
				gotType = entry.MachineType[0].Name
			}
			if gotType != tc.wantType || named != tc.wantNamed || ok != tc.wantOK {
				t.Errorf("EntryFor = (type %q, named %v, ok %v), want (type %q, named %v, ok %v)", gotType, named, ok, tc.wantType, tc.wantNamed, tc.wantOK)
			}
		})
	}
}

func TestMembers(t *testing.T) {
	h100Node := func(name string) *corev1.Node {
		return wrappers.MakeNode(name).Label(imperatorv1alpha1.GPUProductLabel, h100).Obj()
	}
	cases := map[string]struct {
		machine  *imperatorv1alpha1.Machine
		selected []*corev1.Node
		// want is "<node>=<machine type>" per member, in order.
		want []string
	}{
		"named nodes in order, missing ones too": {
			machine: wrappers.MakeMachine("m", group).Node("utaha", xlarge).Node("eriri", small).Obj(),
			want:    []string{"utaha=" + xlarge, "eriri=" + small},
		},
		"selected nodes by name after the named ones": {
			machine:  wrappers.MakeMachine("m", group).Select(byProduct(h100), xlarge).Node("utaha", small).Obj(),
			selected: []*corev1.Node{h100Node("megumi"), h100Node("kasumi")},
			want:     []string{"utaha=" + small, "kasumi=" + xlarge, "megumi=" + xlarge},
		},
		"a node both named and selected appears once, with its named entry": {
			machine:  wrappers.MakeMachine("m", group).Select(byProduct(h100), xlarge).Node("kasumi", small).Obj(),
			selected: []*corev1.Node{h100Node("kasumi"), h100Node("megumi")},
			want:     []string{"kasumi=" + small, "megumi=" + xlarge},
		},
		"a node matched by two selectors appears once": {
			machine: wrappers.MakeMachine("m", group).Select(byProduct(h100), xlarge).
				Select(map[string]string{"kubernetes.io/os": "linux"}, small).Obj(),
			selected: []*corev1.Node{
				h100Node("kasumi"),
				wrappers.MakeNode("kasumi").Label(imperatorv1alpha1.GPUProductLabel, h100).Label("kubernetes.io/os", "linux").Obj(),
			},
			want: []string{"kasumi=" + xlarge},
		},
		"a node named twice appears once": {
			machine: wrappers.MakeMachine("m", group).Node("utaha", xlarge).Node("utaha", small).Obj(),
			want:    []string{"utaha=" + xlarge},
		},
		"no node selected: only the named ones": {
			machine: wrappers.MakeMachine("m", group).Select(byProduct(h100), xlarge).Obj(),
			want:    []string{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := []string{}
			for _, m := range Members(tc.machine.Spec.NodePool, tc.selected) {
				got = append(got, m.name+"="+m.entry.MachineType[0].Name)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Members (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOwner(t *testing.T) {
	older := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	newer := older.Add(time.Hour)
	namedKasumi := poolOf(wrappers.MakeMachine("named", "named-group").Node("kasumi", xlarge).Obj(), newer)
	namedKasumiOld := poolOf(wrappers.MakeMachine("named-old", "named-old-group").Node("kasumi", xlarge).Obj(), older)
	selectsOld := poolOf(wrappers.MakeMachine("selects-old", "old-group").Select(byProduct(h100), xlarge).Obj(), older)
	selectsNew := poolOf(wrappers.MakeMachine("selects-new", "new-group").Select(byProduct(h100), xlarge).Obj(), newer)
	selectsOther := poolOf(wrappers.MakeMachine("selects-3090", "3090-group").Select(byProduct(rtx3090), xlarge).Obj(), older)
	deleting := selectsOld.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: newer}

	kasumi := wrappers.MakeNode("kasumi").Label(imperatorv1alpha1.GPUProductLabel, h100)
	cases := map[string]struct {
		node       *corev1.Node
		pools      []*imperatorv1alpha1.MachineNodePool
		loser      *imperatorv1alpha1.MachineNodePool
		want       *imperatorv1alpha1.MachineNodePool
		wantReason string
	}{
		"nobody claims the node": {
			node:  kasumi.Obj(),
			pools: []*imperatorv1alpha1.MachineNodePool{selectsOther},
		},
		"the only selector takes it": {
			node:  kasumi.Obj(),
			pools: []*imperatorv1alpha1.MachineNodePool{selectsOther, selectsNew},
			want:  selectsNew,
		},
		"two names: the older pool, as before selectors": {
			node:  kasumi.Obj(),
			pools: []*imperatorv1alpha1.MachineNodePool{namedKasumi, namedKasumiOld},
			loser: namedKasumi, want: namedKasumiOld, wantReason: ownerListedFirst,
		},
		"a name wins over an older selector": {
			node:  kasumi.Obj(),
			pools: []*imperatorv1alpha1.MachineNodePool{selectsOld, namedKasumi},
			loser: selectsOld, want: namedKasumi, wantReason: ownerNamesIt,
		},
		"a name wins over a selector holding the node": {
			node:  kasumi.Annotation(imperatorv1alpha1.MachineGroupKey, "old-group").Obj(),
			pools: []*imperatorv1alpha1.MachineNodePool{selectsOld, namedKasumi},
			loser: selectsOld, want: namedKasumi, wantReason: ownerNamesIt,
		},
		"two selectors, nobody holds it: the older": {
			node:  wrappers.MakeNode("kasumi").Label(imperatorv1alpha1.GPUProductLabel, h100).Obj(),
			pools: []*imperatorv1alpha1.MachineNodePool{selectsNew, selectsOld},
			loser: selectsNew, want: selectsOld, wantReason: ownerSelectedFirst,
		},
		"two selectors: the one holding it keeps it, however young": {
			node: wrappers.MakeNode("kasumi").Label(imperatorv1alpha1.GPUProductLabel, h100).
				Annotation(imperatorv1alpha1.MachineGroupKey, "new-group").Obj(),
			pools: []*imperatorv1alpha1.MachineNodePool{selectsOld, selectsNew},
			loser: selectsOld, want: selectsNew, wantReason: ownerHoldsIt,
		},
		"a pool being deleted owns nothing": {
			node: wrappers.MakeNode("kasumi").Label(imperatorv1alpha1.GPUProductLabel, h100).
				Annotation(imperatorv1alpha1.MachineGroupKey, "old-group").Obj(),
			pools: []*imperatorv1alpha1.MachineNodePool{deleting, selectsNew},
			want:  selectsNew,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Owner(tc.node, tc.pools)
			if got != tc.want {
				t.Fatalf("Owner = %v, want %v", poolName(got), poolName(tc.want))
			}
			if tc.loser == nil {
				return
			}
			if reason := ownerReason(tc.node, got, tc.loser); reason != tc.wantReason {
				t.Errorf("ownerReason = %q, want %q", reason, tc.wantReason)
			}
		})
	}
}

func poolName(pool *imperatorv1alpha1.MachineNodePool) string {
	if pool == nil {
		return "<none>"
	}
	return pool.Name
}
