package machine

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// gatedGuest is a guest of compute-small at the slot gate, created at
// second s.
func gatedGuest(namespace, name string, s int) *corev1.Pod {
	pod := wrappers.MakePod(namespace, name).Guest(group, "compute-small").Obj()
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
	a := gatedGuest("team-a", "a", 1)
	b := gatedGuest("team-b", "b", 2)
	c := gatedGuest("team-a", "c", 3)
	// Same second as b: namespace, then name decide.
	b2 := gatedGuest("team-a", "z", 2)

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
		"two units free: the two oldest get them, ties broken by namespace then name": {
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
			wantNotes:  []string{"waiting for compute-small: 1st in line, 1 of 1 in use; no imperator.tenzen-y.io/node-pool=ready node of the type can take it now"},
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
