package nodepool

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// Events of a Machine live in the default namespace: it is cluster-scoped.
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

const (
	// ControllerName is the reporting controller of the node-pool events.
	ControllerName = "imperator-nodepool"

	// ReasonNodeJoined is the reason of the Normal event sent when a node
	// reported Missing or Conflict becomes part of the pool.
	ReasonNodeJoined = "NodeJoined"

	// eventAction is the action of every node-pool event.
	eventAction = "ConfigureNode"
)

// nodeEvent is an event about one node of a pool, or, when node is empty,
// about several nodes that changed alike in one reconcile.
type nodeEvent struct {
	eventType string
	reason    string
	node      string
	note      string
}

// nodeEvents are the events for the per-node conditions that changed from
// before (the status as last written) to results. Only changes are reported:
// a node that turns Missing or Conflict gets a Warning, a node that was
// Missing or Conflict and is now part of the pool a Normal event; a node
// listed for the first time and found in order gets none, so that creating a
// large pool is quiet. Nodes that could not be read or written (failed) are
// left out: their condition is a guess. When more than maxNamesInMessage
// nodes change alike at once, one event names them all instead.
func nodeEvents(before []imperatorv1alpha1.NodePoolStatus, results []nodeResult) []nodeEvent {
	previous := make(map[string]imperatorv1alpha1.NodeCondition, len(before))
	for _, status := range before {
		previous[status.Name] = status.Condition
	}
	var missing, conflicting, joined []nodeResult
	for _, result := range results {
		if result.failed {
			continue
		}
		was := previous[result.status.Name]
		now := result.status.Condition
		switch {
		case was == now:
		case now == imperatorv1alpha1.NodeConditionMissing:
			missing = append(missing, result)
		case now == imperatorv1alpha1.NodeConditionConflict:
			conflicting = append(conflicting, result)
		// A node absent from before has the empty condition: it cannot join.
		case was == imperatorv1alpha1.NodeConditionMissing, was == imperatorv1alpha1.NodeConditionConflict:
			joined = append(joined, result)
		}
	}

	var out []nodeEvent
	out = append(out, eventsFor(missing, corev1.EventTypeWarning, imperatorv1alpha1.NodePoolReasonNodeMissing,
		func(r nodeResult) string {
			return fmt.Sprintf("node %s listed in spec.nodePool does not exist", r.status.Name)
		},
		func(r nodeResult) string { return r.status.Name },
		"listed nodes do not exist")...)
	out = append(out, eventsFor(conflicting, corev1.EventTypeWarning, imperatorv1alpha1.NodePoolReasonNodeConflict,
		func(r nodeResult) string {
			reason := r.ownerReason
			if reason == "" {
				reason = ownerListedFirst
			}
			return fmt.Sprintf("node %s is left alone: %s %s and owns it", r.status.Name, ownerName(r), reason)
		},
		func(r nodeResult) string { return fmt.Sprintf("%s (%s)", r.status.Name, ownerName(r)) },
		"nodes are left alone, owned by another Machine")...)
	out = append(out, eventsFor(joined, corev1.EventTypeNormal, ReasonNodeJoined,
		func(r nodeResult) string { return fmt.Sprintf("node %s joined the pool", r.status.Name) },
		func(r nodeResult) string { return r.status.Name },
		"nodes joined the pool")...)
	return out
}

// eventsFor turns the nodes that changed alike into one event each, or into
// a single event naming them when there are more than maxNamesInMessage.
func eventsFor(results []nodeResult, eventType, reason string, note, name func(nodeResult) string, summary string) []nodeEvent {
	if len(results) == 0 {
		return nil
	}
	if len(results) > maxNamesInMessage {
		names := make([]string, 0, len(results))
		for _, r := range results {
			names = append(names, name(r))
		}
		return []nodeEvent{{
			eventType: eventType, reason: reason,
			note: fmt.Sprintf("%d %s: %s", len(results), summary, nameList(names)),
		}}
	}
	out := make([]nodeEvent, 0, len(results))
	for _, r := range results {
		out = append(out, nodeEvent{eventType: eventType, reason: reason, node: r.status.Name, note: note(r)})
	}
	return out
}

// ownerName names the pool a conflicting node belongs to, by its Machine
// when it has one.
func ownerName(r nodeResult) string {
	if r.ownerMachine != "" {
		return fmt.Sprintf("Machine %s (MachineNodePool %s)", r.ownerMachine, r.owner)
	}
	return "MachineNodePool " + r.owner
}

// controllingMachine is the name of the Machine controlling pool, or "".
func controllingMachine(pool *imperatorv1alpha1.MachineNodePool) string {
	ref := metav1.GetControllerOf(pool)
	if ref == nil || ref.Kind != "Machine" || ref.APIVersion != imperatorv1alpha1.GroupVersion.String() {
		return ""
	}
	return ref.Name
}

// recordNodeEvents sends evs about the nodes of pool. They regard the
// Machine controlling the pool, which is what users describe, or the pool
// itself when no Machine controls it. The related object is the node: the
// events library folds events with the same regarding and related objects,
// reason and action into one series whatever their note, so events about
// different nodes must differ in their related object to stay apart. An
// event about several nodes is related to the pool.
func recordNodeEvents(recorder events.EventRecorder, pool *imperatorv1alpha1.MachineNodePool, evs []nodeEvent) {
	if len(evs) == 0 {
		return
	}
	var regarding runtime.Object = pool
	if ref := metav1.GetControllerOf(pool); ref != nil && controllingMachine(pool) != "" {
		regarding = &imperatorv1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: ref.Name, UID: ref.UID}}
	}
	for _, ev := range evs {
		var related runtime.Object = pool
		if ev.node != "" {
			related = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ev.node}}
		}
		recorder.Eventf(regarding, related, ev.eventType, ev.reason, eventAction, "%s", ev.note)
	}
}
