package machine

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	mchandler "sigs.k8s.io/multicluster-runtime/pkg/handler"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
)

// ensurePriorityClass makes sure the reservation PriorityClass exists and is
// the one the agent would create. It creates a missing one when create is
// true (some machine type is reserved). An existing one is never changed:
// its value and preemptionPolicy are immutable, and deleting it would take
// away the class of pods someone else may run. It returns how an existing
// one differs from the agent's (nil when it does not): the caller holds the
// reservations back and asks the operator to delete it.
//
// c reads from the cache; reader reads from the API server, and is only
// used when the cache has not seen a PriorityClass that already exists.
func (r *Reconciler) ensurePriorityClass(ctx context.Context, c client.Client, reader client.Reader, create bool) ([]string, error) {
	name := r.opts.PriorityClassName
	existing := &schedulingv1.PriorityClass{}
	err := c.Get(ctx, client.ObjectKey{Name: name}, existing)
	switch {
	case err == nil:
		return priorityClassDifferences(existing, reservationPriorityClass(name)), nil
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("getting PriorityClass %s: %w", name, err)
	case !create:
		return nil, nil
	}
	err = c.Create(ctx, reservationPriorityClass(name))
	if err == nil {
		ctrl.LoggerFrom(ctx).V(1).Info("Created the reservation PriorityClass", "priorityClass", name)
		return nil, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating PriorityClass %s: %w", name, err)
	}
	// Created by someone else (or by this agent) since the cache looked: the
	// watch will bring it, but reservations must not be applied under a
	// class nobody has checked.
	if err := reader.Get(ctx, client.ObjectKey{Name: name}, existing); err != nil {
		return nil, fmt.Errorf("getting PriorityClass %s: %w", name, err)
	}
	return priorityClassDifferences(existing, reservationPriorityClass(name)), nil
}

// priorityClassDifferences lists, as "<field> is <found>, want <wanted>",
// the fields of existing that decide how reservation pods are scheduled and
// differ from want: value, preemptionPolicy (unset is what the API server
// defaults it to, PreemptLowerPriority) and globalDefault. The description
// and labels do not matter.
func priorityClassDifferences(existing, want *schedulingv1.PriorityClass) []string {
	var diffs []string
	if existing.Value != want.Value {
		diffs = append(diffs, fmt.Sprintf("value is %d, want %d", existing.Value, want.Value))
	}
	found := ptr.Deref(existing.PreemptionPolicy, corev1.PreemptLowerPriority)
	wanted := ptr.Deref(want.PreemptionPolicy, corev1.PreemptLowerPriority)
	if found != wanted {
		diffs = append(diffs, fmt.Sprintf("preemptionPolicy is %s, want %s", found, wanted))
	}
	if existing.GlobalDefault != want.GlobalDefault {
		diffs = append(diffs, fmt.Sprintf("globalDefault is %t, want %t", existing.GlobalDefault, want.GlobalDefault))
	}
	return diffs
}

// priorityClassMismatchMessage is the Ready condition's message for a
// reservation PriorityClass that differs from the agent's: what differs,
// what the agent does meanwhile, and how to fix it.
func priorityClassMismatchMessage(name string, diffs []string) string {
	return fmt.Sprintf("PriorityClass %s is not the one the agent creates (%s): reservation pods running at it "+
		"could keep guests out or preempt other pods, so every reservation is scaled to 0 until it is fixed. "+
		"Its value and preemptionPolicy cannot be changed: delete PriorityClass %s (kubectl delete priorityclass %s); "+
		"the agent recreates it and restores the reservations",
		name, strings.Join(diffs, "; "), name, name)
}

// holdReservations sets every machine type's reservation replicas to 0: the
// reservation PriorityClass is wrong, and pods admitted under it would keep
// its priority for their lifetime. Reservation pods still pending are being
// scaled away, so they are not reported as unschedulable.
func holdReservations(usage map[string]*typeUsage) {
	for _, u := range usage {
		u.replicas = 0
		u.unschedulable = 0
	}
}

// priorityClassHandler reconciles every Machine of the cluster when the
// reservation PriorityClass is created, changed or deleted: whether the
// reservations may run depends on it, and a deleted one is recreated at once.
func (r *Reconciler) priorityClassHandler(name multicluster.ClusterName, cl cluster.Cluster) mchandler.EventHandler {
	enqueueAll := func(ctx context.Context, q queue) { enqueueMachines(ctx, name, cl, q) }
	return handler.TypedFuncs[client.Object, mcreconcile.Request]{
		CreateFunc: func(ctx context.Context, _ event.TypedCreateEvent[client.Object], q queue) { enqueueAll(ctx, q) },
		UpdateFunc: func(ctx context.Context, _ event.TypedUpdateEvent[client.Object], q queue) { enqueueAll(ctx, q) },
		DeleteFunc: func(ctx context.Context, _ event.TypedDeleteEvent[client.Object], q queue) { enqueueAll(ctx, q) },
	}
}

// isReservationPriorityClass lets through the events of the reservation
// PriorityClass only.
func isReservationPriorityClass(name string) predicate.Predicate {
	return predicate.NewPredicateFuncs(func(obj client.Object) bool { return obj.GetName() == name })
}
