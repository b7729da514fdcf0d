package machine

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// The guest queue. The Pod Resource Injector holds every guest at the
// imperatorv1alpha1.SlotSchedulingGate; the scheduler does not look at a
// gated pod. Per machine type, the controller grants slots in arrival order:
// while fewer than available units are held by guests (bound, granted and
// not yet bound, or leaving and still on their node), it takes the oldest
// gated guest that a node-pool=ready node of the type can take, and removes
// its gate once no reservation pod beyond the reservation's replicas is left
// (replicas already leave out every waiting guest a ready node can take, so
// the StatefulSet has been scaled down for it). The scheduler then places
// the guest at once, into the slot the reservation pod left, with no failed
// attempt and no backoff. A guest that leaves hands its slot to the next
// gated guest before the reservation grows back, because waiting guests keep
// the replicas down. A gated guest that no ready node can take keeps its
// place in line and is told so, but holds no unit: the replicas, the holds
// and the hub's free count leave it out until a node can take it.
//
// "A node can take the guest" is decided as the scheduler's node filters
// would for the guest's own constraints: the node's labels match the
// guest's nodeSelector and required node affinity, and the guest tolerates
// every NoSchedule and NoExecute taint of the node. Pod affinity and
// anti-affinity and topology spread constraints are not considered: they
// depend on the other pods of every node, which the agent does not cache
// (it caches only pods with a machine-group label). A guest that such a
// constraint keeps off every node is let through, and stays Pending
// (Unschedulable) holding its unit, until a node fits or it is deleted.
//
// A reservation pod that stays terminating well past its deletion time (a
// finalizer, a kubelet that does not answer) is not waited for: see
// stuckReservationAfter.

// gated is a guest held at the agent's slot gate.
func gated(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool {
		return g.Name == imperatorv1alpha1.SlotSchedulingGate
	})
}

// admittedAt is when the Pod Resource Injector admitted a guest: its
// imperatorv1alpha1.AdmittedAtAnnotation (RFC 3339 with nanoseconds), else,
// when that is missing or unreadable, its creation timestamp (one-second
// resolution).
//
// A stamp further from the creation timestamp than an admission takes
// (admissionWindow) is not the injector's: a pod created past the injector
// (its registration deleted) could otherwise write 1970 and go first. It is
// ignored, and the creation timestamp orders the pod.
func admittedAt(pod *corev1.Pod) time.Time {
	created := pod.CreationTimestamp.Time
	if value, ok := pod.Annotations[imperatorv1alpha1.AdmittedAtAnnotation]; ok {
		if t, err := time.Parse(time.RFC3339Nano, value); err == nil &&
			(created.IsZero() || (!t.Before(created.Add(-admissionWindow)) && t.Before(created.Add(time.Second)))) {
			return t
		}
	}
	return created
}

// admissionWindow bounds how long before its creation timestamp a pod can
// have been admitted: the API server stamps the creation time (truncated to
// the second) after the mutating webhooks ran, and the injector's
// webhook times out after 5 s.
const admissionWindow = 10 * time.Second

// arrivalOrder orders guests first come, first served: by admittedAt, then
// by UID, so that every reconcile, and every agent replica, sees the same
// line, and no namespace or name goes first when guests arrive together.
func arrivalOrder(a, b *corev1.Pod) int {
	if c := admittedAt(a).Compare(admittedAt(b)); c != 0 {
		return c
	}
	return cmp.Compare(a.UID, b.UID)
}

// canTake tells whether the scheduler's node filters for the guest's own
// constraints let it onto node: the node matches its nodeSelector and
// required node affinity, and it tolerates every NoSchedule and NoExecute
// taint of the node. Resources are not checked: the unit the guest is let
// into is the one a reservation pod leaves.
func canTake(node *corev1.Node, pod *corev1.Pod) bool {
	return canTakeWith(nodeaffinity.GetRequiredNodeAffinity(pod), node, pod)
}

// canTakeWith is canTake with the guest's required node affinity already
// parsed, for a guest tried against many nodes.
func canTakeWith(affinity nodeaffinity.RequiredNodeAffinity, node *corev1.Node, pod *corev1.Pod) bool {
	if match, err := affinity.Match(node); err != nil || !match {
		return false
	}
	_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations,
		func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}, false)
	return !untolerated
}

// placeableOn tells whether some node of nodes can take a guest; none
// can when nodes is empty.
func placeableOn(nodes []*corev1.Node, pod *corev1.Pod) bool {
	if len(nodes) == 0 {
		return false
	}
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	return slices.ContainsFunc(nodes, func(n *corev1.Node) bool { return canTakeWith(affinity, n, pod) })
}

// line is what the grant decision of one machine type depends on.
type line struct {
	machineType string
	// available is spec.machineTypes[].available.
	available int32
	// held counts the units guests hold or were promised: bound guests,
	// guests without the gate that are not bound yet, and leaving guests
	// still bound to their node.
	held int32
	// releasing is true while a reservation pod the StatefulSet is to remove
	// (its replicas were lowered for a waiting guest) still exists: its unit
	// is not free yet.
	releasing bool
	// stuck are the reservation pods terminating for longer than
	// stuckReservationAfter past their deletion time, as namespace/name:
	// they are not waited for.
	stuck []string
	// gated are the guests at the slot gate, in any order.
	gated []*corev1.Pod
	// placeable tells whether a node-pool=ready node of the type can take
	// the guest (placeableOn), as podCounts found it; nil when the type
	// has no such node at all.
	placeable func(*corev1.Pod) bool
	// holds is set when the type has an active CapacityHold (holds.go).
	holds *holdLine
	// gangs maps each gated guest of a gang that units alone can let
	// through to its gang; parked are the members of the others, told why
	// (formGangs).
	gangs  map[types.UID]*waitingGang
	parked []queuedGuest
}

// holdLine is what the line of a machine type with an active CapacityHold
// depends on besides: capacityhold.PlanType's figures.
type holdLine struct {
	// claims maps each gated guest that may take a held unit to its hold.
	claims map[types.UID]string
	// holdFree is, by hold, how many held units its guests may take.
	holdFree map[string]int32
	// ordinaryFree is how many units the other guests may take: held units
	// are not theirs.
	ordinaryFree int32
	// held is the units held for holds, for the notes.
	held int32
}

// queuedGuest is a guest that stays at the gate, with what it is told.
type queuedGuest struct {
	pod  *corev1.Pod
	note string
	// hold is the CapacityHold whose held unit the guest waits for, "" in
	// the ordinary line.
	hold string
	// unplaceable is set when no ready node can take it.
	unplaceable bool
	// gang is set for a member of a gang waiting whole, with the gang's
	// plan; extra for a member beyond what the gang needs.
	gang     *waitingGang
	gangPlan gangPlan
	extra    bool
	// parkedReason is, for a member of a parked gang, why it is parked in
	// the Volcano PodGroup words (NotEnoughResources, NotEnoughTasks,
	// InvalidGang, MixedGang).
	parkedReason string
}

// slotPlan is what to do with one machine type's line.
type slotPlan struct {
	// grant are the guests whose gate is removed now, oldest first.
	grant []*corev1.Pod
	// queued are the others, in line order, each with its note.
	queued []queuedGuest
}

// planSlots decides which gated guests get a unit now and what the others
// are told. A guest no ready node can take keeps its place in line and is
// passed over, so that it holds nobody behind it back; it gets the next
// unit once a node can take it.
//
// With an active CapacityHold (l.holds), a guest that may claim a held unit
// of its hold takes one ahead of the line, while its hold has one; the
// others take only the units no hold holds (ordinaryFree), in order.
//
// The members of a gang (l.gangs, gang.go) stand in line together at the
// oldest one's place: they are let through together when all it needs fit,
// else the free units are set aside for it up to what it needs. The parked
// gang members (l.parked) are told why and let through by nobody.
func planSlots(l line) slotPlan {
	order := slices.Clone(l.gated)
	slices.SortFunc(order, arrivalOrder)
	sp := &slotPlanner{l: l, free: l.available - l.held, room: l.available - l.held, planned: map[*waitingGang]bool{}}
	if l.holds != nil {
		sp.free, sp.holdFree = l.holds.ordinaryFree, maps.Clone(l.holds.holdFree)
	}
	for _, pod := range order {
		if g := l.gangs[pod.UID]; g != nil {
			sp.planGang(g)
			continue
		}
		sp.planGuest(pod)
	}
	noteQueued(l, &sp.plan)
	sp.plan.queued = append(sp.plan.queued, l.parked...)
	return sp.plan
}

// slotPlanner is one planSlots: the units still to hand out as it walks
// the line, and the plan so far.
type slotPlanner struct {
	l line
	// free are the units no hold holds still free for ordinary guests,
	// holdFree each active hold's held units still free for its guests.
	free     int32
	holdFree map[string]int32
	// room is the cap itself: guests never hold more than available units,
	// whatever the holds' accounting says (available lowered below what a
	// hold and the guests already running need, say).
	room int32
	// planned are the gangs already placed in the line.
	planned map[*waitingGang]bool
	plan    slotPlan
}

func (sp *slotPlanner) placeable(pod *corev1.Pod) bool {
	return sp.l.placeable != nil && sp.l.placeable(pod)
}

// planGang lets a gang through whole, at its oldest member's place, when
// all it needs fit (its hold's units, or free ones); otherwise the units
// it has are set aside for it and its members wait together.
func (sp *slotPlanner) planGang(g *waitingGang) {
	if sp.planned[g] {
		return
	}
	sp.planned[g] = true
	l := sp.l
	needed, extra := g.members[:min(int(g.need), len(g.members))], g.members[min(int(g.need), len(g.members)):]
	p := gangPlan{hold: commonClaim(l.holds, needed)}
	if i := slices.IndexFunc(needed, func(m *corev1.Pod) bool { return !sp.placeable(m) }); i >= 0 {
		p.unplaceable = needed[i]
	}
	need := int32(len(needed))
	switch {
	case p.hold != "":
		// The hold's units are the gang's when it has all it needs;
		// otherwise what it has is kept for the gang.
		p.aside = min(sp.holdFree[p.hold], need)
		sp.holdFree[p.hold] -= p.aside
		p.grant = p.aside == need && !l.releasing && p.unplaceable == nil && sp.room >= need
	case p.unplaceable == nil:
		p.aside = min(max(sp.free, 0), need)
		sp.free -= p.aside
		p.grant = p.aside == need && !l.releasing && sp.room >= need
	}
	if p.grant {
		sp.plan.grant = append(sp.plan.grant, needed...)
		sp.room -= need
	} else {
		for _, m := range needed {
			sp.plan.queued = append(sp.plan.queued, queuedGuest{pod: m, gang: g, gangPlan: p, unplaceable: !sp.placeable(m)})
		}
	}
	for _, m := range extra {
		sp.plan.queued = append(sp.plan.queued, queuedGuest{pod: m, gang: g, extra: true})
	}
}

// planGuest lets a single guest through when a unit of its hold, or a free
// one, is there and a ready node can take it; otherwise it waits in line.
func (sp *slotPlanner) planGuest(pod *corev1.Pod) {
	l := sp.l
	placeable := sp.placeable(pod)
	if hold := l.holds.claimOf(pod); hold != "" && sp.holdFree[hold] > 0 {
		// The held unit is this guest's: now, or once the reservation pod
		// scaled away for it is gone.
		sp.holdFree[hold]--
		if !l.releasing && placeable && sp.room > 0 {
			sp.plan.grant = append(sp.plan.grant, pod)
			sp.room--
			return
		}
		sp.plan.queued = append(sp.plan.queued, queuedGuest{pod: pod, hold: hold, unplaceable: !placeable})
		return
	}
	if sp.free > 0 && sp.room > 0 && !l.releasing && placeable {
		sp.plan.grant = append(sp.plan.grant, pod)
		sp.free--
		sp.room--
		return
	}
	sp.plan.queued = append(sp.plan.queued, queuedGuest{pod: pod, unplaceable: !placeable})
}

// noteQueued writes each guest left in line the note it is told: its place
// (exact for the first exactPlaces), its gang's or its hold's, and why it
// cannot go yet.
func noteQueued(l line, plan *slotPlan) {
	inUse := l.held + int32(len(plan.grant))
	position := 0
	gangPlace := map[*waitingGang]int{}
	for i := range plan.queued {
		q := &plan.queued[i]
		var note string
		switch {
		case q.extra:
			q.note = extraMemberNote(q.gang)
			continue
		case q.gang != nil:
			if gangPlace[q.gang] == 0 {
				position++
				gangPlace[q.gang] = position
			}
			note = gangNote(l, q.gang, q.gangPlan, gangPlace[q.gang], inUse)
			if l.releasing && q.gangPlan.unplaceable == nil && q.gangPlan.aside == q.gang.need {
				note += "; a reservation pod is making room"
			}
		case q.hold != "":
			note = fmt.Sprintf("waiting for a unit of %s held by CapacityHold %s", l.machineType, q.hold)
		case position >= exactPlaces:
			// The same text until the guest moves up into the first
			// exactPlaces: a grant rewrites exactPlaces annotations, not
			// one per guest in line.
			note = fmt.Sprintf("waiting for %s: %d+ in line", l.machineType, exactPlaces)
		default:
			position++
			note = fmt.Sprintf("waiting for %s: %s in line, %d of %d in use", l.machineType, ordinal(position), inUse, l.available)
			if l.holds != nil && l.holds.held > 0 {
				note += fmt.Sprintf(", %d held for capacity holds", l.holds.held)
			}
		}
		if q.gang == nil {
			switch {
			case q.unplaceable && l.placeable == nil:
				note += "; " + noReadyNodeNote
			case q.unplaceable:
				note += "; " + unplaceableNote
			case l.releasing && (q.hold != "" || inUse < l.available):
				note += "; a reservation pod is making room"
			}
		}
		if len(l.stuck) > 0 {
			note += "; not waiting for reservation pod " + strings.Join(l.stuck, ", ") + ", stuck terminating"
		}
		q.note = note
	}
}

// commonClaim is the hold every one of pods claims, "" when they do not
// all claim the same one.
func commonClaim(h *holdLine, pods []*corev1.Pod) string {
	if h == nil || len(pods) == 0 {
		return ""
	}
	hold := h.claimOf(pods[0])
	for _, pod := range pods[1:] {
		if h.claimOf(pod) != hold {
			return ""
		}
	}
	return hold
}

// noReadyNodeNote tells the guests at the gate why none is let through while
// the type has no ready node at all.
const noReadyNodeNote = "no " + imperatorv1alpha1.NodePoolKey + "=ready node of the type can take it now"

// unplaceableNote tells a guest at the gate that none of the type's ready
// nodes can take why it is passed over, and that it holds no unit meanwhile.
const unplaceableNote = "no " + imperatorv1alpha1.NodePoolKey + "=ready node of the type can take it now " +
	"(its nodeSelector, required node affinity or tolerations): it keeps its place in line and holds no unit until one can"

// exactPlaces is how many guests of a line are told their exact place and
// the type's units in use; those behind them are told "100+ in line".
const exactPlaces = 100

// claimOf is the hold whose held unit a gated guest may take, "" when none
// or when the type has no active hold.
func (h *holdLine) claimOf(pod *corev1.Pod) string {
	if h == nil {
		return ""
	}
	return h.claims[pod.UID]
}

// ordinal spells a line position: 1st, 2nd, 3rd, 4th, 11th, 21st.
func ordinal(n int) string {
	suffix := "th"
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return strconv.Itoa(n) + suffix
}
