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
// pure: the same input gives the same plan.
func PlanType(in TypeInput) TypePlan {
	holds := slices.Clone(in.Holds)
	slices.SortFunc(holds, Order)
	plan := TypePlan{HoldFree: map[string]int32{}, Claims: map[types.UID]string{}}

	byUID := make(map[types.UID]*imperatorv1alpha1.CapacityHold, len(holds))
	for _, h := range holds {
		byUID[h.UID] = h
	}
	// claimed is the hold of this type a guest claims (its UID, a namespace
	// the hold allows), else nil.
	claimed := func(pod *corev1.Pod) *imperatorv1alpha1.CapacityHold {
		if h := byUID[ClaimOf(pod)]; h != nil && Claims(h, pod) {
			return h
		}
		return nil
	}
	// claimable is the hold a guest may claim if that hold is in one of the
	// given phases, else nil.
	claimable := func(pod *corev1.Pod, phases map[string]Phase, want ...Phase) *imperatorv1alpha1.CapacityHold {
		if h := claimed(pod); h != nil && slices.Contains(want, phases[h.Name]) {
			return h
		}
		return nil
	}

	phases := make(map[string]Phase, len(holds))
	for _, h := range holds {
		phases[h.Name] = PhaseOf(h, in.Now)
	}
	holdingByHold := map[string]int32{}
	for _, pod := range in.Holding {
		if h := claimed(pod); h != nil {
			holdingByHold[h.Name]++
		}
	}
	guestHeld := in.Used + in.Granted + in.Leaving

	plans := make([]HoldPlan, len(holds))
	for i, h := range holds {
		plans[i] = HoldPlan{Hold: h, Phase: phases[h.Name]}
		if plans[i].Phase == PhaseActive || plans[i].Phase == PhaseExpired {
			plans[i].Claimed = min(h.Spec.Count, holdingByHold[h.Name])
		}
	}

	// Active holds first: what they hold, and what they lose when lost
	// reservation pods leave too few units, newest first.
	capacity := max(0, in.Available-in.Lost-guestHeld)
	var promised int32
	for i := range plans {
		if plans[i].Phase == PhaseActive {
			plans[i].Held = plans[i].Hold.Spec.Count - plans[i].Claimed
			promised += plans[i].Held
		}
	}
	// Only units lost to nodes are revoked: guests beyond a lowered
	// available (OverSubscribed) take nothing from a hold.
	if shortfall := min(promised-capacity, in.Lost); shortfall > 0 {
		for i := len(plans) - 1; i >= 0 && shortfall > 0; i-- {
			p := &plans[i]
			if p.Phase != PhaseActive || p.Held == 0 {
				continue
			}
			p.Revoked = min(p.Held, shortfall)
			p.Held -= p.Revoked
			shortfall -= p.Revoked
			p.Reason = imperatorv1alpha1.HoldReasonNodeLeftPool
			p.Message = fmt.Sprintf("%d of %d units of %s lost: reservation pods on nodes that are not ready or cannot be scheduled (%s); they come back when the nodes are ready again",
				p.Revoked, p.Hold.Spec.Count, in.MachineType, lostNodes(in.LostNodes))
		}
	}
	var backed int32
	for i := range plans {
		if plans[i].Phase == PhaseActive {
			backed += plans[i].Held
		}
	}

	// Then the holds not decided yet, oldest first.
	queuedOrdinary := int32(0)
	for _, pod := range in.Gated {
		if claimable(pod, phases, PhaseActive, PhasePending) == nil {
			queuedOrdinary++
		}
	}
	for i := range plans {
		p := &plans[i]
		if p.Phase != PhasePending {
			continue
		}
		p.Decided = true
		p.Claimed = min(p.Hold.Spec.Count, holdingByHold[p.Hold.Name])
		need := p.Hold.Spec.Count - p.Claimed
		free := in.Available - in.Lost - guestHeld - backed - queuedOrdinary
		if !in.Served {
			free = 0
		}
		if need > free {
			p.Phase, p.Claimed = PhaseFailed, 0
			p.Reason = imperatorv1alpha1.HoldReasonNotEnoughFreeUnits
			p.Message = failedMessage(in, p.Hold.Spec.Count, need, max(0, free), guestHeld, backed, queuedOrdinary)
			phases[p.Hold.Name] = PhaseFailed
			continue
		}
		p.Phase, p.Held = PhaseActive, need
		p.Reason = imperatorv1alpha1.HoldReasonAccepted
		p.Message = fmt.Sprintf("Machine %s offers %s: %d units held", in.Machine, in.MachineType, need)
		phases[p.Hold.Name] = PhaseActive
		backed += need
		promised += need
	}

	// What the queue may hand out.
	claiming := map[string]int32{}
	for _, pod := range in.Gated {
		if h := claimable(pod, phases, PhaseActive); h != nil {
			plan.Claims[pod.UID] = h.Name
			claiming[h.Name]++
		}
	}
	var claimingNow, heldIdle int32
	gatedOrdinary := int32(len(in.Gated))
	for _, p := range plans {
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
	// room is the units ordinary guests may have once the leaving guests are
	// gone: without an active hold, issue 18's queue exactly.
	room := in.Available - in.Used - in.Granted
	if plan.Active {
		room -= in.Lost + promised
	}
	plan.OrdinaryFree = max(0, room-in.Leaving)
	// Reservations keep every unit nobody holds or is about to take: the
	// held ones, and the free ones no ordinary guest in line can have.
	plan.Replicas = max(0, in.Available-in.Used-in.Granted-claimingNow-min(gatedOrdinary, max(0, room)))
	plan.Holds = plans
	return plan
}

func lostNodes(nodes []string) string {
	if len(nodes) == 0 {
		return "none named"
	}
	return strings.Join(nodes, ", ")
}

// failedMessage says why a hold could not be made, with the numbers.
func failedMessage(in TypeInput, count, need, free, guestHeld, otherHolds, queued int32) string {
	if !in.Served {
		return fmt.Sprintf("%d units of %s asked, 0 free: no node of Machine %s's spec.nodePool serves %s; nothing is held",
			count, in.MachineType, in.Machine, in.MachineType)
	}
	asked := fmt.Sprintf("%d units of %s asked", count, in.MachineType)
	if need != count {
		asked += fmt.Sprintf(" (%d more than its guests hold)", need)
	}
	return fmt.Sprintf("%s, %d free: %d available, %d held by guests, %d held by other holds, %d queued guests, %d reservation pods on nodes that are not ready or unschedulable; nothing is held",
		asked, free, in.Available, guestHeld, otherHolds, queued, in.Lost)
}
