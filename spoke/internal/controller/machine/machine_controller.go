package machine

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/controller/capacityhold"
)

const (
	// ControllerName names the controller in logs, metrics and events.
	ControllerName = "imperator-machine"
	// FieldOwner is the server-side apply field manager of the reservation
	// StatefulSets and Services.
	FieldOwner = "imperator-machine-controller"

	// DefaultImage is the placeholder image: pause does nothing and exits at
	// once on SIGTERM.
	DefaultImage = "registry.k8s.io/pause:3.10"
	// DefaultPriorityClassName is the PriorityClass of reservation pods.
	DefaultPriorityClassName = "imperator-reservation"
)

// Options configure the Machine controller.
type Options struct {
	// Namespace holds the reservation StatefulSets and Services (the agent's
	// namespace). Required.
	Namespace string
	// Image of the placeholder container. Default DefaultImage.
	Image string
	// PriorityClassName of reservation pods. deploy/spoke ships it; the
	// controller only reads it. While it is missing, no reservation is added
	// (the API server would refuse the pods) and the Machines' Ready
	// condition says ReservationPriorityClassMissing; one with another value,
	// preemptionPolicy or globalDefault holds every reservation at 0
	// replicas and says ReservationPriorityClassMismatch, until an operator
	// puts the shipped one in place. Default DefaultPriorityClassName.
	PriorityClassName string
	// MaxConcurrentReconciles defaults to the manager's setting, else 1.
	MaxConcurrentReconciles int
	// Clock gives the instants compared with the holds' validUntil: the
	// agent's one clock, from which the reporter sets validUntil
	// (config.Config.Clock). Default: the system clock.
	Clock clock.PassiveClock
}

func (o *Options) complete() error {
	if o.Image == "" {
		o.Image = DefaultImage
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.PriorityClassName == "" {
		o.PriorityClassName = DefaultPriorityClassName
	}
	var errs []error
	if msgs := validation.IsDNS1123Label(o.Namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("machine controller: namespace %q: %v", o.Namespace, msgs))
	}
	if msgs := validation.IsDNS1123Subdomain(o.PriorityClassName); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("machine controller: priority class name %q: %v", o.PriorityClassName, msgs))
	}
	return errors.Join(errs...)
}

// CacheOptions restricts the manager's cache to what the Machine controller
// reads: pods carrying a machine-group label (guests and reservations), and
// StatefulSets and Services of the agent's namespace. Nodes are read whole
// (the node-pool controller needs every one), and so are PriorityClasses: a
// cluster has a handful, and the controller watches the reservation one by
// its configured name, which this function does not know. Pass it as
// cache.Options.ByObject when no other component needs the rest.
func CacheOptions(namespace string) map[client.Object]cache.ByObject {
	grouped, _ := labels.NewRequirement(imperatorv1alpha1.MachineGroupKey, selection.Exists, nil)
	inNamespace := map[string]cache.Config{namespace: {}}
	return map[client.Object]cache.ByObject{
		&corev1.Pod{}:         {Label: labels.NewSelector().Add(*grouped)},
		&appsv1.StatefulSet{}: {Namespaces: inNamespace},
		&corev1.Service{}:     {Namespaces: inNamespace},
	}
}

// Reconciler keeps, for every Machine, one reservation StatefulSet and
// Service per served machine type and the Machine's usage status.
type Reconciler struct {
	mgr          mcmanager.Manager
	opts         Options
	series       usageSeries
	expectations grantExpectations
	stuckWarned  stuckWarnings
	// podGroups are the PodGroup kinds watched (groups.go).
	podGroups podGroupKinds
}

// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=machines,verbs=get;list;watch
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=machines/status,verbs=get;patch
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=machines/finalizers,verbs=update
// Reservation workloads live in the agent's namespace only.
// +kubebuilder:rbac:groups=apps,namespace=imperator-system,resources=statefulsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",namespace=imperator-system,resources=services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// The reservation PriorityClass ships with deploy/spoke: read only.
// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=priorityclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the Machine controller, its pod index and its
// metrics with a multi-cluster manager. It reconciles Machines of every
// cluster the manager engages (only the local one without a provider).
func SetupWithManager(mgr mcmanager.Manager, opts Options) error {
	if err := opts.complete(); err != nil {
		return err
	}
	register()
	if err := SetupIndexer(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := capacityhold.SetupIndexer(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	r := &Reconciler{mgr: mgr, opts: opts}
	// With a provider (hosted mode) the clusters come and go and may serve
	// different APIs; a watch of a kind one of them lacks would keep the
	// controller from engaging it: their PodGroups are read live.
	if mgr.GetProvider() == nil {
		r.podGroups = servedPodGroupKinds(mgr.GetLocalManager().GetRESTMapper())
	}
	ctrlOpts := controller.TypedOptions[mcreconcile.Request]{MaxConcurrentReconciles: opts.MaxConcurrentReconciles}
	// The multi-cluster builder takes only some of the manager's controller
	// settings (not SkipNameValidation); take all of them here.
	ctrlOpts.DefaultFromConfig(mgr.GetControllerOptions())
	b := mcbuilder.ControllerManagedBy(mgr).
		Named("machine").
		For(&imperatorv1alpha1.Machine{}).
		// The StatefulSet's status changes with every pod, and the pod watch
		// sees those already: only spec and label changes matter here.
		Owns(&appsv1.StatefulSet{}, mcbuilder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		Owns(&corev1.Service{}).
		Watches(&corev1.Pod{}, r.podHandler).
		Watches(&corev1.Namespace{}, r.namespaceHandler).
		// Holds are decided and accounted by the Machine of their group
		// (holds.go); their status writes change no generation.
		Watches(&imperatorv1alpha1.CapacityHold{}, r.holdHandler, mcbuilder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// Reservation pods count as reserved only on node-pool=ready nodes,
		// and a waiting guest holds a unit only while such a node can take
		// it: only a change of a node's labels, taints or cordon matters.
		Watches(&corev1.Node{}, r.nodeHandler, mcbuilder.WithPredicates(nodePoolChanged())).
		// A missing or wrong reservation PriorityClass holds the
		// reservations back, and one put right restores them, without
		// waiting for a resync.
		Watches(&schedulingv1.PriorityClass{}, r.priorityClassHandler, mcbuilder.WithPredicates(isReservationPriorityClass(opts.PriorityClassName)))
	// A gang's size may come from its PodGroup (groups.go).
	if r.podGroups.native {
		b = b.Watches(&schedulingv1alpha2.PodGroup{}, r.podGroupHandler("podgroup"))
	}
	if r.podGroups.coscheduling {
		b = b.Watches(newCoschedulingPodGroup(), r.podGroupHandler("coscheduling"))
	}
	if err := b.WithOptions(ctrlOpts).Complete(r); err != nil {
		return fmt.Errorf("setting up the machine controller: %w", err)
	}
	return nil
}

// reconcileState is what one reconcile learns, for the status.
type reconcileState struct {
	// readyReason is set when the Machine cannot be reconciled for a reason
	// other than an error (which sets ReasonReconcileFailed).
	readyReason, readyMessage string
	// usage is per machine type, nil when it could not be counted.
	usage map[string]*typeUsage
	// served are the machine types with reservations, in spec order.
	served []string
	// withoutGPUs are, per machine type with unschedulable reservation
	// pods, its ready pool nodes that advertise none of its GPU resource.
	withoutGPUs map[string][]string
}

// Reconcile brings the reservations of one Machine in line with its spec and
// the guests that use them, then reports the usage in its status.
func (r *Reconciler) Reconcile(ctx context.Context, req mcreconcile.Request) (_ ctrl.Result, retErr error) {
	log := ctrl.LoggerFrom(ctx).WithValues("cluster", req.ClusterName)
	ctx = ctrl.LoggerInto(ctx, log)
	seriesKey := req.ClusterName.String() + "/" + req.Name

	cl, err := r.mgr.GetCluster(ctx, req.ClusterName)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("getting cluster %q: %w", req.ClusterName, err)
	}
	c := cl.GetClient()
	machine := &imperatorv1alpha1.Machine{}
	if err := c.Get(ctx, req.NamespacedName, machine); err != nil {
		if apierrors.IsNotFound(err) {
			r.series.set(seriesKey, "", "", nil)
			r.expectations.forgetMachine(seriesKey)
			r.stuckWarned.forgetMachine(seriesKey)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting Machine: %w", err)
	}
	// No finalizer: the garbage collector removes the StatefulSets and
	// Services the Machine owns, and the PriorityClass is shared by all
	// Machines.
	if !machine.DeletionTimestamp.IsZero() {
		r.series.set(seriesKey, "", "", nil)
		return ctrl.Result{}, nil
	}

	s := &scope{
		cluster:   cl,
		client:    c,
		recorder:  cl.GetEventRecorder(ControllerName),
		machine:   machine,
		group:     machine.Labels[imperatorv1alpha1.MachineGroupKey],
		seriesKey: seriesKey,
		state:     &reconcileState{},
	}
	defer func() {
		retErr = errors.Join(retErr, r.patchStatus(ctx, c, s.recorder, machine, s.state, retErr))
		r.series.set(seriesKey, req.ClusterName.String(), s.group, machine.Status.AvailableMachines)
	}()
	for _, phase := range r.phases() {
		if stop := phase(ctx, s); stop {
			return s.result, errors.Join(s.errs...)
		}
	}
	requeue := untilNextStuck(s.state.usage, time.Now())
	if s.untilExpiry > 0 && (requeue == 0 || s.untilExpiry < requeue) {
		requeue = s.untilExpiry
	}
	if s.retryGrants && (requeue == 0 || grantRetry < requeue) {
		requeue = grantRetry
	}
	return ctrl.Result{RequeueAfter: requeue}, errors.Join(s.errs...)
}
