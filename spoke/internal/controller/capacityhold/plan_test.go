package capacityhold

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

var now = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

// holdWrapper builds CapacityHolds for the tables.
type holdWrapper struct{ imperatorv1alpha1.CapacityHold }

func makeHold(name string, count int32) *holdWrapper {
	w := &holdWrapper{}
	w.Name, w.UID = name, types.UID("uid-"+name)
	w.CreationTimestamp = metav1.NewTime(now.Add(-time.Minute))
	w.Spec = imperatorv1alpha1.CapacityHoldSpec{MachineGroup: "general-machine", MachineType: "compute-small", Count: count,
		ValidUntil: metav1.NewTime(now.Add(10 * time.Minute))}
	return w
}

func (w *holdWrapper) created(ago time.Duration) *holdWrapper {
	w.CreationTimestamp = metav1.NewTime(now.Add(-ago))
	return w
}

func (w *holdWrapper) validUntil(t time.Time) *holdWrapper {
	w.Spec.ValidUntil = metav1.NewTime(t)
	return w
}

func (w *holdWrapper) namespaces(ns ...string) *holdWrapper {
	w.Spec.Namespaces = ns
	return w
}

// condition sets a condition True.
func (w *holdWrapper) condition(t string) *holdWrapper {
	w.Status.Conditions = append(w.Status.Conditions, metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: "Test"})
	return w
}

func (w *holdWrapper) accepted() *holdWrapper {
	return w.condition(imperatorv1alpha1.HoldConditionAccepted)
}

func (w *holdWrapper) obj() *imperatorv1alpha1.CapacityHold { return w.DeepCopy() }

func (w *holdWrapper) uid(uid types.UID) *holdWrapper {
	w.UID = uid
	return w
}

// guest is a pod of namespace team-a that quotes the hold named hold (none
// when ""), as a tenant can label any pod, without the UID the injector
// stamps: it claims nothing.
func guest(name, hold string) *corev1.Pod {
	pod := &corev1.Pod{}
	pod.Namespace, pod.Name, pod.UID = "team-a", name, types.UID("uid-"+name)
	if hold != "" {
		pod.Labels = map[string]string{imperatorv1alpha1.HoldKey: hold}
	}
	return pod
}

// claimant is a guest of namespace team-a admitted while the hold named hold
// existed with the UID makeHold gives it: the injector stamped that UID.
func claimant(name, hold string) *corev1.Pod {
	return stamped(guest(name, hold), types.UID("uid-"+hold))
}

// stamped sets the hold UID the injector stamps on a guest, created now
// (after the tables' holds, unless it says when).
func stamped(pod *corev1.Pod, uid types.UID) *corev1.Pod {
	pod.Annotations = map[string]string{imperatorv1alpha1.HoldUIDAnnotation: string(uid)}
	if pod.CreationTimestamp.IsZero() {
		pod.CreationTimestamp = metav1.NewTime(now)
	}
	return pod
}

// holdSummary is what the tables compare of a HoldPlan.
type holdSummary struct {
	Phase                  Phase
	Decided                bool
	Held, Claimed, Revoked int32
	Message                string
}

type planSummary struct {
	Holds        map[string]holdSummary
	Active       bool
	OrdinaryFree int32
	HoldFree     map[string]int32
	Claims       map[types.UID]string
	Held         int32
	Replicas     int32
}

func summarize(p TypePlan) planSummary {
	s := planSummary{Holds: map[string]holdSummary{}, Active: p.Active, OrdinaryFree: p.OrdinaryFree, HoldFree: p.HoldFree,
		Claims: p.Claims, Held: p.Held, Replicas: p.Replicas}
	for _, h := range p.Holds {
		msg := ""
		if h.Phase == PhaseFailed || h.Revoked > 0 {
			msg = h.Message
		}
		s.Holds[h.Hold.Name] = holdSummary{Phase: h.Phase, Decided: h.Decided, Held: h.Held, Claimed: h.Claimed, Revoked: h.Revoked, Message: msg}
	}
	return s
}

func TestPlanType(t *testing.T) {
	base := func() TypeInput {
		return TypeInput{Machine: "general-machine", MachineType: "compute-small", Available: 4, ReservationPods: 4, Served: true, Now: now}
	}
	cases := map[string]struct {
		in   func(in *TypeInput)
		want planSummary
	}{
		"no hold: the queue of issue 18, reservations keep what no guest in line can have": {
			in: func(in *TypeInput) {
				in.Used = 1
				in.Gated = []*corev1.Pod{guest("a", ""), guest("b", "")}
			},
			want: planSummary{Holds: map[string]holdSummary{}, OrdinaryFree: 3, HoldFree: map[string]int32{}, Claims: map[types.UID]string{}, Replicas: 1},
		},
		"no hold, a leaving guest: its unit stays out of the reservations while a guest waits for it": {
			in: func(in *TypeInput) {
				in.Available, in.Leaving = 1, 1
				in.Gated = []*corev1.Pod{guest("a", "")}
			},
			want: planSummary{Holds: map[string]holdSummary{}, OrdinaryFree: 0, HoldFree: map[string]int32{}, Claims: map[types.UID]string{}, Replicas: 0},
		},
		"hold 2 of 4 is made: 2 held, ordinary guests get at most 2, the reservations keep all 4": {
			in: func(in *TypeInput) { in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("train", 2).obj()} },
			want: planSummary{
				Holds:  map[string]holdSummary{"train": {Phase: PhaseActive, Decided: true, Held: 2}},
				Active: true, OrdinaryFree: 2, HoldFree: map[string]int32{"train": 2}, Claims: map[types.UID]string{}, Held: 2, Replicas: 4,
			},
		},
		"another team's guests wait while held units stay idle: two of three ordinary guests get a unit, the reservations keep the held two": {
			in: func(in *TypeInput) {
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("train", 2).accepted().obj()}
				in.Gated = []*corev1.Pod{guest("a", ""), guest("b", ""), guest("c", "")}
			},
			want: planSummary{
				Holds:  map[string]holdSummary{"train": {Phase: PhaseActive, Held: 2}},
				Active: true, OrdinaryFree: 2, HoldFree: map[string]int32{"train": 2}, Claims: map[types.UID]string{}, Held: 2, Replicas: 2,
			},
		},
		"every ordinary unit in use: ordinary guests get nothing, the held units stay reserved": {
			in: func(in *TypeInput) {
				in.Used = 2
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("train", 2).accepted().obj()}
				in.Gated = []*corev1.Pod{guest("a", "")}
			},
			want: planSummary{
				Holds:  map[string]holdSummary{"train": {Phase: PhaseActive, Held: 2}},
				Active: true, OrdinaryFree: 0, HoldFree: map[string]int32{"train": 2}, Claims: map[types.UID]string{}, Held: 2, Replicas: 2,
			},
		},
		"a hold's guest may take a held unit ahead of the line; usage.held leaves out the unit it is about to take": {
			in: func(in *TypeInput) {
				in.Used = 2
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("train", 2).accepted().obj()}
				in.Gated = []*corev1.Pod{guest("old", ""), claimant("t1", "train")}
			},
			want: planSummary{
				Holds:  map[string]holdSummary{"train": {Phase: PhaseActive, Held: 2}},
				Active: true, OrdinaryFree: 0, HoldFree: map[string]int32{"train": 2}, Claims: map[types.UID]string{"uid-t1": "train"}, Held: 1, Replicas: 1,
			},
		},
		"a claimed unit: held 1, claimed 1; a guest of the hold beyond its count is an ordinary guest": {
			in: func(in *TypeInput) {
				in.Used = 1
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("train", 2).accepted().obj()}
				in.Holding = []*corev1.Pod{claimant("t1", "train")}
				in.Gated = []*corev1.Pod{claimant("t2", "train"), claimant("t3", "train")}
			},
			want: planSummary{
				Holds:  map[string]holdSummary{"train": {Phase: PhaseActive, Held: 1, Claimed: 1}},
				Active: true, OrdinaryFree: 2, HoldFree: map[string]int32{"train": 1},
				Claims: map[types.UID]string{"uid-t2": "train", "uid-t3": "train"}, Held: 0, Replicas: 1,
			},
		},
		"a guest in a namespace the hold does not allow, or quoting another hold, is an ordinary guest": {
			in: func(in *TypeInput) {
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("train", 1).namespaces("team-b").accepted().obj()}
				in.Gated = []*corev1.Pod{claimant("t1", "train"), guest("t2", "gone")}
			},
			want: planSummary{
				Holds:  map[string]holdSummary{"train": {Phase: PhaseActive, Held: 1}},
				Active: true, OrdinaryFree: 3, HoldFree: map[string]int32{"train": 1}, Claims: map[types.UID]string{}, Held: 1, Replicas: 2,
			},
		},
		"hold of 5 of 4 fails with the numbers and holds nothing": {
			in: func(in *TypeInput) { in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("big", 5).obj()} },
			want: planSummary{
				Holds: map[string]holdSummary{"big": {Phase: PhaseFailed, Decided: true,
					Message: "5 units of compute-small asked, 4 free: 4 available, 0 held by guests, 0 held by other holds, 0 queued guests, 0 reservation pods on nodes that are not ready or unschedulable; nothing is held"}},
				OrdinaryFree: 4, HoldFree: map[string]int32{}, Claims: map[types.UID]string{}, Replicas: 4,
			},
		},
		"queued guests arrived first: a hold may not take the units they wait for": {
			in: func(in *TypeInput) {
				in.Used = 2
				in.Gated = []*corev1.Pod{guest("a", ""), guest("b", "")}
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("late", 1).obj()}
			},
			want: planSummary{
				Holds: map[string]holdSummary{"late": {Phase: PhaseFailed, Decided: true,
					Message: "1 units of compute-small asked, 0 free: 4 available, 2 held by guests, 0 held by other holds, 2 queued guests, 0 reservation pods on nodes that are not ready or unschedulable; nothing is held"}},
				OrdinaryFree: 2, HoldFree: map[string]int32{}, Claims: map[types.UID]string{}, Replicas: 0,
			},
		},
		"guests admitted with the hold's UID and already holding units count towards it": {
			in: func(in *TypeInput) {
				in.Used = 3
				in.Holding = []*corev1.Pod{claimant("t1", "train"), claimant("t2", "train")}
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("train", 3).obj()}
			},
			want: planSummary{
				Holds:  map[string]holdSummary{"train": {Phase: PhaseActive, Decided: true, Held: 1, Claimed: 2}},
				Active: true, OrdinaryFree: 0, HoldFree: map[string]int32{"train": 1}, Claims: map[types.UID]string{}, Held: 1, Replicas: 1,
			},
		},
		"guests labelled with a hold's name that ran before the hold existed are ordinary: the new hold holds every unit and claims none": {
			in: func(in *TypeInput) {
				in.Used = 2
				in.Holding = []*corev1.Pod{guest("s1", "squat"), guest("s2", "squat")}
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("squat", 2).obj()}
			},
			want: planSummary{
				Holds:  map[string]holdSummary{"squat": {Phase: PhaseActive, Decided: true, Held: 2}},
				Active: true, OrdinaryFree: 0, HoldFree: map[string]int32{"squat": 2}, Claims: map[types.UID]string{}, Held: 2, Replicas: 2,
			},
		},
		"a waiting guest labelled with the hold's name, without its UID, does not jump the line": {
			in: func(in *TypeInput) {
				in.Used = 2
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("train", 1).accepted().obj()}
				in.Gated = []*corev1.Pod{guest("old", ""), guest("s1", "train")}
			},
			want: planSummary{
				Holds:  map[string]holdSummary{"train": {Phase: PhaseActive, Held: 1}},
				Active: true, OrdinaryFree: 1, HoldFree: map[string]int32{"train": 1}, Claims: map[types.UID]string{}, Held: 1, Replicas: 1,
			},
		},
		"guests stamped with the UID of a deleted hold do not claim the hold created again under its name": {
			in: func(in *TypeInput) {
				in.Used = 1
				in.Holding = []*corev1.Pod{stamped(guest("t1", "train"), "uid-train-before")}
				in.Gated = []*corev1.Pod{stamped(guest("t2", "train"), "uid-train-before")}
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("train", 2).uid("uid-train-again").obj()}
			},
			want: planSummary{
				Holds:  map[string]holdSummary{"train": {Phase: PhaseActive, Decided: true, Held: 2}},
				Active: true, OrdinaryFree: 1, HoldFree: map[string]int32{"train": 2}, Claims: map[types.UID]string{}, Held: 2, Replicas: 2,
			},
		},
		"a guest stamped with the UID of a hold of another type claims nothing here": {
			in: func(in *TypeInput) {
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("train", 1).accepted().obj()}
				in.Gated = []*corev1.Pod{stamped(guest("t1", "train"), "uid-other-type")}
			},
			want: planSummary{
				Holds:  map[string]holdSummary{"train": {Phase: PhaseActive, Held: 1}},
				Active: true, OrdinaryFree: 3, HoldFree: map[string]int32{"train": 1}, Claims: map[types.UID]string{}, Held: 1, Replicas: 3,
			},
		},
		"two holds created in the same second: the lower UID goes first, the other fails on what is left": {
			in: func(in *TypeInput) {
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("b", 2).obj(), makeHold("a", 3).obj()}
			},
			want: planSummary{
				Holds: map[string]holdSummary{
					"a": {Phase: PhaseActive, Decided: true, Held: 3},
					"b": {Phase: PhaseFailed, Decided: true,
						Message: "2 units of compute-small asked, 1 free: 4 available, 0 held by guests, 3 held by other holds, 0 queued guests, 0 reservation pods on nodes that are not ready or unschedulable; nothing is held"},
				},
				Active: true, OrdinaryFree: 1, HoldFree: map[string]int32{"a": 3}, Claims: map[types.UID]string{}, Held: 3, Replicas: 4,
			},
		},
		"an earlier hold is decided before a later one even when the later is listed first": {
			in: func(in *TypeInput) {
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("later", 3).created(time.Second).obj(), makeHold("earlier", 3).created(time.Minute).obj()}
			},
			want: planSummary{
				Holds: map[string]holdSummary{
					"earlier": {Phase: PhaseActive, Decided: true, Held: 3},
					"later": {Phase: PhaseFailed, Decided: true,
						Message: "3 units of compute-small asked, 1 free: 4 available, 0 held by guests, 3 held by other holds, 0 queued guests, 0 reservation pods on nodes that are not ready or unschedulable; nothing is held"},
				},
				Active: true, OrdinaryFree: 1, HoldFree: map[string]int32{"earlier": 3}, Claims: map[types.UID]string{}, Held: 3, Replicas: 4,
			},
		},
		"validUntil passed: the unclaimed unit goes back, the claimed one stays with its guest": {
			in: func(in *TypeInput) {
				in.Used = 1
				in.Holding = []*corev1.Pod{claimant("t1", "train")}
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("train", 2).accepted().validUntil(now).obj()}
				in.Gated = []*corev1.Pod{claimant("t2", "train")}
			},
			want: planSummary{
				Holds:        map[string]holdSummary{"train": {Phase: PhaseExpired, Claimed: 1}},
				OrdinaryFree: 3, HoldFree: map[string]int32{}, Claims: map[types.UID]string{}, Replicas: 2,
			},
		},
		"a hold whose validUntil passed before it was decided holds nothing": {
			in: func(in *TypeInput) {
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("late", 1).validUntil(now.Add(-time.Second)).obj()}
			},
			want: planSummary{
				Holds:        map[string]holdSummary{"late": {Phase: PhaseExpired}},
				OrdinaryFree: 4, HoldFree: map[string]int32{}, Claims: map[types.UID]string{}, Replicas: 4,
			},
		},
		"a failed hold stays failed even when units are free now": {
			in: func(in *TypeInput) {
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("big", 1).accepted().condition(imperatorv1alpha1.HoldConditionFailed).obj()}
			},
			want: planSummary{
				Holds:        map[string]holdSummary{"big": {Phase: PhaseFailed, Message: ""}},
				OrdinaryFree: 4, HoldFree: map[string]int32{}, Claims: map[types.UID]string{}, Replicas: 4,
			},
		},
		"a node leaves the ready pool: the newest hold loses units first, ordinary guests get none": {
			in: func(in *TypeInput) {
				in.Lost, in.LostReservations, in.LostNodes = 3, 3, []string{"kasumi (not-ready)"}
				in.Holds = []*imperatorv1alpha1.CapacityHold{
					makeHold("old", 1).created(time.Hour).accepted().obj(),
					makeHold("new", 2).created(time.Minute).accepted().obj(),
				}
			},
			want: planSummary{
				Holds: map[string]holdSummary{
					"old": {Phase: PhaseActive, Held: 1},
					"new": {Phase: PhaseActive, Held: 0, Revoked: 2,
						Message: "2 of 2 units of compute-small lost: 3 reservation pods are on nodes that are not ready or cannot be scheduled (kasumi (not-ready)), 1 can hold a unit; they come back when the nodes are ready again"},
				},
				Active: true, OrdinaryFree: 0, HoldFree: map[string]int32{"old": 1, "new": 0}, Claims: map[types.UID]string{}, Held: 1, Replicas: 4,
			},
		},
		"lost reservation pods come out of the ordinary units first: the hold keeps its units": {
			in: func(in *TypeInput) {
				in.Lost, in.LostReservations = 2, 2
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("train", 2).accepted().obj()}
				in.Gated = []*corev1.Pod{guest("a", "")}
			},
			want: planSummary{
				Holds:  map[string]holdSummary{"train": {Phase: PhaseActive, Held: 2}},
				Active: true, OrdinaryFree: 0, HoldFree: map[string]int32{"train": 2}, Claims: map[types.UID]string{}, Held: 2, Replicas: 4,
			},
		},
		"guests beyond a lowered available revoke nothing: only nodes leaving the pool do": {
			in: func(in *TypeInput) {
				in.Available, in.Used = 2, 3
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("train", 1).accepted().obj()}
			},
			want: planSummary{
				Holds:  map[string]holdSummary{"train": {Phase: PhaseActive, Held: 1}},
				Active: true, OrdinaryFree: 0, HoldFree: map[string]int32{"train": 1}, Claims: map[types.UID]string{}, Held: 1, Replicas: 0,
			},
		},
		"every node in maintenance: revoked whatever available says": {
			// Seed 303 of the soak: the guests in line lowered the replicas,
			// so available − lost − guests still left units, none of which
			// a reservation pod holds.
			in: func(in *TypeInput) {
				in.Available, in.ReservationPods = 6, 5
				in.Lost, in.LostReservations = 4, 5
				in.LostNodes = []string{"h100-a (maintenance)", "h100-b (maintenance)"}
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("fleet-hold-24", 1).accepted().obj()}
				in.Gated = []*corev1.Pod{guest("a", ""), guest("b", "")}
			},
			want: planSummary{
				Holds: map[string]holdSummary{"fleet-hold-24": {Phase: PhaseActive, Held: 0, Revoked: 1,
					Message: "1 of 1 units of compute-small lost: 5 reservation pods are on nodes that are not ready or cannot be scheduled (h100-a (maintenance), h100-b (maintenance)), 0 can hold a unit; they come back when the nodes are ready again"}},
				Active: true, OrdinaryFree: 1, HoldFree: map[string]int32{"fleet-hold-24": 0}, Claims: map[types.UID]string{}, Replicas: 5,
			},
		},
		"every node in maintenance, available raised: still revoked": {
			in: func(in *TypeInput) {
				in.Available, in.ReservationPods = 16, 5
				in.Lost, in.LostReservations = 4, 5
				in.LostNodes = []string{"h100-a (maintenance)", "h100-b (maintenance)"}
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("fleet-hold-24", 1).accepted().obj()}
				in.Gated = []*corev1.Pod{guest("a", ""), guest("b", "")}
			},
			want: planSummary{
				Holds: map[string]holdSummary{"fleet-hold-24": {Phase: PhaseActive, Held: 0, Revoked: 1,
					Message: "1 of 1 units of compute-small lost: 5 reservation pods are on nodes that are not ready or cannot be scheduled (h100-a (maintenance), h100-b (maintenance)), 0 can hold a unit; they come back when the nodes are ready again"}},
				Active: true, OrdinaryFree: 11, HoldFree: map[string]int32{"fleet-hold-24": 0}, Claims: map[types.UID]string{}, Replicas: 14,
			},
		},
		"one of two holds keeps the one usable reservation pod, the newer loses its unit": {
			in: func(in *TypeInput) {
				in.Available, in.ReservationPods = 6, 3
				in.Lost, in.LostReservations, in.LostNodes = 1, 2, []string{"h100-b (not-ready)"}
				in.Holds = []*imperatorv1alpha1.CapacityHold{
					makeHold("old", 1).created(time.Hour).accepted().obj(),
					makeHold("new", 1).created(time.Minute).accepted().obj(),
				}
				in.Gated = []*corev1.Pod{guest("a", ""), guest("b", ""), guest("c", "")}
			},
			want: planSummary{
				Holds: map[string]holdSummary{
					"old": {Phase: PhaseActive, Held: 1},
					"new": {Phase: PhaseActive, Held: 0, Revoked: 1,
						Message: "1 of 1 units of compute-small lost: 2 reservation pods are on nodes that are not ready or cannot be scheduled (h100-b (not-ready)), 1 can hold a unit; they come back when the nodes are ready again"},
				},
				Active: true, OrdinaryFree: 3, HoldFree: map[string]int32{"old": 1, "new": 0}, Claims: map[types.UID]string{}, Held: 1, Replicas: 3,
			},
		},
		"reservation pods not created yet are not lost: no hold is revoked for them": {
			in: func(in *TypeInput) {
				in.ReservationPods = 1
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("train", 2).accepted().obj()}
			},
			want: planSummary{
				Holds:  map[string]holdSummary{"train": {Phase: PhaseActive, Held: 2}},
				Active: true, OrdinaryFree: 2, HoldFree: map[string]int32{"train": 2}, Claims: map[types.UID]string{}, Held: 2, Replicas: 4,
			},
		},
		"a new Machine without reservation pods yet makes a hold": {
			in: func(in *TypeInput) {
				in.ReservationPods = 0
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("train", 2).obj()}
			},
			want: planSummary{
				Holds:  map[string]holdSummary{"train": {Phase: PhaseActive, Decided: true, Held: 2}},
				Active: true, OrdinaryFree: 2, HoldFree: map[string]int32{"train": 2}, Claims: map[types.UID]string{}, Held: 2, Replicas: 4,
			},
		},
		"every node in maintenance, available raised: a new hold fails whatever available says": {
			in: func(in *TypeInput) {
				in.Available, in.ReservationPods = 16, 6
				in.Lost, in.LostReservations = 6, 6
				in.LostNodes = []string{"h100-a (maintenance)", "h100-b (maintenance)"}
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("train", 1).obj()}
			},
			want: planSummary{
				Holds: map[string]holdSummary{"train": {Phase: PhaseFailed, Decided: true,
					Message: "1 units of compute-small asked, 0 free: 16 available, 0 held by guests, 0 held by other holds, 0 queued guests, 6 reservation pods on nodes that are not ready or unschedulable (h100-a (maintenance), h100-b (maintenance)), 0 that can hold a unit; nothing is held"}},
				OrdinaryFree: 16, HoldFree: map[string]int32{}, Claims: map[types.UID]string{}, Replicas: 16,
			},
		},
		"a type no node serves: the hold fails": {
			in: func(in *TypeInput) {
				in.Served = false
				in.Holds = []*imperatorv1alpha1.CapacityHold{makeHold("train", 1).obj()}
			},
			want: planSummary{
				Holds: map[string]holdSummary{"train": {Phase: PhaseFailed, Decided: true,
					Message: "1 units of compute-small asked, 0 free: no node of Machine general-machine's spec.nodePool serves compute-small; nothing is held"}},
				OrdinaryFree: 4, HoldFree: map[string]int32{}, Claims: map[types.UID]string{}, Replicas: 4,
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := base()
			tc.in(&in)
			if diff := cmp.Diff(tc.want, summarize(PlanType(in))); diff != "" {
				t.Errorf("PlanType (-want +got):\n%s", diff)
			}
		})
	}
}

func TestClaims(t *testing.T) {
	train := makeHold("train", 2).obj()
	cases := map[string]struct {
		hold *imperatorv1alpha1.CapacityHold
		pod  *corev1.Pod
		want bool
	}{
		"a guest the injector stamped with the hold's UID claims it":             {hold: train, pod: claimant("t1", "train"), want: true},
		"a guest labelled with the hold's name, without its UID, claims nothing": {hold: train, pod: guest("t1", "train")},
		"a ProvisioningRequest consumer without the UID claims nothing": {hold: train, pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Namespace: "team-a", Annotations: map[string]string{
				imperatorv1alpha1.ConsumeProvisioningRequestAnnotation: "train",
				imperatorv1alpha1.ProvisioningClassNameAnnotation:      imperatorv1alpha1.CapacityHoldProvisioningClass,
			}}}},
		"a ProvisioningRequest consumer stamped with the hold's UID claims it": {hold: train, pod: stamped(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Namespace: "team-a", Annotations: map[string]string{
				imperatorv1alpha1.ConsumeProvisioningRequestAnnotation: "train",
				imperatorv1alpha1.ProvisioningClassNameAnnotation:      imperatorv1alpha1.CapacityHoldProvisioningClass,
			}}}, "uid-train"), want: true},
		"the UID of a deleted hold of the same name does not claim the hold made again": {
			hold: makeHold("train", 2).uid("uid-train-again").obj(), pod: claimant("t1", "train")},
		"the UID, in a namespace the hold does not allow":      {hold: makeHold("train", 2).namespaces("team-b").obj(), pod: claimant("t1", "train")},
		"an empty UID claims nothing, even a hold without one": {hold: makeHold("train", 2).uid("").obj(), pod: stamped(guest("t1", "train"), "")},
		"the UID on a pod created before the hold (written past the injector) claims nothing": {hold: train,
			pod: func() *corev1.Pod {
				p := guest("t1", "train")
				p.CreationTimestamp = metav1.NewTime(now.Add(-time.Hour))
				return stamped(p, "uid-train")
			}()},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Claims(tc.hold, tc.pod); got != tc.want {
				t.Errorf("Claims = %v, want %v", got, tc.want)
			}
		})
	}
}
