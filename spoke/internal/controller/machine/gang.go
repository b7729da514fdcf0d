package machine

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// Gangs. Guests of one group pass the slot gate together: a gang is let
// through only when every member it still needs fits in the type's free
// units at once, and until then none of its members takes a unit, so two
// gangs never hold parts of the type each and wait for each other.
//
// Membership, first match wins (gangMembership): the native PodGroup a pod
// names in spec.schedulingGroup (Kubernetes 1.36, GenericWorkload), the
// coscheduling label scheduling.x-k8s.io/pod-group, Kueue's
// kueue.x-k8s.io/pod-group-name, and imperator.tenzen-y.io/gang. The size
// is Kueue's kueue.x-k8s.io/pod-group-total-count for Kueue groups and
// imperator.tenzen-y.io/gang-size for the others; members of a PodGroup
// without gang-size take its minMember or gang minCount (groups.go). Members share one namespace (the name is the namespace's) and one
// machine type; members of several types of the group wait, told so.
//
// The line (planSlots): a gang stands in line at its oldest gated member.
// When its turn comes and its members do not fit, it keeps its place and the
// free units are set aside for it, up to the members it still needs: the
// guests behind it get only the free units beyond that. So no gang starves
// behind single guests that keep taking units as they free, and a single
// guest never waits behind a gang for a unit the gang could not use. A gang
// that units alone cannot let through sets nothing aside and holds no place
// (parked): one bigger than the type's available, one whose members are not
// all created yet (NotEnoughTasks), one whose size is unreadable or whose
// members disagree about it, one spread over several types. Its members wait
// at the gate, told why, and the reservations keep their units. A gang some
// of whose members already hold units (one re-created, say) needs only the
// rest; once as many members hold units as its size, the others are single
// guests. A gang whose members all claim one CapacityHold takes the hold's
// units, all of them at once, when the hold has that many free.

// Why a gang waits, in the Volcano PodGroup vocabulary (NotEnoughResources,
// NotEnoughTasks, Unschedulable) and ours (InvalidGang, MixedGang): in the
// members' notes and the native PodGroup's condition.
const (
	reasonNotEnoughResources = "NotEnoughResources"
	reasonNotEnoughTasks     = "NotEnoughTasks"
	reasonUnschedulable      = "Unschedulable"
	reasonInvalidGang        = "InvalidGang"
	reasonMixedGang          = "MixedGang"
)

// gangID names a gang among a group's guests.
type gangID struct {
	namespace string
	// source is where the membership came from: podgroup, coscheduling,
	// kueue or gang.
	source string
	name   string
}

// String is how members are told of their gang.
func (g gangID) String() string { return g.namespace + "/" + g.name }

// gangMembership returns the gang a guest belongs to, if any, with the size
// it declares; sizeProblem says why the size cannot be used (missing, not a
// positive number), and size is 0 then.
func gangMembership(pod *corev1.Pod) (id gangID, size int32, sizeProblem string, ok bool) {
	sizeKey := imperatorv1alpha1.GangSizeAnnotation
	switch {
	case pod.Spec.SchedulingGroup != nil && pod.Spec.SchedulingGroup.PodGroupName != nil && *pod.Spec.SchedulingGroup.PodGroupName != "":
		id = gangID{namespace: pod.Namespace, source: "podgroup", name: *pod.Spec.SchedulingGroup.PodGroupName}
	case pod.Labels[imperatorv1alpha1.CoschedulingPodGroupKey] != "":
		id = gangID{namespace: pod.Namespace, source: "coscheduling", name: pod.Labels[imperatorv1alpha1.CoschedulingPodGroupKey]}
	case pod.Labels[imperatorv1alpha1.KueuePodGroupNameKey] != "":
		id = gangID{namespace: pod.Namespace, source: "kueue", name: pod.Labels[imperatorv1alpha1.KueuePodGroupNameKey]}
		sizeKey = imperatorv1alpha1.KueuePodGroupTotalCountAnnotation
	case pod.Labels[imperatorv1alpha1.GangKey] != "":
		id = gangID{namespace: pod.Namespace, source: "gang", name: pod.Labels[imperatorv1alpha1.GangKey]}
	default:
		return gangID{}, 0, "", false
	}
	value, found := pod.Annotations[sizeKey]
	if !found {
		return id, 0, "annotation " + sizeKey + " is missing", true
	}
	n, err := strconv.ParseInt(value, 10, 32)
	if err != nil || n < 1 {
		return id, 0, fmt.Sprintf("annotation %s=%q is not a positive number", sizeKey, value), true
	}
	return id, int32(n), "", true
}

// waitingGang is a gang with members at the gate that units alone can let
// through.
type waitingGang struct {
	id gangID
	// size is how many members it needs holding units at once.
	size int32
	// need is how many more: size less the members already holding one.
	need int32
	// members are its guests at the gate, in arrival order.
	members []*corev1.Pod
}

// formGangs finds the gangs among the type's guests at the gate. The
// members of a gang that units alone can let through go to u.gangs; those of
// a gang that cannot be let through whatever the free units (see the doc
// above) leave the line for u.parked, with what they are told, and count as
// unplaceable: they no longer lower the reservation's replicas; members of a gang that already
// holds its size stay single guests.
//
// groupSize gives the size of a PodGroup's gang whose members carry none
// (0: none); nil reads none.
func formGangs(u *typeUsage, machineType string, groupSize func(gangID) int32) {
	ids, byID := collectGangs(u)
	if len(ids) == 0 {
		return
	}
	parked := map[types.UID]bool{}
	for _, id := range ids {
		f := byID[id]
		slices.SortFunc(f.members, arrivalOrder)
		if len(f.sizes) == 0 && (id.source == "coscheduling" || id.source == "podgroup") {
			if n := sizeOfGroup(groupSize, id); n > 0 {
				f.sizes, f.problems = []int32{n}, nil
			} else {
				f.problems = append(f.problems, "PodGroup "+id.String()+" gives no size (minMember, gang minCount)")
			}
		}
		slices.Sort(f.sizes)
		holding := u.gangHolding[id]
		reason, note, running := u.gangVerdict(machineType, id, f, holding)
		switch {
		case running:
			// The members beyond its size are single guests.
			continue
		case note == "":
			g := &waitingGang{id: id, size: f.sizes[0], need: f.sizes[0] - holding, members: f.members}
			if u.gangs == nil {
				u.gangs = map[types.UID]*waitingGang{}
			}
			for _, pod := range f.members {
				u.gangs[pod.UID] = g
			}
			continue
		}
		for _, pod := range f.members {
			parked[pod.UID] = true
			u.parked = append(u.parked, queuedGuest{pod: pod, note: note, parkedReason: reason})
		}
	}
	if len(parked) == 0 {
		return
	}
	// Parked members hold no unit: they count as unplaceable, as the
	// replicas and the hub's free figure leave out.
	n := len(u.gated)
	u.gated = slices.DeleteFunc(u.gated, func(pod *corev1.Pod) bool { return parked[pod.UID] })
	u.Unplaceable += int32(n - len(u.gated))
	u.unplaceable = slices.DeleteFunc(u.unplaceable, func(pod *corev1.Pod) bool { return parked[pod.UID] })
	u.replicas = reservationReplicas(u.Maximum, u.Usage)
}

// foundGang is what the type's guests at the gate say of one gang.
type foundGang struct {
	members  []*corev1.Pod
	sizes    []int32
	problems []string
}

// collectGangs groups the type's gated and unplaceable guests by gang, in
// the order the gangs were first seen.
func collectGangs(u *typeUsage) ([]gangID, map[gangID]*foundGang) {
	byID := map[gangID]*foundGang{}
	var ids []gangID
	for _, pod := range slices.Concat(u.gated, u.unplaceable) {
		id, size, problem, ok := gangMembership(pod)
		if !ok {
			continue
		}
		f := byID[id]
		if f == nil {
			f = &foundGang{}
			byID[id] = f
			ids = append(ids, id)
		}
		f.members = append(f.members, pod)
		if problem != "" && !slices.Contains(f.problems, problem) {
			f.problems = append(f.problems, problem)
		}
		if size > 0 && !slices.Contains(f.sizes, size) {
			f.sizes = append(f.sizes, size)
		}
	}
	return ids, byID
}

// gangVerdict says whether gang id already holds its size (running), or
// why it cannot be let through whatever the free units (reason and the
// note its members are told), or neither (both empty: it waits in line).
// f.sizes is sorted.
func (u *typeUsage) gangVerdict(machineType string, id gangID, f *foundGang, holding int32) (reason, note string, running bool) {
	switch kinds := u.gangTypes[id]; {
	case len(kinds) > 1:
		return reasonMixedGang, fmt.Sprintf("gang %s: members of machine types %s; Unschedulable (MixedGang): a gang's members share one namespace and one machine type, delete and create again those of the wrong type",
			id, strings.Join(kinds, ", ")), false
	case len(f.problems) > 0:
		return reasonInvalidGang, fmt.Sprintf("gang %s: %s; Unschedulable (InvalidGang): its members wait, holding no unit, until every member gives its size",
			id, strings.Join(f.problems, ", ")), false
	case len(f.sizes) > 1:
		return reasonInvalidGang, fmt.Sprintf("gang %s: members give sizes %s; Unschedulable (InvalidGang): its members wait, holding no unit, until they agree",
			id, joinSizes(f.sizes)), false
	case holding >= f.sizes[0]:
		return "", "", true
	case f.sizes[0] > u.Maximum:
		return reasonNotEnoughResources, fmt.Sprintf("gang %s: %d needed at once, %s has %d available; Unschedulable (NotEnoughResources): never let through while available is below its size, it holds no unit",
			id, f.sizes[0], machineType, u.Maximum), false
	case holding+int32(len(f.members)) < f.sizes[0]:
		return reasonNotEnoughTasks, fmt.Sprintf("gang %s: %d of %d members here; Pending (NotEnoughTasks): it holds no unit until every member is created",
			id, holding+int32(len(f.members)), f.sizes[0]), false
	}
	return "", "", false
}

func sizeOfGroup(groupSize func(gangID) int32, id gangID) int32 {
	if groupSize == nil {
		return 0
	}
	return groupSize(id)
}

func joinSizes(sizes []int32) string {
	s := make([]string, len(sizes))
	for i, n := range sizes {
		s[i] = strconv.Itoa(int(n))
	}
	return strings.Join(s, " and ")
}

// gangPlan is what planSlots decided for a gang at its turn.
type gangPlan struct {
	// grant is set when the members it needs are let through now.
	grant bool
	// aside is how many free units are set aside for it.
	aside int32
	// hold is the CapacityHold whose units every member it needs claims.
	hold string
	// unplaceable is the first member it needs that no ready node can take.
	unplaceable *corev1.Pod
}

// gangNote is what a member of a gang at the gate is told, position being
// the gang's place in line and inUse the type's units in use.
func gangNote(l line, g *waitingGang, p gangPlan, position int, inUse int32) string {
	switch {
	case p.unplaceable != nil && l.placeable == nil:
		return fmt.Sprintf("gang %s: %d of %d needed; Pending (Unschedulable): %s", g.id, g.need, g.size, noReadyNodeNote)
	case p.unplaceable != nil:
		return fmt.Sprintf("gang %s: %d of %d needed; Pending (Unschedulable): no %s=ready node of %s can take member %s now, the gang keeps its place and holds no unit until one can",
			g.id, g.need, g.size, imperatorv1alpha1.NodePoolKey, l.machineType, p.unplaceable.Namespace+"/"+p.unplaceable.Name)
	case p.hold != "":
		return fmt.Sprintf("gang %s: %d of %d needed, %d free of CapacityHold %s; Pending (NotEnoughResources): waiting whole for units of %s held by CapacityHold %s",
			g.id, g.need, g.size, p.aside, p.hold, l.machineType, p.hold)
	}
	return fmt.Sprintf("gang %s: %d of %d needed, %d free; Pending (NotEnoughResources): waiting whole for %s, %s in line, %d of %d in use",
		g.id, g.need, g.size, p.aside, l.machineType, ordinal(position), inUse, l.available)
}

// extraMemberNote tells a member beyond what its gang needs why it waits.
func extraMemberNote(g *waitingGang) string {
	return fmt.Sprintf("gang %s: a member beyond the %d it needs at once; it waits until the gang holds its units, then as a single guest", g.id, g.size)
}
