package machine

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// scope is what the phases of one Machine's reconcile share: the Machine
// and its cluster, what the phases learn (state, for the status) and how
// the reconcile ends.
type scope struct {
	cluster   cluster.Cluster
	client    client.Client
	recorder  events.EventRecorder
	machine   *imperatorv1alpha1.Machine
	group     string
	seriesKey string
	state     *reconcileState

	podGroups *groupSizes
	// typeGone are the gated guests of types the Machine no longer offers.
	typeGone []*corev1.Pod
	// untilExpiry is when the next hold of the group expires.
	untilExpiry time.Duration
	// conflict is set when another Machine controls one of the group's
	// reservation objects.
	conflict *conflictError
	// retryGrants is set when the grant fence held grants back: the
	// reconcile runs again within grantRetry.
	retryGrants bool

	// result and errs are what Reconcile returns: a phase that stops the
	// reconcile sets result; errs gathers the errors of every phase run.
	result ctrl.Result
	errs   []error
}

// phase is one step of a Machine's reconcile; it reports whether the
// reconcile stops after it (its error, if any, is in s.errs).
type phase func(ctx context.Context, s *scope) (stop bool)

// phases are the steps of a reconcile, in order. The first three stop the
// reconcile on an error (what follows needs their answer); the others run
// whatever the one before met, and the reconcile returns every error.
func (r *Reconciler) phases() []phase {
	return []phase{
		r.requireGroup,
		r.count,
		r.settleHolds,
		r.checkReservationPriorityClass,
		r.scaleReservations,
		r.openGates,
		r.tellStrandedGuests,
	}
}

// fail stops the reconcile with err.
func (s *scope) fail(err error) bool {
	s.errs = append(s.errs, err)
	return true
}

// requireGroup stops a Machine without a machine group, removing its
// reservations: it serves nobody.
func (r *Reconciler) requireGroup(ctx context.Context, s *scope) bool {
	if s.group != "" {
		return false
	}
	s.state.readyReason = imperatorv1alpha1.ReasonMachineGroupMissing
	s.state.readyMessage = fmt.Sprintf("label %s is not set: nothing is reserved", imperatorv1alpha1.MachineGroupKey)
	ctrl.LoggerFrom(ctx).V(1).Info("Machine has no machine group, removing its reservations", "machine", klog.KObj(s.machine))
	if err := r.prune(ctx, s.client, s.machine, nil); err != nil {
		s.errs = append(s.errs, err)
	}
	return true
}

// count counts the group's reservation pods and guests per machine type
// (usage.go), forms the gangs, and finds the pool nodes without the type's
// GPUs and the reservation pods stuck terminating.
func (r *Reconciler) count(ctx context.Context, s *scope) bool {
	usage, typeGone, err := r.countUsage(ctx, s.client, s.machine, s.group)
	if err != nil {
		return s.fail(err)
	}
	s.typeGone = typeGone
	r.expectations.observe(s.seriesKey, usage)
	s.podGroups = newGroupSizes(s.cluster.GetCache(), s.cluster.GetAPIReader(), r.podGroups)
	for name, u := range usage {
		formGangs(u, name, s.podGroups.of(ctx))
	}
	s.state.usage = usage
	s.state.served = servedTypes(s.machine)
	if s.state.withoutGPUs, err = nodesWithoutGPUs(ctx, s.client, s.machine, s.group, usage, s.state.served); err != nil {
		return s.fail(err)
	}
	r.warnStuckReservations(s.seriesKey, s.recorder, s.machine, usage)
	return false
}

// settleHolds decides the group's capacity holds and writes their statuses
// (holds.go) before any reservation pod or guest moves; a hold whose
// status could not be written yet stops the reconcile, retried shortly.
func (r *Reconciler) settleHolds(ctx context.Context, s *scope) bool {
	untilExpiry, unsettled, err := r.planHolds(ctx, s.client, s.recorder, s.machine, s.group, s.state.usage, s.state.served, r.holdsNow())
	if err != nil || unsettled {
		s.result = ctrl.Result{RequeueAfter: holdConflictRetry}
		if err != nil {
			s.errs = append(s.errs, err)
		}
		return true
	}
	s.untilExpiry = untilExpiry
	return false
}

// checkReservationPriorityClass holds the reservations where they are when
// the reservation PriorityClass is missing, and at 0 when it differs from
// the shipped one (they come back as soon as it is right). It is checked
// for every Machine, also one that serves nothing yet, so that each one
// the agent manages tells of a missing or wrong class.
func (r *Reconciler) checkReservationPriorityClass(ctx context.Context, s *scope) bool {
	log := ctrl.LoggerFrom(ctx)
	check, err := r.checkPriorityClass(ctx, s.client)
	if err != nil {
		return s.fail(err)
	}
	switch {
	case check.missing:
		current, err := r.reservationReplicas(ctx, s.client, s.machine, s.group, s.state.served)
		if err != nil {
			return s.fail(err)
		}
		keepReservations(s.state.usage, current)
		s.state.readyReason = imperatorv1alpha1.ReasonReservationPriorityClassMissing
		s.state.readyMessage = priorityClassMissingMessage(r.opts.PriorityClassName)
		log.V(1).Info("Reservation PriorityClass is missing, adding no reservation pod",
			"machine", klog.KObj(s.machine), "priorityClass", r.opts.PriorityClassName)
	case len(check.differences) > 0:
		holdReservations(s.state.usage)
		s.state.readyReason = imperatorv1alpha1.ReasonReservationPriorityClassMismatch
		s.state.readyMessage = priorityClassMismatchMessage(r.opts.PriorityClassName, check.differences)
		log.V(1).Info("Reservation PriorityClass differs from the shipped one, holding reservations at 0",
			"machine", klog.KObj(s.machine), "priorityClass", r.opts.PriorityClassName, "differences", check.differences)
	}
	return false
}

// scaleReservations applies each served type's reservation StatefulSet and
// Service at the replicas counting left (reservation.go) and prunes those
// of types no longer served. A reservation object another Machine controls
// (two Machines of one group: the validator refuses the second, but two
// admissions can race) is remembered as the conflict.
func (r *Reconciler) scaleReservations(ctx context.Context, s *scope) bool {
	keep := make(map[string]bool, len(s.state.served))
	var errs []error
	for _, name := range s.state.served {
		keep[imperatorv1alpha1.ReservationName(name, s.group)] = true
		if err := r.applyReservation(ctx, s.client, s.recorder, s.machine, s.group, s.machine.MachineType(name), s.state.usage[name].replicas); err != nil {
			errs = append(errs, err)
		}
	}
	errors.As(errors.Join(errs...), &s.conflict)
	s.errs = append(s.errs, errs...)
	s.errs = append(s.errs, r.prune(ctx, s.client, s.machine, keep))
	return false
}

// openGates lets guests through the slot gate (grant.go), after the
// reservations were scaled for every waiting guest: the gates open only
// once the reservation pods are gone. A Machine whose reservation another
// Machine controls admits no guest: the group's guests are the other's,
// and two Machines granting at once could let in more than either has
// available. When nobody runs the group's line, its guests learn why from
// this Machine; with another Machine controlling the reservations, that
// one tells them their place.
func (r *Reconciler) openGates(ctx context.Context, s *scope) bool {
	switch {
	case s.conflict == nil:
		fence := newGrantFence(s.cluster.GetAPIReader(), s.machine)
		err := r.grantSlots(ctx, s.client, s.recorder, s.machine, s.state.usage, s.seriesKey, s.podGroups, fence)
		if errors.Is(err, errGrantStale) {
			// Decided again at once, from what the cache shows by then.
			ctrl.LoggerFrom(ctx).V(1).Info("Grants held back", "reason", errGrantStale.Error())
			s.retryGrants = true
			err = withoutStale(err)
		}
		s.errs = append(s.errs, err)
	case s.conflict.otherMachine == "":
		s.errs = append(s.errs, tellNotOwner(ctx, s.client, s.recorder, s.machine, s.state.usage, s.conflict))
	}
	return false
}

// tellStrandedGuests tells gated guests that wait in vain (their namespace
// opted out, their type gone) why.
func (r *Reconciler) tellStrandedGuests(ctx context.Context, s *scope) bool {
	s.errs = append(s.errs, r.tellStranded(ctx, s.client, s.recorder, s.machine, s.state.usage, s.typeGone))
	return false
}

// servedTypes are the machine types of the spec that a node pool entry
// serves, in the order of spec.machineTypes.
func servedTypes(machine *imperatorv1alpha1.Machine) []string {
	referenced := map[string]bool{}
	for _, pool := range machine.Spec.NodePool {
		for _, ref := range pool.MachineType {
			referenced[ref.Name] = true
		}
	}
	var served []string
	for _, t := range machine.Spec.MachineTypes {
		if referenced[t.Name] {
			served = append(served, t.Name)
		}
	}
	return served
}
