package capacityhold

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// conditionAt sets a condition True that turned True at at.
func (w *holdWrapper) conditionAt(t string, at time.Time) *holdWrapper {
	w.Status.Conditions = append(w.Status.Conditions, metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: "Test",
		LastTransitionTime: metav1.NewTime(at)})
	return w
}

func TestDeleteAt(t *testing.T) {
	const retention = time.Hour
	cases := map[string]struct {
		hold      *imperatorv1alpha1.CapacityHold
		wantAt    time.Time
		wantEnded bool
	}{
		"an active hold is kept: looked at again retention after its validUntil": {
			hold:   makeHold("train", 2).accepted().obj(),
			wantAt: now.Add(10*time.Minute + retention),
		},
		"a hold not decided yet is kept": {
			hold:   makeHold("train", 2).obj(),
			wantAt: now.Add(10*time.Minute + retention),
		},
		"a failed hold goes retention after it failed": {
			hold:      makeHold("big", 5).accepted().conditionAt(imperatorv1alpha1.HoldConditionFailed, now.Add(-50*time.Second)).obj(),
			wantAt:    now.Add(-50*time.Second + retention),
			wantEnded: true,
		},
		"a failed hold whose condition has no transition time goes retention after it was made": {
			hold:      makeHold("big", 5).accepted().condition(imperatorv1alpha1.HoldConditionFailed).obj(),
			wantAt:    now.Add(-time.Minute + retention),
			wantEnded: true,
		},
		"an expired hold goes retention after validUntil, though BookingExpired was written later": {
			hold: makeHold("train", 2).accepted().validUntil(now.Add(-2*time.Hour)).
				conditionAt(imperatorv1alpha1.HoldConditionBookingExpired, now.Add(-time.Hour)).obj(),
			wantAt:    now.Add(-2*time.Hour + retention),
			wantEnded: true,
		},
		"validUntil passed, BookingExpired not written yet (agent down): ended at validUntil": {
			hold:      makeHold("train", 2).accepted().validUntil(now.Add(-30 * time.Minute)).obj(),
			wantAt:    now.Add(-30*time.Minute + retention),
			wantEnded: true,
		},
		"validUntil moved later once the booking had ended: it stays ended since BookingExpired": {
			hold: makeHold("train", 2).accepted().validUntil(now.Add(time.Hour)).
				conditionAt(imperatorv1alpha1.HoldConditionBookingExpired, now.Add(-2*time.Hour)).obj(),
			wantAt:    now.Add(-2*time.Hour + retention),
			wantEnded: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			at, ended := DeleteAt(tc.hold, now, retention)
			if !at.Equal(tc.wantAt) || ended != tc.wantEnded {
				t.Errorf("DeleteAt = %s, %v; want %s, %v", at, ended, tc.wantAt, tc.wantEnded)
			}
		})
	}
}

func TestBookingEndedChanged(t *testing.T) {
	active := makeHold("train", 2).accepted()
	cases := map[string]struct {
		old, updated *imperatorv1alpha1.CapacityHold
		want         bool
	}{
		"Failed turned True":         {old: makeHold("big", 5).obj(), updated: makeHold("big", 5).accepted().condition(imperatorv1alpha1.HoldConditionFailed).obj(), want: true},
		"BookingExpired turned True": {old: active.obj(), updated: makeHold("train", 2).accepted().condition(imperatorv1alpha1.HoldConditionBookingExpired).obj(), want: true},
		"claimed counted: nothing to plan": {old: active.obj(), updated: func() *imperatorv1alpha1.CapacityHold {
			h := active.obj()
			h.Status.Claimed = 1
			return h
		}()},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := bookingEndedChanged(tc.old, tc.updated); got != tc.want {
				t.Errorf("bookingEndedChanged = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestDeletingAnEndedHoldHandsNoUnitOut: the guests of an expired hold
// keep running after the hold is deleted; they keep their units, the
// waiting guests get no more than before, and a hold made again under the
// same name finds those units taken (its guests are not the old hold's).
func TestDeletingAnEndedHoldHandsNoUnitOut(t *testing.T) {
	expired := makeHold("train", 2).accepted().validUntil(now.Add(-time.Minute)).
		conditionAt(imperatorv1alpha1.HoldConditionBookingExpired, now.Add(-time.Minute))
	in := func(holds ...*imperatorv1alpha1.CapacityHold) TypeInput {
		return TypeInput{Machine: "general-machine", MachineType: "compute-small", Available: 4, Served: true, Now: now,
			Used:    2,
			Holding: []*corev1.Pod{claimant("t1", "train"), claimant("t2", "train")},
			Gated:   []*corev1.Pod{guest("a", ""), guest("b", ""), guest("c", "")},
			Holds:   holds,
		}
	}
	kept := summarize(PlanType(in(expired.obj())))
	if want := (holdSummary{Phase: PhaseExpired, Claimed: 2}); kept.Holds["train"] != want {
		t.Fatalf("the expired hold before its deletion = %+v, want %+v", kept.Holds["train"], want)
	}
	deleted := summarize(PlanType(in()))
	if kept.OrdinaryFree != deleted.OrdinaryFree || kept.Replicas != deleted.Replicas || kept.Held != deleted.Held {
		t.Errorf("deleting the expired hold changed the type's units: ordinaryFree %d→%d, replicas %d→%d, held %d→%d",
			kept.OrdinaryFree, deleted.OrdinaryFree, kept.Replicas, deleted.Replicas, kept.Held, deleted.Held)
	}
	if got := deleted.OrdinaryFree + 2; got > 4 {
		t.Errorf("after the deletion the waiting guests may take %d units beside the hold's 2 running guests, more than the 4 available", deleted.OrdinaryFree)
	}

	again := makeHold("train", 2).uid("uid-train-again").created(time.Second).obj()
	got := summarize(PlanType(in(again)))
	want := holdSummary{Phase: PhaseFailed, Decided: true,
		Message: "2 units of compute-small asked, 0 free: 4 available, 2 held by guests, 0 held by other holds, 3 queued guests, 0 reservation pods on nodes that are not ready or unschedulable; nothing is held"}
	if diff := cmp.Diff(want, got.Holds["train"]); diff != "" {
		t.Errorf("the hold made again under the name of the deleted one (-want +got):\n%s", diff)
	}
}
