package machine

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	mchandler "sigs.k8s.io/multicluster-runtime/pkg/handler"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// priorityClassCheck is what the reservations make of the reservation
// PriorityClass: missing, different from the one deploy/spoke ships, or
// (zero value) right.
type priorityClassCheck struct {
	missing bool
	// differences are how an existing one differs, see
	// priorityClassDifferences.
	differences []string
}

// checkPriorityClass reads the reservation PriorityClass from the cache and
// compares it with the one reservations need. The agent never writes it:
// deploy/spoke ships it, and its value and preemptionPolicy are immutable
// anyway.
func (r *Reconciler) checkPriorityClass(ctx context.Context, c client.Reader) (priorityClassCheck, error) {
	name := r.opts.PriorityClassName
	existing := &schedulingv1.PriorityClass{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, existing); err != nil {
		if apierrors.IsNotFound(err) {
			return priorityClassCheck{missing: true}, nil
		}
		return priorityClassCheck{}, fmt.Errorf("getting PriorityClass %s: %w", name, err)
	}
	return priorityClassCheck{differences: priorityClassDifferences(existing, reservationPriorityClass(name))}, nil
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

// priorityClassFix says, for the messages of both problems, what the
// reservation PriorityClass must be and how to put it in place: deploy/spoke
// ships it under DefaultPriorityClassName; an agent configured with another
// name needs that manifest under its name.
func priorityClassFix(name string) (shipped, apply string) {
	want := reservationPriorityClass(name)
	fields := fmt.Sprintf("value %d, preemptionPolicy %s and globalDefault %t",
		want.Value, ptr.Deref(want.PreemptionPolicy, corev1.PreemptLowerPriority), want.GlobalDefault)
	if name == DefaultPriorityClassName {
		return "deploy/spoke ships it (agent/priorityclass.yaml) with " + fields, "kubectl apply -k deploy/spoke"
	}
	return fmt.Sprintf("deploy/spoke ships it (agent/priorityclass.yaml) as %s with %s", DefaultPriorityClassName, fields),
		"create that manifest under the name " + name
}

// priorityClassMissingMessage is the Ready condition's message for a
// missing reservation PriorityClass: what the agent does meanwhile, and how
// to fix it.
func priorityClassMissingMessage(name string) string {
	shipped, apply := priorityClassFix(name)
	return fmt.Sprintf("PriorityClass %s does not exist: the API server refuses reservation pods that name it, "+
		"so reservations are kept as they are and none is added until it exists. "+
		"%s: %s; the agent only reads it",
		name, shipped, apply)
}

// priorityClassMismatchMessage is the Ready condition's message for a
// reservation PriorityClass that differs from the shipped one: what
// differs, what the agent does meanwhile, and how to fix it.
func priorityClassMismatchMessage(name string, diffs []string) string {
	shipped, apply := priorityClassFix(name)
	return fmt.Sprintf("PriorityClass %s is not the one reservations need (%s): reservation pods running at it "+
		"could keep guests out or preempt other pods, so every reservation is scaled to 0 until it is fixed. "+
		"%s, and a value or preemptionPolicy cannot be changed: delete it (kubectl delete priorityclass %s), "+
		"then %s; the reservations come back",
		name, strings.Join(diffs, "; "), shipped, name, apply)
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

// keepReservations caps every machine type's reservation replicas at what
// its StatefulSet asks for now (current, by machine type; 0 without one):
// the reservation PriorityClass is missing, so the API server would refuse
// every pod a StatefulSet adds, and the StatefulSet controller would retry
// with a growing backoff long after the class is back. The reservation pods
// that run keep the priority they were admitted with and go on holding
// their capacity; scaling down for guests goes on as usual. Once the class
// exists, the reconcile it triggers raises the replicas, which the
// StatefulSet controller acts on at once.
func keepReservations(usage map[string]*typeUsage, current map[string]int32) {
	for name, u := range usage {
		u.replicas = min(u.replicas, current[name])
		u.unschedulable = min(u.unschedulable, u.replicas)
	}
}

// reservationReplicas reads from the cache the replicas that the
// reservation StatefulSets of served ask for now, by machine type. A type
// without a StatefulSet the Machine controls is left out (0).
func (r *Reconciler) reservationReplicas(ctx context.Context, c client.Reader, machine *imperatorv1alpha1.Machine, group string, served []string) (map[string]int32, error) {
	current := make(map[string]int32, len(served))
	for _, name := range served {
		key := client.ObjectKey{Namespace: r.opts.Namespace, Name: imperatorv1alpha1.ReservationName(name, group)}
		sts := &appsv1.StatefulSet{}
		if err := c.Get(ctx, key, sts); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("getting StatefulSet %s: %w", key, err)
		}
		if metav1.IsControlledBy(sts, machine) {
			// An unset replicas is defaulted to 1 by the API server, but the
			// agent always sets it: unset means the agent has not yet.
			current[name] = ptr.Deref(sts.Spec.Replicas, 0)
		}
	}
	return current, nil
}

// priorityClassHandler reconciles every Machine of the cluster when the
// reservation PriorityClass is created, changed or deleted: whether the
// reservations may run, or grow, depends on it.
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
