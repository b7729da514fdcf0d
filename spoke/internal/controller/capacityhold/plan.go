package capacityhold

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// Phase is where a hold stands.
type Phase string

const (
	// PhasePending is a hold not decided yet.
	PhasePending Phase = "Pending"
	// PhaseActive is a hold accepted whose validUntil has not passed.
	PhaseActive Phase = "Active"
	// PhaseFailed is a hold that could not be made; final.
	PhaseFailed Phase = "Failed"
	// PhaseExpired is a hold whose validUntil passed; final.
	PhaseExpired Phase = "Expired"
)

// PhaseOf reads a hold's phase from its status and validUntil at now.
func PhaseOf(hold *imperatorv1alpha1.CapacityHold, now time.Time) Phase {
	conditions := hold.Status.Conditions
	switch {
	case meta.IsStatusConditionTrue(conditions, imperatorv1alpha1.HoldConditionFailed):
		return PhaseFailed
	case meta.IsStatusConditionTrue(conditions, imperatorv1alpha1.HoldConditionBookingExpired),
		!now.Before(hold.Spec.ValidUntil.Time):
		return PhaseExpired
	case meta.IsStatusConditionTrue(conditions, imperatorv1alpha1.HoldConditionAccepted):
		return PhaseActive
	}
	return PhasePending
}

// TypeInput is what the Machine controller counted of one machine type.
type TypeInput struct {
	// Machine and MachineType name the type in messages.
	Machine, MachineType string
	// Available is spec.machineTypes[].available.
	Available int32
	// Served is false when no node of spec.nodePool serves the type.
	Served bool
	// Used counts the bound guests, Granted the guests let through the slot
	// gate and not bound yet, Leaving the bound guests that are terminating:
	// together the units guests hold.
	Used, Granted, Leaving int32
	// Lost counts the reservation pods that hold no usable unit: bound to a
	// node that is not node-pool=ready, or unschedulable. LostNodes names
	// those nodes for messages.
	Lost      int32
	LostNodes []string
	// ReservationPods counts the type's reservation pods that exist and are
	// not stuck terminating, and LostReservations those of them that hold
	// no usable unit: bound to a node that is not node-pool=ready, or that
	// the scheduler could not place, whatever their ordinal. Only the others
	// can back what holds hold: available may promise more units than the
	// nodes have (every node of the type in maintenance, say).
	ReservationPods, LostReservations int32
	// Holds are the holds of the Machine's group and this type, any order.
	Holds []*imperatorv1alpha1.CapacityHold
	// Holding are the guests that hold a unit (bound, granted or leaving);
	// only those that claim a hold (ClaimOf) matter.
	Holding []*corev1.Pod
	// Gated are the guests at the slot gate.
	Gated []*corev1.Pod
	// Now is the time validUntil is compared with.
	Now time.Time
}

// HoldPlan is what becomes of one hold.
type HoldPlan struct {
	Hold *imperatorv1alpha1.CapacityHold
	// Phase after this reconcile; Decided is true when it was decided now.
	Phase   Phase
	Decided bool
	// Held counts the units kept for the hold that no guest of it holds
	// (after revocation), Claimed those its guests hold, Revoked the units
	// it lost to nodes that left the ready pool.
	Held, Claimed, Revoked int32
	// Reason and Message explain a decision made now (Failed, or Accepted),
	// or the revocation.
	Reason, Message string
}

// TypePlan is the accounting of one machine type.
type TypePlan struct {
	// Holds, in Order.
	Holds []HoldPlan
	// Active tells whether some hold of the type is active.
	Active bool
	// OrdinaryFree is how many units guests that claim no hold may be let
	// into now.
	OrdinaryFree int32
	// HoldFree is, by active hold name, how many of its held units its gated
	// guests may be let into now.
	HoldFree map[string]int32
	// Claims maps each gated guest that may claim a held unit to the hold.
	Claims map[types.UID]string
	// Held is the Machine's usage.held: units kept for holds that no guest
	// holds or is about to take.
	Held int32
	// Replicas is how many reservation pods the type keeps.
	Replicas int32
	// NextExpiry is the earliest validUntil of the active holds, zero when
	// none is active.
	NextExpiry time.Time
}

// PlanType decides the holds of one machine type and splits its units
// between them, their guests and everyone else (see the package doc). It is
// pure: the same input gives the same plan. It runs in three steps: the
// active holds keep what they hold (less what lost nodes revoke), the
// pending holds are decided oldest first, and the queue's share follows.
func PlanType(in TypeInput) TypePlan {
	t := newTypePlanner(in)
	t.holdActive()
	t.decidePending()
	return t.allot()
}

// typePlanner is one PlanType: the type's holds in Order with their plans
// and phases as the steps decide them, and the units they add up to.
type typePlanner struct {
	in     TypeInput
	plans  []HoldPlan
	phases map[string]Phase
	byUID  map[types.UID]*imperatorv1alpha1.CapacityHold
	// holdingByHold counts, by hold name, the guests holding a unit that
	// claim it.
	holdingByHold map[string]int32
	// guestHeld are the units guests hold: used, granted and leaving.
	guestHeld int32
	// promised are the units active holds hold (before revocation, and with
	// those accepted now); backed those still backed by reservation pods.
	promised, backed int32
}

func newTypePlanner(in TypeInput) *typePlanner {
	holds := slices.Clone(in.Holds)
	slices.SortFunc(holds, Order)
	t := &typePlanner{
		in:            in,
		plans:         make([]HoldPlan, len(holds)),
		phases:        make(map[string]Phase, len(holds)),
		byUID:         make(map[types.UID]*imperatorv1alpha1.CapacityHold, len(holds)),
		holdingByHold: map[string]int32{},
		guestHeld:     in.Used + in.Granted + in.Leaving,
	}
	for _, h := range holds {
		t.byUID[h.UID] = h
		t.phases[h.Name] = PhaseOf(h, in.Now)
	}
	for _, pod := range in.Holding {
		if h := t.claimed(pod); h != nil {
			t.holdingByHold[h.Name]++
		}
	}
	for i, h := range holds {
		t.plans[i] = HoldPlan{Hold: h, Phase: t.phases[h.Name]}
		if t.plans[i].Phase == PhaseActive || t.plans[i].Phase == PhaseExpired {
			t.plans[i].Claimed = min(h.Spec.Count, t.holdingByHold[h.Name])
		}
	}
	return t
}

// claimed is the hold of this type a guest claims (its UID, a namespace the
// hold allows), else nil.
func (t *typePlanner) claimed(pod *corev1.Pod) *imperatorv1alpha1.CapacityHold {
	if h := t.byUID[ClaimOf(pod)]; h != nil && Claims(h, pod) {
		return h
	}
	return nil
}

// claimable is the hold a guest may claim if that hold is now in one of
// the phases want, else nil.
func (t *typePlanner) claimable(pod *corev1.Pod, want ...Phase) *imperatorv1alpha1.CapacityHold {
	if h := t.claimed(pod); h != nil && slices.Contains(want, t.phases[h.Name]) {
		return h
	}
	return nil
}

// holdActive gives each active hold the units no guest of it holds, and
// revokes, newest first, what reservation pods on lost nodes leave too few
// units for: fewer units than available promises once the guests' are
// counted, or fewer reservation pods that can hold a unit than the holds
// hold (nodeShortfall). Only units lost to nodes are revoked: guests beyond
// a lowered available (OverSubscribed) take nothing from a hold.
func (t *typePlanner) holdActive() {
	in := t.in
	capacity := max(0, in.Available-in.Lost-t.guestHeld)
	for i := range t.plans {
		if t.plans[i].Phase == PhaseActive {
			t.plans[i].Held = t.plans[i].Hold.Spec.Count - t.plans[i].Claimed
			t.promised += t.plans[i].Held
		}
	}
	if shortfall := max(min(t.promised-capacity, in.Lost), t.nodeShortfall(t.promised)); shortfall > 0 {
		for i := len(t.plans) - 1; i >= 0 && shortfall > 0; i-- {
			p := &t.plans[i]
			if p.Phase != PhaseActive || p.Held == 0 {
				continue
			}
			p.Revoked = min(p.Held, shortfall)
			p.Held -= p.Revoked
			shortfall -= p.Revoked
			p.Reason = imperatorv1alpha1.HoldReasonNodeLeftPool
			p.Message = fmt.Sprintf("%d of %d units of %s lost: %d reservation pods are on nodes that are not ready or cannot be scheduled (%s), %d can hold a unit; they come back when the nodes are ready again",
				p.Revoked, p.Hold.Spec.Count, in.MachineType, max(in.Lost, in.LostReservations), lostNodes(in.LostNodes), t.usableReservations())
		}
	}
	for i := range t.plans {
		if t.plans[i].Phase == PhaseActive {
			t.backed += t.plans[i].Held
		}
	}
}

// usableReservations are the type's reservation pods that can hold a
// unit: they exist and are not lost.
func (t *typePlanner) usableReservations() int32 {
	return max(0, t.in.ReservationPods-t.in.LostReservations)
}

// nodeShortfall is how many of promised held units no reservation pod can
// hold: beyond the usable reservation pods, at most as many as are lost.
// While none is lost it is zero: reservation pods the StatefulSet has not
// created yet (a hold's guest just left, the Machine is new) are not lost,
// and revoking for them would flap the hold at every handover.
func (t *typePlanner) nodeShortfall(promised int32) int32 {
	lost := t.in.LostReservations
	if lost == 0 {
		return 0
	}
	return max(0, min(promised-t.usableReservations(), lost))
}

// decidePending accepts, oldest first, each pending hold whose units are
// free after the guests, the active holds and the ordinary guests in line,
// and fails the others.
func (t *typePlanner) decidePending() {
	in := t.in
	queuedOrdinary := int32(0)
	for _, pod := range in.Gated {
		if t.claimable(pod, PhaseActive, PhasePending) == nil {
			queuedOrdinary++
		}
	}
	for i := range t.plans {
		p := &t.plans[i]
		if p.Phase != PhasePending {
			continue
		}
		p.Decided = true
		p.Claimed = min(p.Hold.Spec.Count, t.holdingByHold[p.Hold.Name])
		need := p.Hold.Spec.Count - p.Claimed
		free := in.Available - in.Lost - t.guestHeld - t.backed - queuedOrdinary
		// While reservation pods are lost, only units a usable reservation
		// pod holds beyond the active holds' are free, whatever available
		// says.
		if in.LostReservations > 0 {
			free = min(free, t.usableReservations()-t.backed)
		}
		if !in.Served {
			free = 0
		}
		if need > free {
			p.Phase, p.Claimed = PhaseFailed, 0
			p.Reason = imperatorv1alpha1.HoldReasonNotEnoughFreeUnits
			p.Message = failedMessage(in, p.Hold.Spec.Count, need, max(0, free), t.guestHeld, t.backed, queuedOrdinary, t.usableReservations())
			t.phases[p.Hold.Name] = PhaseFailed
			continue
		}
		p.Phase, p.Held = PhaseActive, need
		p.Reason = imperatorv1alpha1.HoldReasonAccepted
		p.Message = fmt.Sprintf("Machine %s offers %s: %d units held", in.Machine, in.MachineType, need)
		t.phases[p.Hold.Name] = PhaseActive
		t.backed += need
		t.promised += need
	}
}

// allot is what the queue may hand out: the gated guests that may take a
// held unit of their hold, the units ordinary guests may have, what stays
// held, and the reservation pods the type keeps.
func (t *typePlanner) allot() TypePlan {
	in := t.in
	plan := TypePlan{HoldFree: map[string]int32{}, Claims: map[types.UID]string{}}
	claiming := map[string]int32{}
	for _, pod := range in.Gated {
		if h := t.claimable(pod, PhaseActive); h != nil {
			plan.Claims[pod.UID] = h.Name
			claiming[h.Name]++
		}
	}
	var claimingNow, heldIdle int32
	gatedOrdinary := int32(len(in.Gated))
	for _, p := range t.plans {
		if p.Phase != PhaseActive {
			continue
		}
		plan.Active = true
		plan.HoldFree[p.Hold.Name] = p.Held
		n := min(claiming[p.Hold.Name], p.Held)
		claimingNow += n
		gatedOrdinary -= n
		heldIdle += p.Held - n
		if at := p.Hold.Spec.ValidUntil.Time; plan.NextExpiry.IsZero() || at.Before(plan.NextExpiry) {
			plan.NextExpiry = at
		}
	}
	plan.Held = heldIdle
	// room is the units ordinary guests may have once the leaving guests
	// are gone: without an active hold, the plain queue exactly.
	room := in.Available - in.Used - in.Granted
	if plan.Active {
		room -= in.Lost + t.promised
	}
	plan.OrdinaryFree = max(0, room-in.Leaving)
	// Reservations keep every unit nobody holds or is about to take: the
	// held ones, and the free ones no ordinary guest in line can have.
	plan.Replicas = max(0, in.Available-in.Used-in.Granted-claimingNow-min(gatedOrdinary, max(0, room)))
	plan.Holds = t.plans
	return plan
}

func lostNodes(nodes []string) string {
	if len(nodes) == 0 {
		return "none named"
	}
	return strings.Join(nodes, ", ")
}

// failedMessage says why a hold could not be made, with the numbers.
func failedMessage(in TypeInput, count, need, free, guestHeld, otherHolds, queued, usable int32) string {
	if !in.Served {
		return fmt.Sprintf("%d units of %s asked, 0 free: no node of Machine %s's spec.nodePool serves %s; nothing is held",
			count, in.MachineType, in.Machine, in.MachineType)
	}
	asked := fmt.Sprintf("%d units of %s asked", count, in.MachineType)
	if need != count {
		asked += fmt.Sprintf(" (%d more than its guests hold)", need)
	}
	lost := fmt.Sprintf("%d reservation pods on nodes that are not ready or unschedulable", max(in.Lost, in.LostReservations))
	if in.LostReservations > 0 {
		lost += fmt.Sprintf(" (%s), %d that can hold a unit", lostNodes(in.LostNodes), usable)
	}
	return fmt.Sprintf("%s, %d free: %d available, %d held by guests, %d held by other holds, %d queued guests, %s; nothing is held",
		asked, free, in.Available, guestHeld, otherHolds, queued, lost)
}
