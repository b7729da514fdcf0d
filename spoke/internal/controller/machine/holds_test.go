package machine

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestPlanSlotsWithHolds(t *testing.T) {
	anyNode := func(*corev1.Pod) bool { return true }
	old1 := withUID(gatedGuest("team-b", "old1", 1), "o1")
	old2 := withUID(gatedGuest("team-b", "old2", 2), "o2")
	t1 := withUID(gatedGuest("team-a", "t1", 3), "t1")
	t2 := withUID(gatedGuest("team-a", "t2", 4), "t2")
	claims := map[types.UID]string{"t1": "train", "t2": "train"}

	cases := map[string]struct {
		line       line
		wantGrant  []string
		wantQueued []string
		wantNotes  []string
	}{
		"a hold's guest takes a held unit ahead of older guests, who get only the units no hold holds": {
			line: line{machineType: "compute-small", available: 4, held: 2, gated: []*corev1.Pod{old1, old2, t1}, placeable: anyNode,
				holds: &holdLine{claims: claims, holdFree: map[string]int32{"train": 2}, ordinaryFree: 0, held: 2}},
			wantGrant:  []string{"team-a/t1"},
			wantQueued: []string{"team-b/old1", "team-b/old2"},
			wantNotes: []string{
				"waiting for compute-small: 1st in line, 3 of 4 in use, 2 held for capacity holds",
				"waiting for compute-small: 2nd in line, 3 of 4 in use, 2 held for capacity holds",
			},
		},
		"a hold's guests beyond its held units wait in the ordinary line": {
			line: line{machineType: "compute-small", available: 4, held: 1, gated: []*corev1.Pod{old1, t1, t2}, placeable: anyNode,
				holds: &holdLine{claims: claims, holdFree: map[string]int32{"train": 1}, ordinaryFree: 1, held: 1}},
			wantGrant:  []string{"team-b/old1", "team-a/t1"},
			wantQueued: []string{"team-a/t2"},
			wantNotes:  []string{"waiting for compute-small: 1st in line, 3 of 4 in use, 1 held for capacity holds"},
		},
		"a held unit's reservation pod is still going: the hold's guest waits for it, and nobody takes it": {
			line: line{machineType: "compute-small", available: 4, held: 2, releasing: true, gated: []*corev1.Pod{t1, old1}, placeable: anyNode,
				holds: &holdLine{claims: claims, holdFree: map[string]int32{"train": 1}, ordinaryFree: 1, held: 1}},
			wantQueued: []string{"team-b/old1", "team-a/t1"},
			wantNotes: []string{
				"waiting for compute-small: 1st in line, 2 of 4 in use, 1 held for capacity holds; a reservation pod is making room",
				"waiting for a unit of compute-small held by CapacityHold train; a reservation pod is making room",
			},
		},
		"available lowered under a hold: its guests wait too, guests never hold more than available": {
			line: line{machineType: "compute-small", available: 2, held: 2, gated: []*corev1.Pod{t1, t2}, placeable: anyNode,
				holds: &holdLine{claims: claims, holdFree: map[string]int32{"train": 2}, ordinaryFree: 0, held: 2}},
			wantQueued: []string{"team-a/t1", "team-a/t2"},
			wantNotes: []string{
				"waiting for a unit of compute-small held by CapacityHold train",
				"waiting for a unit of compute-small held by CapacityHold train",
			},
		},
		"other guests cannot take held units": {
			line: line{machineType: "compute-small", available: 4, held: 2, gated: []*corev1.Pod{old1}, placeable: anyNode,
				holds: &holdLine{claims: map[types.UID]string{}, holdFree: map[string]int32{"train": 2}, ordinaryFree: 0, held: 2}},
			wantQueued: []string{"team-b/old1"},
			wantNotes:  []string{"waiting for compute-small: 1st in line, 2 of 4 in use, 2 held for capacity holds"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			plan := planSlots(tc.line)
			var queued, notes []string
			for _, q := range plan.queued {
				queued = append(queued, q.pod.Namespace+"/"+q.pod.Name)
				notes = append(notes, q.note)
			}
			if diff := cmp.Diff(tc.wantGrant, names(plan.grant)); diff != "" {
				t.Errorf("granted (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantQueued, queued); diff != "" {
				t.Errorf("queued (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantNotes, notes); diff != "" {
				t.Errorf("notes (-want +got):\n%s", diff)
			}
		})
	}
}
