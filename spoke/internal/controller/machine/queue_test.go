package machine

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// gatedGuest is a guest of compute-small at the slot gate, created at
// second s.
func gatedGuest(namespace, name string, s int) *corev1.Pod {
	pod := wrappers.MakePod(namespace, name).InjectedGuest(group, "compute-small").Obj()
	pod.CreationTimestamp = metav1.NewTime(time.Unix(1_800_000_000+int64(s), 0))
	pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: imperatorv1alpha1.SlotSchedulingGate}}
	return pod
}

func names(pods []*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

func TestPlanSlots(t *testing.T) {
	anyNode := func(*corev1.Pod) bool { return true }
	a := withUID(gatedGuest("team-a", "a", 1), "4")
	b := withUID(gatedGuest("team-b", "b", 2), "3")
	c := withUID(gatedGuest("team-a", "c", 3), "2")
	// Same second as b, no admitted-at annotation: the UID decides.
	b2 := withUID(gatedGuest("team-a", "z", 2), "1")

	cases := map[string]struct {
		line       line
		wantGrant  []string
		wantQueued []string
		wantNotes  []string
	}{
		"one unit free: the oldest guest gets it, the others are told their place": {
			line:       line{machineType: "compute-small", available: 1, gated: []*corev1.Pod{c, a, b}, placeable: anyNode},
			wantGrant:  []string{"team-a/a"},
			wantQueued: []string{"team-b/b", "team-a/c"},
			wantNotes: []string{
				"waiting for compute-small: 1st in line, 1 of 1 in use",
				"waiting for compute-small: 2nd in line, 1 of 1 in use",
			},
		},
		"every unit held: nobody is let through": {
			line:       line{machineType: "compute-small", available: 2, held: 2, gated: []*corev1.Pod{b, a}, placeable: anyNode},
			wantQueued: []string{"team-a/a", "team-b/b"},
			wantNotes: []string{
				"waiting for compute-small: 1st in line, 2 of 2 in use",
				"waiting for compute-small: 2nd in line, 2 of 2 in use",
			},
		},
		"more held than available (available lowered, guests from before the upgrade): nobody is let through": {
			line:       line{machineType: "compute-small", available: 1, held: 3, gated: []*corev1.Pod{a}, placeable: anyNode},
			wantQueued: []string{"team-a/a"},
			wantNotes:  []string{"waiting for compute-small: 1st in line, 3 of 1 in use"},
		},
		"a reservation pod is still being removed: the gate waits for it": {
			line:       line{machineType: "compute-small", available: 2, held: 1, releasing: true, gated: []*corev1.Pod{a}, placeable: anyNode},
			wantQueued: []string{"team-a/a"},
			wantNotes:  []string{"waiting for compute-small: 1st in line, 1 of 2 in use; a reservation pod is making room"},
		},
		"two units free: the two oldest get them, ties broken by UID": {
			line:       line{machineType: "compute-small", available: 3, held: 1, gated: []*corev1.Pod{c, b, b2, a}, placeable: anyNode},
			wantGrant:  []string{"team-a/a", "team-a/z"},
			wantQueued: []string{"team-b/b", "team-a/c"},
			wantNotes: []string{
				"waiting for compute-small: 1st in line, 3 of 3 in use",
				"waiting for compute-small: 2nd in line, 3 of 3 in use",
			},
		},
		"no ready node (node not-ready, cordoned): every guest waits": {
			line:       line{machineType: "compute-small", available: 1, gated: []*corev1.Pod{b, a}},
			wantQueued: []string{"team-a/a", "team-b/b"},
			wantNotes: []string{
				"waiting for compute-small: 1st in line, 0 of 1 in use; no imperator.tenzen-y.io/node-pool=ready node of the type can take it now",
				"waiting for compute-small: 2nd in line, 0 of 1 in use; no imperator.tenzen-y.io/node-pool=ready node of the type can take it now",
			},
		},
		"a guest no node can take is passed over and keeps its place": {
			line: line{machineType: "compute-small", available: 1, gated: []*corev1.Pod{a, b},
				placeable: func(p *corev1.Pod) bool { return p.Name != "a" }},
			wantGrant:  []string{"team-b/b"},
			wantQueued: []string{"team-a/a"},
			wantNotes: []string{"waiting for compute-small: 1st in line, 1 of 1 in use; no imperator.tenzen-y.io/node-pool=ready node of the type can take it now " +
				"(its nodeSelector, required node affinity or tolerations): it keeps its place in line and holds no unit until one can"},
		},
		"nobody waiting": {
			line: line{machineType: "compute-small", available: 1, placeable: anyNode},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := names(tc.line.gated)
			plan := planSlots(tc.line)
			var queued []*corev1.Pod
			var notes []string
			for _, q := range plan.queued {
				queued = append(queued, q.pod)
				notes = append(notes, q.note)
			}
			if diff := cmp.Diff(tc.wantGrant, names(plan.grant)); diff != "" {
				t.Errorf("granted (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantQueued, names(queued)); diff != "" {
				t.Errorf("queued (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantNotes, notes); diff != "" {
				t.Errorf("notes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, names(tc.line.gated)); diff != "" {
				t.Errorf("planSlots reordered its input (-before +after):\n%s", diff)
			}
		})
	}
}

func TestOrdinal(t *testing.T) {
	for n, want := range map[int]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 22: "22nd", 101: "101st", 111: "111th"} {
		if got := ordinal(n); got != want {
			t.Errorf("ordinal(%d) = %q, want %q", n, got, want)
		}
	}
}

// admitted sets a guest's admitted-at annotation.
func admitted(pod *corev1.Pod, at string) *corev1.Pod {
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[imperatorv1alpha1.AdmittedAtAnnotation] = at
	return pod
}

func withUID(pod *corev1.Pod, uid string) *corev1.Pod {
	pod.UID = types.UID(uid)
	return pod
}

func TestArrivalOrder(t *testing.T) {
	// Every guest is created in the same second (1_800_000_002), so
	// creation timestamps cannot tell them apart.
	cases := map[string]struct {
		gated []*corev1.Pod
		want  []string
	}{
		"guests created in the same second go by admission time, not by namespace": {
			gated: []*corev1.Pod{
				admitted(withUID(gatedGuest("team-a", "a", 2), "1"), "2027-01-15T08:00:02.700000000Z"),
				admitted(withUID(gatedGuest("team-z", "z", 2), "2"), "2027-01-15T08:00:02.100000000Z"),
				admitted(withUID(gatedGuest("team-m", "m", 2), "3"), "2027-01-15T08:00:02.400000000Z"),
			},
			want: []string{"team-z/z", "team-m/m", "team-a/a"},
		},
		"same admission time: the UID decides, not the name": {
			gated: []*corev1.Pod{
				admitted(withUID(gatedGuest("team-a", "a", 2), "b-uid"), "2027-01-15T08:00:02.5Z"),
				admitted(withUID(gatedGuest("team-a", "b", 2), "a-uid"), "2027-01-15T08:00:02.5Z"),
			},
			want: []string{"team-a/b", "team-a/a"},
		},
		"no annotation, or one that is not RFC 3339: the creation time counts, then the UID": {
			gated: []*corev1.Pod{
				withUID(gatedGuest("team-a", "a", 2), "9"),
				admitted(withUID(gatedGuest("team-b", "b", 2), "1"), "yesterday"),
				withUID(gatedGuest("team-c", "c", 1), "5"),
			},
			want: []string{"team-c/c", "team-b/b", "team-a/a"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			plan := planSlots(line{machineType: "compute-small", available: 1, gated: tc.gated, placeable: func(*corev1.Pod) bool { return true }})
			got := names(plan.grant)
			for _, q := range plan.queued {
				got = append(got, q.pod.Namespace+"/"+q.pod.Name)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("line order (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCanTake(t *testing.T) {
	// kasumi as the node pool leaves a tainted compute-small node.
	node := wrappers.MakeNode("kasumi").Obj()
	node.Labels[imperatorv1alpha1.MachineTypeKey] = "compute-small"
	node.Labels["topology.kubernetes.io/zone"] = "zone-a"
	node.Spec.Taints = []corev1.Taint{
		{Key: imperatorv1alpha1.MachineTypeKeyFor("compute-small"), Value: group, Effect: corev1.TaintEffectNoSchedule},
		{Key: "example.com/soft", Value: "x", Effect: corev1.TaintEffectPreferNoSchedule},
	}
	injected := func() *wrappers.PodWrapper {
		return wrappers.MakePod("team-a", "g").InjectedGuest(group, "compute-small").
			Toleration(imperatorv1alpha1.MachineTypeKeyFor("compute-small"), group)
	}
	zone := func(value string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{value}}}}
	}
	cases := map[string]struct {
		pod  *corev1.Pod
		node *corev1.Node
		want bool
	}{
		"a guest as the injector leaves it": {pod: injected().Obj(), want: true},
		"its nodeSelector names another zone": {
			pod: func() *corev1.Pod {
				p := injected().Obj()
				p.Spec.NodeSelector = map[string]string{"topology.kubernetes.io/zone": "zone-b"}
				return p
			}(),
		},
		"its nodeSelector matches": {
			pod: func() *corev1.Pod {
				p := injected().Obj()
				p.Spec.NodeSelector = map[string]string{"topology.kubernetes.io/zone": "zone-a"}
				return p
			}(),
			want: true,
		},
		"its required node affinity asks for another zone": {pod: injected().RequiredNodeAffinity(zone("zone-b")).Obj()},
		"its required node affinity matches":               {pod: injected().RequiredNodeAffinity(zone("zone-a")).Obj(), want: true},
		"it does not tolerate the type's NoSchedule taint": {pod: wrappers.MakePod("team-a", "g").InjectedGuest(group, "compute-small").Obj()},
		"the node has a NoExecute taint it does not tolerate": {
			pod: injected().Obj(),
			node: func() *corev1.Node {
				n := node.DeepCopy()
				n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/drain", Effect: corev1.TaintEffectNoExecute})
				return n
			}(),
		},
		"a PreferNoSchedule taint does not keep it off": {pod: injected().Obj(), want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n := node
			if tc.node != nil {
				n = tc.node
			}
			if got := canTake(n, tc.pod); got != tc.want {
				t.Errorf("canTake(%s, %s) = %v, want %v", n.Name, tc.pod.Name, got, tc.want)
			}
		})
	}
	t.Run("no ready node: nobody is placeable", func(t *testing.T) {
		if placeableOn(nil, injected().Obj()) {
			t.Error("placeableOn(no nodes) is true")
		}
	})
	t.Run("a guest only another node can take is placeable", func(t *testing.T) {
		other := wrappers.MakeNode("michiru").Obj()
		other.Labels["topology.kubernetes.io/zone"] = "zone-b"
		if !placeableOn([]*corev1.Node{node, other}, injected().RequiredNodeAffinity(zone("zone-b")).Obj()) {
			t.Error("a guest for zone-b is not placeable with michiru in zone-b")
		}
	})
}

func TestPlanSlotsStuckReservation(t *testing.T) {
	a := gatedGuest("team-a", "a", 1)
	plan := planSlots(line{machineType: "compute-small", available: 2, held: 0, releasing: false,
		stuck: []string{"imperator-system/compute-small-general-machine-1"},
		gated: []*corev1.Pod{a, gatedGuest("team-a", "b", 2), gatedGuest("team-a", "c", 3)}, placeable: func(*corev1.Pod) bool { return true }})
	if diff := cmp.Diff([]string{"team-a/a", "team-a/b"}, names(plan.grant)); diff != "" {
		t.Errorf("granted (-want +got):\n%s", diff)
	}
	want := "waiting for compute-small: 1st in line, 2 of 2 in use; not waiting for reservation pod imperator-system/compute-small-general-machine-1, stuck terminating"
	if len(plan.queued) != 1 || plan.queued[0].note != want {
		t.Errorf("queued %v, want c told %q", plan.queued, want)
	}
}

func TestPlanSlotsLongLine(t *testing.T) {
	var gated []*corev1.Pod
	for i := range exactPlaces + 2 {
		gated = append(gated, withUID(gatedGuest("team-a", "g"+strconv.Itoa(i), i), strconv.Itoa(i)))
	}
	plan := planSlots(line{machineType: "compute-small", available: 1, held: 1, gated: gated, placeable: func(*corev1.Pod) bool { return true }})
	var notes []string
	for _, q := range plan.queued[exactPlaces-1:] {
		notes = append(notes, q.note)
	}
	want := []string{
		"waiting for compute-small: 100th in line, 1 of 1 in use",
		"waiting for compute-small: 100+ in line",
		"waiting for compute-small: 100+ in line",
	}
	if diff := cmp.Diff(want, notes); diff != "" {
		t.Errorf("notes from the 100th guest on (-want +got):\n%s", diff)
	}
}
