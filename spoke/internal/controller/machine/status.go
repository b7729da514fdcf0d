package machine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/controller/conditions"
)

// patchStatus computes the Machine's status from what the reconcile learnt
// and its error, and patches it, once, when it changed. Conditions that turn
// True (or change their message while True) are also sent as Warning events.
func (r *Reconciler) patchStatus(ctx context.Context, c client.Client, recorder events.EventRecorder,
	machine *imperatorv1alpha1.Machine, state *reconcileState, reconcileErr error) error {
	before := machine.DeepCopy()
	setStatus(&machine.Status, machine, state, reconcileErr)
	if equality.Semantic.DeepEqual(before.Status, machine.Status) {
		return nil
	}
	if err := c.Status().Patch(ctx, machine, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			// The Machine changed since the cache gave it to us; that change
			// has queued the Machine again, and the next reconcile writes the
			// status from the newer version.
			ctrl.LoggerFrom(ctx).V(1).Info("Machine changed while reconciling, status left to the next reconcile")
			return nil
		}
		return fmt.Errorf("patching Machine status: %w", err)
	}
	ctrl.LoggerFrom(ctx).V(2).Info("Patched Machine status", "availableMachines", machine.Status.AvailableMachines)
	for _, t := range []string{imperatorv1alpha1.ConditionInsufficientCapacity, imperatorv1alpha1.ConditionOverSubscribed} {
		was := meta.FindStatusCondition(before.Status.Conditions, t)
		now := meta.FindStatusCondition(machine.Status.Conditions, t)
		switch {
		case now == nil:
		case now.Status == metav1.ConditionTrue && (was == nil || was.Status != metav1.ConditionTrue || was.Message != now.Message):
			recorder.Eventf(machine, nil, corev1.EventTypeWarning, now.Reason, "Reconcile", "%s", now.Message)
		case now.Status == metav1.ConditionFalse && was != nil && was.Status == metav1.ConditionTrue:
			recorder.Eventf(machine, nil, corev1.EventTypeNormal, now.Reason, "Reconcile", "%s", now.Message)
		}
	}
	if e, ok := strayGuestsEvent(meta.FindStatusCondition(before.Status.Conditions, imperatorv1alpha1.ConditionStrayGuests),
		meta.FindStatusCondition(machine.Status.Conditions, imperatorv1alpha1.ConditionStrayGuests)); ok {
		recorder.Eventf(machine, nil, e.eventType, e.reason, "Reconcile", "%s", e.note)
	}
	if e, ok := priorityClassEvent(meta.FindStatusCondition(before.Status.Conditions, imperatorv1alpha1.ConditionReady),
		meta.FindStatusCondition(machine.Status.Conditions, imperatorv1alpha1.ConditionReady), r.opts.PriorityClassName); ok {
		recorder.Eventf(machine, nil, e.eventType, e.reason, "Reconcile", "%s", e.note)
	}
	return nil
}

// transitionEvent is an event sent when a condition changes.
type transitionEvent struct{ eventType, reason, note string }

// strayGuestsEvent is the event for a change of the StrayGuests condition
// from was to now: a Warning when it turns True, a Normal one when it turns
// False. Its message changes with every stray pod created or deleted, which
// a tenant controls: those changes send none.
func strayGuestsEvent(was, now *metav1.Condition) (transitionEvent, bool) {
	isTrue := func(c *metav1.Condition) bool { return c != nil && c.Status == metav1.ConditionTrue }
	switch {
	case isTrue(now) && !isTrue(was):
		return transitionEvent{corev1.EventTypeWarning, now.Reason, now.Message}, true
	case isTrue(was) && now != nil && !isTrue(now):
		return transitionEvent{corev1.EventTypeNormal, now.Reason, now.Message}, true
	}
	return transitionEvent{}, false
}

// priorityClassEvent is the event for a change of the Ready condition from
// was to now that concerns the reservation PriorityClass: a Warning when it
// turns out to be missing or wrong (or wrong in another way), a Normal one
// when it is right again. Other changes send none, nor does a reconcile that
// finds it as missing or wrong as before.
func priorityClassEvent(was, now *metav1.Condition, priorityClass string) (transitionEvent, bool) {
	problem := func(c *metav1.Condition) bool {
		return c != nil && (c.Reason == imperatorv1alpha1.ReasonReservationPriorityClassMismatch ||
			c.Reason == imperatorv1alpha1.ReasonReservationPriorityClassMissing)
	}
	switch {
	case problem(now) && (!problem(was) || was.Message != now.Message):
		return transitionEvent{corev1.EventTypeWarning, now.Reason, now.Message}, true
	case problem(was) && !problem(now) && now != nil && now.Status == metav1.ConditionTrue:
		return transitionEvent{corev1.EventTypeNormal, now.Reason,
			fmt.Sprintf("PriorityClass %s is in place again: %s", priorityClass, now.Message)}, true
	}
	return transitionEvent{}, false
}

// setStatus writes the usage and the conditions into status. Usage is kept as
// it was when it could not be counted.
func setStatus(status *imperatorv1alpha1.MachineStatus, machine *imperatorv1alpha1.Machine, state *reconcileState, reconcileErr error) {
	defer summarize(status, machine)
	status.ObservedGeneration = machine.Generation
	meta.SetStatusCondition(&status.Conditions, readyCondition(machine, state, reconcileErr))
	if state.readyReason == imperatorv1alpha1.ReasonMachineGroupMissing {
		status.AvailableMachines = nil
		meta.RemoveStatusCondition(&status.Conditions, imperatorv1alpha1.ConditionInsufficientCapacity)
		meta.RemoveStatusCondition(&status.Conditions, imperatorv1alpha1.ConditionOverSubscribed)
		meta.RemoveStatusCondition(&status.Conditions, imperatorv1alpha1.ConditionStrayGuests)
		return
	}
	if state.usage == nil {
		return
	}
	status.AvailableMachines = make([]imperatorv1alpha1.AvailableMachine, 0, len(machine.Spec.MachineTypes))
	for _, t := range machine.Spec.MachineTypes {
		u := imperatorv1alpha1.Usage{Maximum: t.Available}
		if counted := state.usage[t.Name]; counted != nil {
			u = counted.Usage
		}
		status.AvailableMachines = append(status.AvailableMachines, imperatorv1alpha1.AvailableMachine{Name: t.Name, Usage: u})
	}
	meta.SetStatusCondition(&status.Conditions, capacityCondition(machine, state))
	meta.SetStatusCondition(&status.Conditions, overSubscribedCondition(machine, state))
	meta.SetStatusCondition(&status.Conditions, strayGuestsCondition(machine, state))
}

func readyCondition(machine *imperatorv1alpha1.Machine, state *reconcileState, reconcileErr error) metav1.Condition {
	cond := metav1.Condition{
		Type:               imperatorv1alpha1.ConditionReady,
		Status:             metav1.ConditionFalse,
		ObservedGeneration: machine.Generation,
	}
	var conflict *conflictError
	switch {
	case state.readyReason != "":
		cond.Reason, cond.Message = state.readyReason, state.readyMessage
	case errors.As(reconcileErr, &conflict):
		cond.Reason, cond.Message = imperatorv1alpha1.ReasonReservationConflict, conflict.Error()
	case reconcileErr != nil:
		cond.Reason, cond.Message = imperatorv1alpha1.ReasonReconcileFailed, reconcileErr.Error()
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, imperatorv1alpha1.ReasonReservationsReconciled
		if len(state.served) == 0 {
			cond.Message = "no machine type is served by a node of spec.nodePool: nothing is reserved"
		} else {
			cond.Message = "reservations in place for " + strings.Join(state.served, ", ")
		}
	}
	return cond
}

// capacityCondition is True when reservation pods of a served machine type
// cannot be scheduled, are bound to nodes that are not node-pool=ready, or a
// machine type with available units is served by no node. It never feeds
// back into the number of reservations.
func capacityCondition(machine *imperatorv1alpha1.Machine, state *reconcileState) metav1.Condition {
	served := make(map[string]bool, len(state.served))
	for _, name := range state.served {
		served[name] = true
	}
	var withoutGPUs, unschedulable, offPool, unserved []string
	for _, t := range machine.Spec.MachineTypes {
		u := state.usage[t.Name]
		if nodes := state.withoutGPUs[t.Name]; len(nodes) > 0 {
			withoutGPUs = append(withoutGPUs, fmt.Sprintf("%s: ready pool nodes advertise 0 %s, so its reservation pods cannot be scheduled there: %s (is the GPU driver and device plugin running on them? docs/gpu-operator.md)",
				t.Name, t.Spec.GPU.Type, strings.Join(nodes, ", ")))
		}
		switch {
		case !served[t.Name] && t.Available > 0:
			unserved = append(unserved, fmt.Sprintf("%s: no node of spec.nodePool serves it, %d available cannot be reserved", t.Name, t.Available))
		case served[t.Name] && u != nil && u.unschedulable > 0:
			unschedulable = append(unschedulable, fmt.Sprintf("%s: %d of %d reservation pods cannot be scheduled", t.Name, u.unschedulable, u.replicas))
		}
		if u != nil && u.offPool > 0 {
			offPool = append(offPool, fmt.Sprintf("%s: %d reservation pods on nodes that are not ready, not reserved: %s",
				t.Name, u.offPool, strings.Join(u.offPoolNodes, ", ")))
		}
	}
	return conditions.FirstFailing{
		Type:               imperatorv1alpha1.ConditionInsufficientCapacity,
		ObservedGeneration: machine.Generation,
		Failing:            metav1.ConditionTrue,
		Problems: []conditions.Problem{
			{Reason: imperatorv1alpha1.ReasonPoolNodesWithoutGPUs, Parts: withoutGPUs},
			{Reason: imperatorv1alpha1.ReasonReservationsUnschedulable, Parts: unschedulable},
			{Reason: imperatorv1alpha1.ReasonReservationsOnUnreadyNodes, Parts: offPool},
			{Reason: imperatorv1alpha1.ReasonNoNodePool, Parts: unserved},
		},
		OKReason:  imperatorv1alpha1.ReasonCapacitySufficient,
		OKMessage: "every reservation pod is scheduled",
	}.Condition()
}

// overSubscribedCondition is True when the guests of a machine type hold
// more units than it makes available: bound guests, guests let through the
// slot gate and not bound yet, and leaving guests still on their node
// (typeUsage.held). That happens only when available is lowered below the
// guests in place, or with guests from before the slot gate: nobody is
// evicted, the condition stays until enough of them leave. Guests waiting at
// the gate are a queue, not an oversubscription: they hold nothing.
func overSubscribedCondition(machine *imperatorv1alpha1.Machine, state *reconcileState) metav1.Condition {
	var over []string
	for _, t := range machine.Spec.MachineTypes {
		u := state.usage[t.Name]
		if u == nil || u.held() <= t.Available {
			continue
		}
		over = append(over, fmt.Sprintf("%s: guests hold %d units of %d available (%d bound, %d being placed, %d leaving), %d queued",
			t.Name, u.held(), t.Available, u.Used, u.granted, u.leaving, u.Queued))
	}
	return conditions.FirstFailing{
		Type:               imperatorv1alpha1.ConditionOverSubscribed,
		ObservedGeneration: machine.Generation,
		Failing:            metav1.ConditionTrue,
		Problems:           []conditions.Problem{{Reason: imperatorv1alpha1.ReasonGuestsExceedAvailable, Parts: over}},
		OKReason:           imperatorv1alpha1.ReasonWithinAvailable,
		OKMessage:          "no machine type has guests holding more units than available",
	}.Condition()
}

// strayNamespacesNamed is how many namespaces of a type's stray pods the
// StrayGuests message names, in name order; the rest are counted.
const strayNamespacesNamed = 3

// strayGuestsCondition is True while pods labelled as guests of a machine
// type of the Machine were not admitted by the Pod Resource Injector
// (admittedGuest): they count as nothing, and the message says so per type,
// with how many there are and a few of their namespaces. It depends on
// those pods only, so it is written when one comes or goes, never at steady
// state.
func strayGuestsCondition(machine *imperatorv1alpha1.Machine, state *reconcileState) metav1.Condition {
	var strays []string
	for _, t := range machine.Spec.MachineTypes {
		u := state.usage[t.Name]
		if u == nil || u.strays == 0 {
			continue
		}
		namespaces := make([]string, 0, len(u.strayNamespaces))
		for ns := range u.strayNamespaces {
			namespaces = append(namespaces, ns)
		}
		slices.Sort(namespaces)
		named := strings.Join(namespaces[:min(len(namespaces), strayNamespacesNamed)], ", ")
		if more := len(namespaces) - strayNamespacesNamed; more > 0 {
			named += fmt.Sprintf(" and %d more", more)
		}
		strays = append(strays, fmt.Sprintf("%s: %d pods labelled as its guests were not admitted by the pod injector "+
			"(no %s record for this group and type) and count as nothing (namespaces %s)",
			t.Name, u.strays, imperatorv1alpha1.InjectedAnnotation, named))
	}
	return conditions.FirstFailing{
		Type:               imperatorv1alpha1.ConditionStrayGuests,
		ObservedGeneration: machine.Generation,
		Failing:            metav1.ConditionTrue,
		Problems:           []conditions.Problem{{Reason: imperatorv1alpha1.ReasonGuestsNotAdmitted, Parts: strays}},
		OKReason:           imperatorv1alpha1.ReasonNoStrayGuests,
		OKMessage:          "every pod labelled as a guest of the group was admitted by the pod injector",
	}.Condition()
}
