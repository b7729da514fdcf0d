package machine

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/controller/capacityhold"
)

// The count itself: per machine type of a group, what the Machine's pods
// hold, wait for and release (podCounts), a pure function of the pods and
// of what countUsage (usage_reads.go) reads of the cluster for it.

// typeUsage is what the agent observed of one machine type of a group.
type typeUsage struct {
	imperatorv1alpha1.Usage
	// replicas is the number of reservation pods the type should run.
	replicas int32
	// unschedulable counts reservation pods the StatefulSet keeps (ordinal
	// below replicas) that the scheduler could not place, beyond those that
	// the pods of the type still terminating on its nodes will make room for.
	unschedulable int32
	// unschedulableAny counts the same whatever the pods' ordinal, beyond
	// those the type's terminating pods will make room for, and the unbound
	// ones not tried yet while the type has no node-pool=ready node: with
	// an active CapacityHold the StatefulSet keeps pods above replicas, and
	// one that cannot be placed holds nothing for the hold either.
	unschedulableAny int32
	// terminating counts the type's bound pods (guests and reservations) that
	// are terminating: they still hold their node's resources.
	terminating int32
	// offPool counts the reservation pods bound to a node that does not
	// carry node-pool=ready (not-ready, maintenance, or gone from the
	// cache): a guest cannot be placed there, so they are not reserved.
	offPool int32
	// offPoolNodes are those nodes as "<node> (<node-pool state>)", sorted.
	offPoolNodes []string
	// granted counts the guests without the slot gate that are not bound
	// yet: the scheduler is placing them into units already theirs.
	granted int32
	// leaving counts the type's bound guests that are terminating: their
	// units are not free until they are gone.
	leaving int32
	// reservationPods counts the type's reservation pods that still exist
	// and have not finished, bound or not, terminating or not.
	reservationPods int32
	// stuck are the reservation pods among them terminating since before
	// stuckBefore, as namespace/name, sorted: the queue no longer waits for
	// them.
	stuck []string
	// stuckUIDs and stuckPodNames are their UIDs and namespace/names in the
	// order found, for the one Warning event per pod.
	stuckUIDs     []types.UID
	stuckPodNames []string
	// nextStuck is the earliest deletion time of the type's other
	// terminating reservation pods, zero when there is none: the queue looks
	// again stuckReservationAfter later.
	nextStuck time.Time
	// gated are the guests held at the slot gate that a node-pool=ready
	// node of the type can take, in no order: they lower the replicas and
	// are the line the holds count.
	gated []*corev1.Pod
	// unplaceable are the other guests at the slot gate, those that no
	// node-pool=ready node of the type can take now although the type has
	// some (Usage.Unplaceable): they keep their place in line but hold
	// nothing, so the replicas and the holds leave them out.
	unplaceable []*corev1.Pod
	// noReadyNode is set when the type has guests at the gate and no
	// node-pool=ready node at all (not ready, in maintenance, cordoned):
	// nothing of the type can be placed, reservation or guest, and the
	// gated guests keep their claim on the units (in gated), so that a node
	// coming back goes to them before the reservation grows into it. None
	// of them may be let through meanwhile.
	noReadyNode bool
	// gangHolding counts, by gang, its members that hold a unit (bound or
	// granted).
	gangHolding map[gangID]int32
	// gangTypes are, by gang, the machine types of the group its active
	// members ask for, sorted; shared by every type of the group.
	gangTypes map[gangID][]string
	// gangs maps each guest of gated that belongs to a gang that units
	// alone can let through to it (formGangs).
	gangs map[types.UID]*waitingGang
	// parked are the members of the gangs that cannot be let through
	// whatever the free units, with what they are told: they left gated and
	// unplaceable, and count in Usage.Unplaceable.
	parked []queuedGuest
	// holding are the guests holding a unit (bound, granted or leaving)
	// that quote a CapacityHold: its claimed units.
	holding []*corev1.Pod
	// holds is set when the type has an active CapacityHold, from
	// capacityhold.PlanType (holds.go).
	holds *holdLine
	// stranded are gated guests of a namespace that is not opted in (any
	// more): they are not let through and count nowhere.
	stranded []*corev1.Pod
	// strays counts the active pods labelled as guests of the type that the
	// Pod Resource Injector did not admit (admittedGuest): they count
	// nowhere, and the StrayGuests condition names them.
	strays int32
	// strayNamespaces are their namespaces, each once.
	strayNamespaces map[string]struct{}
}

// addStray records a pod labelled as a guest that the injector did not
// admit.
func (u *typeUsage) addStray(pod *corev1.Pod) {
	u.strays++
	if u.strayNamespaces == nil {
		u.strayNamespaces = map[string]struct{}{}
	}
	u.strayNamespaces[pod.Namespace] = struct{}{}
}

// addHolding records a guest that holds a unit if it quotes a
// CapacityHold.
func (u *typeUsage) addHolding(pod *corev1.Pod) {
	if capacityhold.ClaimOf(pod) != "" {
		u.holding = append(u.holding, pod)
	}
}

// held is the units of the type that guests hold or were promised.
func (u *typeUsage) held() int32 { return u.Used + u.granted + u.leaving }

// releasing is true while a reservation pod beyond the replicas, scaled
// away for a waiting guest, still exists and is not stuck: its unit is not
// free yet.
func (u *typeUsage) releasing() bool {
	return u.reservationPods-int32(len(u.stuck)) > u.replicas
}

// stuckReservationAfter is how long after its deletion time (the API
// server's deletionTimestamp, which already includes the grace period) a
// terminating reservation pod is deemed stuck: a finalizer that nobody
// removes, or a kubelet that does not answer. Reservation pods have no grace
// period and pause exits at once, so a healthy one is gone within a second
// or two. The queue then stops waiting for it: its unit is not counted free
// anywhere (it is neither reserved nor waited for, and it keeps occupying
// its node until it is really gone), but the next guest is let through, and
// the scheduler places it in any unit of the type with room, preempting
// another reservation pod (which the StatefulSet then brings back where
// there is room) or waiting Pending until one is. Waiting on the stuck pod
// instead would freeze the type's whole line for as long as it is stuck.
const stuckReservationAfter = 30 * time.Second

// nodeStateMissing is the node-pool state reported for a node missing from
// the cache.
const nodeStateMissing = "missing"

// lookups are what podCounts reads of the cluster besides the pods.
type lookups struct {
	// enabled tells whether a namespace is opted in to guest injection.
	enabled func(namespace string) bool
	// nodeState returns the node-pool label of a node, or nodeStateMissing.
	nodeState func(node string) string
	// readyNodes returns the node-pool=ready nodes of a machine type, those
	// a guest of the type may be placed on (readyNodesOf).
	readyNodes func(machineType string) []*corev1.Node
	// reservationSets are the reservation StatefulSets of the group that the
	// Machine controls, name by UID (controlledReservationSets): only their
	// pods are its reservation pods (ownReservation).
	reservationSets map[types.UID]string
}

// podCounts counts the pods of one machine group per machine type of
// available (the spec's available units by type name). Reservation pods
// count only when ownReservation says they are the Machine's: the original
// Imperator's, labelled alike in the same namespace during a migration,
// count nowhere (neither reserved, off the pool, unschedulable nor stuck;
// labelled as reservations, not as guests or strays either). A pod labelled
// as a guest is one only when the injector admitted it (admittedGuest); the
// others are strays, counted nowhere and only reported. Guests count whatever their
// namespace's labels say now: a guest admitted while its namespace was opted
// in holds its unit until it is gone, also after the namespace is opted out
// (not counting it would grow the reservation into its unit and let the next
// guest in past available). Only a guest still at the slot gate in a
// namespace for which enabled returns false is not let through and counts
// nowhere (stranded). A guest at the slot gate that none of the ready nodes
// of its type can take (placeableOn; by its own nodeSelector, node affinity
// or tolerations) is queued and unplaceable: it waits in line and holds no
// unit. Pods of other types are ignored. nodeState returns the
// node-pool label of a node, or nodeStateMissing: a bound reservation pod
// is reserved only on a node-pool=ready node, the only nodes a guest's
// injected affinity admits.
//
// A terminating reservation pod deleted (deletionTimestamp) before
// stuckBefore is stuck; a zero stuckBefore deems none stuck.
func podCounts(pods []corev1.Pod, group, agentNamespace string, look lookups, available map[string]int32,
	stuckBefore time.Time) map[string]*typeUsage {
	usage := make(map[string]*typeUsage, len(available))
	for name, units := range available {
		usage[name] = &typeUsage{Usage: imperatorv1alpha1.Usage{Maximum: units}}
	}
	var reservations []*corev1.Pod
	gangTypes := map[gangID][]string{}
	for i := range pods {
		pod := &pods[i]
		u := usage[pod.Labels[imperatorv1alpha1.MachineTypeKey]]
		if u == nil || pod.Labels[imperatorv1alpha1.MachineGroupKey] != group {
			continue
		}
		role := imperatorv1alpha1.PodRole(pod.Labels[imperatorv1alpha1.PodRoleKey])
		switch {
		case role == imperatorv1alpha1.PodRoleReservation && !ownReservation(pod, group, agentNamespace, look.reservationSets):
			continue
		case role == imperatorv1alpha1.PodRoleGuest && !admittedGuest(pod):
			if active(pod) {
				u.addStray(pod)
			}
			continue
		case role == imperatorv1alpha1.PodRoleGuest && active(pod) && !bound(pod) && gated(pod) && !look.enabled(pod.Namespace):
			u.stranded = append(u.stranded, pod)
			continue
		case !active(pod):
			u.countInactive(pod, role, stuckBefore)
			continue
		}
		switch role {
		case imperatorv1alpha1.PodRoleReservation:
			u.reservationPods++
			if !bound(pod) {
				reservations = append(reservations, pod)
				break
			}
			u.countBoundReservation(pod, look)
		case imperatorv1alpha1.PodRoleGuest:
			u.countGangMember(pod, gangTypes)
			u.countGuest(pod, look)
		}
	}
	for name, u := range usage {
		u.replicas = reservationReplicas(available[name], u.Usage)
		u.gangTypes = gangTypes
	}
	// Pods at or above the replicas are being scaled away: whether they fit
	// does not matter.
	for _, pod := range reservations {
		machineType := pod.Labels[imperatorv1alpha1.MachineTypeKey]
		u := usage[machineType]
		if !unschedulable(pod) {
			// Not tried yet: it can hold a unit only on a ready node.
			if len(look.readyNodes(machineType)) == 0 {
				u.unschedulableAny++
			}
			continue
		}
		u.unschedulableAny++
		ordinal, ok := podOrdinal(pod, imperatorv1alpha1.ReservationName(machineType, group))
		if ok && ordinal < u.replicas {
			u.unschedulable++
		}
	}
	// A guest that leaves holds its slot for its grace period: the
	// reservation taking it back waits, it does not lack capacity.
	for _, u := range usage {
		u.unschedulable = max(0, u.unschedulable-u.terminating)
		u.unschedulableAny = max(0, u.unschedulableAny-u.terminating)
		slices.Sort(u.offPoolNodes)
		slices.Sort(u.stuck)
	}
	return usage
}

// countInactive counts a pod that is terminating or finished: a bound one
// still terminating holds its node (a guest its unit, as leaving), and a
// reservation pod deleted before stuckBefore is stuck.
func (u *typeUsage) countInactive(pod *corev1.Pod, role imperatorv1alpha1.PodRole, stuckBefore time.Time) {
	if pod.DeletionTimestamp != nil && bound(pod) && !finished(pod) {
		u.terminating++
		if role == imperatorv1alpha1.PodRoleGuest {
			u.leaving++
			u.addHolding(pod)
		}
	}
	if role != imperatorv1alpha1.PodRoleReservation || finished(pod) {
		return
	}
	u.reservationPods++
	switch deleted := pod.DeletionTimestamp.Time; {
	case deleted.Before(stuckBefore):
		u.stuck = append(u.stuck, pod.Namespace+"/"+pod.Name)
		u.stuckUIDs = append(u.stuckUIDs, pod.UID)
		u.stuckPodNames = append(u.stuckPodNames, pod.Namespace+"/"+pod.Name)
	case u.nextStuck.IsZero() || deleted.Before(u.nextStuck):
		u.nextStuck = deleted
	}
}

// countBoundReservation counts a bound reservation pod as reserved on a
// node-pool=ready node, else as off the pool, naming its node's state.
func (u *typeUsage) countBoundReservation(pod *corev1.Pod, look lookups) {
	state := look.nodeState(pod.Spec.NodeName)
	if state == string(imperatorv1alpha1.NodePoolReady) {
		u.Reserved++
		return
	}
	if state == "" {
		state = "no " + imperatorv1alpha1.NodePoolKey + " label"
	}
	u.offPool++
	if node := pod.Spec.NodeName + " (" + state + ")"; !slices.Contains(u.offPoolNodes, node) {
		u.offPoolNodes = append(u.offPoolNodes, node)
	}
}

// countGangMember records the machine types of a guest's gang and, when it
// holds a unit (bound or let through), counts it for its gang.
func (u *typeUsage) countGangMember(pod *corev1.Pod, gangTypes map[gangID][]string) {
	id, _, _, ok := gangMembership(pod)
	if !ok {
		return
	}
	machineType := pod.Labels[imperatorv1alpha1.MachineTypeKey]
	if !slices.Contains(gangTypes[id], machineType) {
		gangTypes[id] = append(gangTypes[id], machineType)
		slices.Sort(gangTypes[id])
	}
	if bound(pod) || !gated(pod) {
		if u.gangHolding == nil {
			u.gangHolding = map[gangID]int32{}
		}
		u.gangHolding[id]++
	}
}

// countGuest counts an active guest: bound, it is used; at the slot gate,
// waiting and queued, and unplaceable when no ready node of its type can
// take it; let through and not bound yet, waiting and granted.
func (u *typeUsage) countGuest(pod *corev1.Pod, look lookups) {
	switch {
	case bound(pod):
		u.Used++
		u.addHolding(pod)
	case gated(pod):
		u.Waiting++
		u.Queued++
		nodes := look.readyNodes(pod.Labels[imperatorv1alpha1.MachineTypeKey])
		u.noReadyNode = len(nodes) == 0
		if u.noReadyNode || placeableOn(nodes, pod) {
			u.gated = append(u.gated, pod)
			return
		}
		u.Unplaceable++
		u.unplaceable = append(u.unplaceable, pod)
	default:
		u.Waiting++
		u.granted++
		u.addHolding(pod)
	}
}

// reservationReplicas is how many units stay reserved: what is available and
// neither used nor asked for by a waiting guest, gated or not, that a ready
// node can take. It depends on guests only, so reservation pods that cannot
// be scheduled never make it move. A gated guest lowers it before its gate
// is removed: the reservation pod goes first, and the guest is let through
// into the unit it left; a guest that leaves while another waits lets the
// waiting one have its unit instead of the reservation. An unplaceable
// guest (one whose nodeSelector, say, matches no ready node of the type)
// does not lower it: it would not be let through anyway, and it costs its
// creator nothing, so counting it would let anyone who may create guests
// empty the reservation.
func reservationReplicas(available int32, u imperatorv1alpha1.Usage) int32 {
	return max(0, available-u.Used-(u.Waiting-u.Unplaceable))
}
