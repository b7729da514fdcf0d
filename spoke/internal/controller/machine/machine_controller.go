package machine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
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

	state := &reconcileState{}
	recorder := cl.GetEventRecorder(ControllerName)
	defer func() {
		retErr = errors.Join(retErr, r.patchStatus(ctx, c, recorder, machine, state, retErr))
		r.series.set(seriesKey, req.ClusterName.String(), machine.Labels[imperatorv1alpha1.MachineGroupKey],
			machine.Status.AvailableMachines)
	}()

	group := machine.Labels[imperatorv1alpha1.MachineGroupKey]
	if group == "" {
		state.readyReason = imperatorv1alpha1.ReasonMachineGroupMissing
		state.readyMessage = fmt.Sprintf("label %s is not set: nothing is reserved", imperatorv1alpha1.MachineGroupKey)
		log.V(1).Info("Machine has no machine group, removing its reservations", "machine", klog.KObj(machine))
		return ctrl.Result{}, r.prune(ctx, c, machine, nil)
	}

	usage, typeGone, err := r.countUsage(ctx, c, machine, group)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.expectations.observe(seriesKey, usage)
	podGroups := newGroupSizes(cl.GetCache(), cl.GetAPIReader(), r.podGroups)
	for name, u := range usage {
		formGangs(u, name, podGroups.of(ctx))
	}
	state.usage = usage
	state.served = servedTypes(machine)
	if state.withoutGPUs, err = nodesWithoutGPUs(ctx, c, machine, group, usage, state.served); err != nil {
		return ctrl.Result{}, err
	}
	r.warnStuckReservations(seriesKey, recorder, machine, usage)
	// Holds are decided, and their statuses written, before any
	// reservation pod or guest moves (holds.go).
	untilExpiry, unsettled, err := r.planHolds(ctx, c, recorder, machine, group, usage, state.served, r.holdsNow())
	if err != nil || unsettled {
		return ctrl.Result{RequeueAfter: holdConflictRetry}, err
	}

	// The PriorityClass is checked for every Machine, also one that serves
	// nothing yet, so that each one the agent manages tells of a missing or
	// wrong one.
	check, err := r.checkPriorityClass(ctx, c)
	if err != nil {
		return ctrl.Result{}, err
	}
	switch {
	case check.missing:
		current, err := r.reservationReplicas(ctx, c, machine, group, state.served)
		if err != nil {
			return ctrl.Result{}, err
		}
		keepReservations(usage, current)
		state.readyReason = imperatorv1alpha1.ReasonReservationPriorityClassMissing
		state.readyMessage = priorityClassMissingMessage(r.opts.PriorityClassName)
		log.V(1).Info("Reservation PriorityClass is missing, adding no reservation pod",
			"machine", klog.KObj(machine), "priorityClass", r.opts.PriorityClassName)
	case len(check.differences) > 0:
		// Keep the StatefulSets and Services, at 0 replicas: the
		// reservations come back as soon as the PriorityClass is right.
		holdReservations(usage)
		state.readyReason = imperatorv1alpha1.ReasonReservationPriorityClassMismatch
		state.readyMessage = priorityClassMismatchMessage(r.opts.PriorityClassName, check.differences)
		log.V(1).Info("Reservation PriorityClass differs from the shipped one, holding reservations at 0",
			"machine", klog.KObj(machine), "priorityClass", r.opts.PriorityClassName, "differences", check.differences)
	}
	keep := make(map[string]bool, len(state.served))
	var errs []error
	for _, name := range state.served {
		keep[imperatorv1alpha1.ReservationName(name, group)] = true
		machineType := machine.MachineType(name)
		if err := r.applyReservation(ctx, c, recorder, machine, group, machineType, usage[name].replicas); err != nil {
			errs = append(errs, err)
		}
	}
	// A Machine whose reservation names another Machine controls (two
	// Machines of one group: the validator refuses the second, but two
	// admissions can race) admits no guest: the group's guests are the
	// other's, and two Machines granting at once could let in more than
	// either has available.
	var conflict *conflictError
	owner := !errors.As(errors.Join(errs...), &conflict)
	errs = append(errs, r.prune(ctx, c, machine, keep))
	// The reservations are scaled for every waiting guest first; the gates
	// open only once the reservation pods are gone.
	if owner {
		errs = append(errs, r.grantSlots(ctx, c, recorder, machine, usage, seriesKey, podGroups))
	} else if conflict.otherMachine == "" {
		// Nobody runs the group's line: its guests learn why from this
		// Machine. With another Machine controlling the reservations, that
		// one tells them their place.
		errs = append(errs, tellNotOwner(ctx, c, recorder, machine, usage, conflict))
	}
	errs = append(errs, r.tellStranded(ctx, c, recorder, machine, usage, typeGone))
	requeue := untilNextStuck(usage, time.Now())
	if untilExpiry > 0 && (requeue == 0 || untilExpiry < requeue) {
		requeue = untilExpiry
	}
	return ctrl.Result{RequeueAfter: requeue}, errors.Join(errs...)
}

// untilNextStuck is how long until a terminating reservation pod of usage
// that is not stuck yet will be (no event tells), 0 when there is none.
func untilNextStuck(usage map[string]*typeUsage, now time.Time) time.Duration {
	var next time.Duration
	for _, u := range usage {
		if u.nextStuck.IsZero() {
			continue
		}
		// A second past the threshold: the pod is stuck by then.
		if d := max(u.nextStuck.Add(stuckReservationAfter+time.Second).Sub(now), time.Second); next == 0 || d < next {
			next = d
		}
	}
	return next
}

// ReasonReservationPodStuck is the Warning event a Machine gets once per
// reservation pod that stays terminating stuckReservationAfter past its
// deletion time.
const ReasonReservationPodStuck = "ReservationPodStuck"

// stuckWarnings remembers, per Machine, the stuck reservation pods it was
// warned about, so that each gets one event.
type stuckWarnings struct {
	mu     sync.Mutex
	warned map[string]map[types.UID]bool
}

// newlyStuck records the stuck pods of a Machine and returns those not seen
// stuck before; pods no longer stuck are forgotten.
func (w *stuckWarnings) newlyStuck(key string, stuck []types.UID) []types.UID {
	w.mu.Lock()
	defer w.mu.Unlock()
	before := w.warned[key]
	now := make(map[types.UID]bool, len(stuck))
	var fresh []types.UID
	for _, uid := range stuck {
		now[uid] = true
		if !before[uid] {
			fresh = append(fresh, uid)
		}
	}
	if w.warned == nil {
		w.warned = map[string]map[types.UID]bool{}
	}
	if len(now) == 0 {
		delete(w.warned, key)
	} else {
		w.warned[key] = now
	}
	return fresh
}

func (w *stuckWarnings) forgetMachine(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.warned, key)
}

// warnStuckReservations sends the Machine a Warning event for every
// reservation pod that turned stuck since the last reconcile.
func (r *Reconciler) warnStuckReservations(key string, recorder events.EventRecorder, machine *imperatorv1alpha1.Machine, usage map[string]*typeUsage) {
	var all []types.UID
	names := map[types.UID]string{}
	machineType := map[types.UID]string{}
	for name, u := range usage {
		for i, uid := range u.stuckUIDs {
			all = append(all, uid)
			names[uid], machineType[uid] = u.stuckPodNames[i], name
		}
	}
	for _, uid := range r.stuckWarned.newlyStuck(key, all) {
		recorder.Eventf(machine, nil, corev1.EventTypeWarning, ReasonReservationPodStuck, "Reconcile",
			"reservation pod %s is still terminating more than %s after its deletion time (a finalizer, or a kubelet that does not answer): "+
				"the %s queue no longer waits for it, and the capacity it holds on its node stays taken until it is gone",
			names[uid], stuckReservationAfter, machineType[uid])
	}
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

// countUsage reads the pods of the Machine's group from the cache, through
// the machine-group index, and counts them per machine type of the spec. The
// nodes that reservation pods are bound to are read from the cache too, for
// their node-pool label, and so are the ready nodes of each type with guests
// at the gate, to tell which of them a node can take. typeGone are the
// guests at the slot gate whose machine type the Machine no longer offers
// (pods the injector did not admit are not told anything: they are no
// guests, and a write to each would let anyone make the agent write).
func (r *Reconciler) countUsage(ctx context.Context, c client.Client, machine *imperatorv1alpha1.Machine, group string) (_ map[string]*typeUsage, typeGone []*corev1.Pod, _ error) {
	pods := &corev1.PodList{}
	// The pods are only read: no need to copy every one out of the cache.
	if err := c.List(ctx, pods, client.MatchingFields{PodMachineGroupIndex: group}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, fmt.Errorf("listing pods of machine group %s: %w", group, err)
	}
	enabledByNamespace := map[string]bool{}
	var lookupErr error
	enabled := func(name string) bool {
		if v, ok := enabledByNamespace[name]; ok {
			return v
		}
		ns := &corev1.Namespace{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
			if !apierrors.IsNotFound(err) {
				lookupErr = errors.Join(lookupErr, fmt.Errorf("getting namespace %s: %w", name, err))
			}
			enabledByNamespace[name] = false
			return false
		}
		enabledByNamespace[name] = injectionEnabled(ns.Labels) && name != r.opts.Namespace
		return enabledByNamespace[name]
	}
	stateByNode := map[string]string{}
	nodeState := func(name string) string {
		if v, ok := stateByNode[name]; ok {
			return v
		}
		node := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			if !apierrors.IsNotFound(err) {
				lookupErr = errors.Join(lookupErr, fmt.Errorf("getting node %s: %w", name, err))
			}
			stateByNode[name] = nodeStateMissing
			return nodeStateMissing
		}
		stateByNode[name] = node.Labels[imperatorv1alpha1.NodePoolKey]
		return stateByNode[name]
	}
	// The ready nodes of a type are read once per reconcile, and only for a
	// type with guests at the gate.
	readyByType := map[string][]*corev1.Node{}
	readyNodes := func(name string) []*corev1.Node {
		nodes, ok := readyByType[name]
		if !ok {
			var err error
			if nodes, err = readyNodesOf(ctx, c, group, machine.MachineType(name)); err != nil {
				lookupErr = errors.Join(lookupErr, err)
			}
			readyByType[name] = nodes
		}
		return nodes
	}
	available := make(map[string]int32, len(machine.Spec.MachineTypes))
	for _, t := range machine.Spec.MachineTypes {
		available[t.Name] = t.Available
	}
	usage := podCounts(pods.Items, group, r.opts.Namespace, lookups{enabled: enabled, nodeState: nodeState, readyNodes: readyNodes},
		available, time.Now().Add(-stuckReservationAfter))
	if lookupErr != nil {
		return nil, nil, lookupErr
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if _, offered := available[pod.Labels[imperatorv1alpha1.MachineTypeKey]]; !offered &&
			pod.Labels[imperatorv1alpha1.PodRoleKey] == string(imperatorv1alpha1.PodRoleGuest) &&
			pod.Labels[imperatorv1alpha1.MachineGroupKey] == group && active(pod) && gated(pod) && admittedGuest(pod) {
			typeGone = append(typeGone, pod)
		}
	}
	return usage, typeGone, nil
}

// conflictError is an object with a reservation's name that the Machine does
// not control.
type conflictError struct {
	kind, namespace, name, machine string
	// earlier is set when the object is an earlier Machine's of the same
	// name that is being deleted: it cannot be taken over.
	earlier bool
	// otherMachine names the Machine of another name that controls the
	// object, if one does: that Machine runs the group's line.
	otherMachine string
}

func (e *conflictError) Error() string {
	if e.earlier {
		return fmt.Sprintf("%s %s/%s of an earlier Machine %s is being deleted", e.kind, e.namespace, e.name, e.machine)
	}
	return fmt.Sprintf("%s %s/%s exists and is not controlled by Machine %s", e.kind, e.namespace, e.name, e.machine)
}

// ownedByEarlier tells whether obj's controller is an earlier Machine of
// the same name as machine: one deleted, with machine created in its place
// before the garbage collector removed what it owned. Machines are
// cluster-scoped, so no Machine of that UID can come back.
func ownedByEarlier(obj client.Object, machine *imperatorv1alpha1.Machine) bool {
	ref := machineControllerOf(obj)
	return ref != nil && ref.Name == machine.Name && ref.UID != machine.UID
}

// machineControllerOf is obj's controller reference when it is a Machine.
func machineControllerOf(obj client.Object) *metav1.OwnerReference {
	ref := metav1.GetControllerOfNoCopy(obj)
	if ref == nil || ref.Kind != "Machine" {
		return nil
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != imperatorv1alpha1.GroupVersion.Group {
		return nil
	}
	return ref
}

// applyReservation server-side applies the Service and StatefulSet of one
// machine type when the cached ones differ from what they should be.
func (r *Reconciler) applyReservation(ctx context.Context, c client.Client, recorder events.EventRecorder,
	machine *imperatorv1alpha1.Machine, group string, machineType *imperatorv1alpha1.MachineType, replicas int32) error {
	log := ctrl.LoggerFrom(ctx)
	name := imperatorv1alpha1.ReservationName(machineType.Name, group)
	key := client.ObjectKey{Namespace: r.opts.Namespace, Name: name}

	svc := &corev1.Service{}
	if err := getControlled(ctx, c, key, svc, machine); err != nil {
		return err
	}
	desiredSvc := reservationService(machine, group, r.opts.Namespace, machineType.Name)
	inSync, err := serviceInSync(svc, desiredSvc)
	if err != nil {
		return err
	}
	if !inSync {
		if err := c.Apply(ctx, desiredSvc, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying Service %s: %w", klog.KRef(key.Namespace, key.Name), err)
		}
		log.V(1).Info("Applied reservation Service", "service", klog.KRef(key.Namespace, key.Name))
	}

	sts := &appsv1.StatefulSet{}
	if err := getControlled(ctx, c, key, sts, machine); err != nil {
		return err
	}
	desired := reservationStatefulSet(machine, group, r.opts.Namespace, machineType, replicas, r.opts)
	inSync, err = statefulSetInSync(sts, desired)
	if err != nil {
		return err
	}
	if inSync {
		return nil
	}
	if err := c.Apply(ctx, desired, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying StatefulSet %s: %w", klog.KRef(key.Namespace, key.Name), err)
	}
	switch {
	case sts.UID == "":
		log.V(1).Info("Created reservation StatefulSet", "statefulSet", klog.KRef(key.Namespace, key.Name), "replicas", replicas)
		recorder.Eventf(machine, nil, corev1.EventTypeNormal, "ReservationCreated", "Create",
			"Created StatefulSet %s/%s reserving %d of %d %s", key.Namespace, name, replicas, machineType.Available, machineType.Name)
	case sts.Spec.Replicas == nil || *sts.Spec.Replicas != replicas:
		from := int32(0)
		if sts.Spec.Replicas != nil {
			from = *sts.Spec.Replicas
		}
		log.V(1).Info("Scaled reservation StatefulSet", "statefulSet", klog.KRef(key.Namespace, key.Name), "from", from, "to", replicas)
		recorder.Eventf(machine, nil, corev1.EventTypeNormal, "ReservationScaled", "Scale",
			"Scaled the %s reservation from %d to %d of %d available", machineType.Name, from, replicas, machineType.Available)
	default:
		log.V(1).Info("Updated reservation StatefulSet", "statefulSet", klog.KRef(key.Namespace, key.Name))
	}
	return nil
}

// getControlled reads obj from the cache and fails with a conflictError when
// it exists without the Machine as its controller. A missing obj is left
// empty. One that an earlier Machine of the same name controls is the
// Machine's to take over (the apply makes it the controller): waiting for
// the garbage collector instead keeps every guest out until it comes round
// to it, which can take it tens of seconds, and the reservation pods it
// would delete hold the very units the Machine reserves again.
func getControlled(ctx context.Context, c client.Client, key client.ObjectKey, obj client.Object, machine *imperatorv1alpha1.Machine) error {
	if err := c.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("getting %T %s: %w", obj, key, err)
	}
	if metav1.IsControlledBy(obj, machine) {
		return nil
	}
	earlier := ownedByEarlier(obj, machine)
	if earlier && obj.GetDeletionTimestamp().IsZero() {
		ctrl.LoggerFrom(ctx).V(1).Info("Taking over a reservation object of an earlier Machine of this name", "object", klog.KObj(obj),
			"earlierUID", metav1.GetControllerOfNoCopy(obj).UID)
		return nil
	}
	kind := "StatefulSet"
	if _, ok := obj.(*corev1.Service); ok {
		kind = "Service"
	}
	conflict := &conflictError{kind: kind, namespace: key.Namespace, name: key.Name, machine: machine.Name, earlier: earlier}
	if ref := machineControllerOf(obj); ref != nil && ref.Name != machine.Name {
		conflict.otherMachine = ref.Name
	}
	return conflict
}

// prune deletes the reservation StatefulSets and Services the Machine
// controls whose names are not in keep: machine types no longer served, or a
// machine group that changed; and those an earlier Machine of its name left
// that it does not take over.
//
// It reads every reservation object of the namespace (those of other
// Machines too) on each reconcile, as the cache holds them and without
// copies: it only reads them and deletes by name and UID. A copy of each
// of 50 StatefulSets per reconcile was a fifth of the agent's CPU while
// 1,000 nodes converged.
func (r *Reconciler) prune(ctx context.Context, c client.Client, machine *imperatorv1alpha1.Machine, keep map[string]bool) error {
	selector := client.MatchingLabels{imperatorv1alpha1.PodRoleKey: string(imperatorv1alpha1.PodRoleReservation)}
	statefulSets := &appsv1.StatefulSetList{}
	if err := c.List(ctx, statefulSets, client.InNamespace(r.opts.Namespace), selector, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing reservation StatefulSets: %w", err)
	}
	services := &corev1.ServiceList{}
	if err := c.List(ctx, services, client.InNamespace(r.opts.Namespace), selector, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing reservation Services: %w", err)
	}
	var stale []client.Object
	for i := range statefulSets.Items {
		stale = append(stale, &statefulSets.Items[i])
	}
	for i := range services.Items {
		stale = append(stale, &services.Items[i])
	}
	stale = slices.DeleteFunc(stale, func(obj client.Object) bool {
		return keep[obj.GetName()] || (!metav1.IsControlledBy(obj, machine) && !ownedByEarlier(obj, machine)) || !obj.GetDeletionTimestamp().IsZero()
	})
	var errs []error
	for _, obj := range stale {
		err := c.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground),
			client.Preconditions{UID: ptr.To(obj.GetUID())})
		if client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting %T %s: %w", obj, klog.KObj(obj), err))
			continue
		}
		ctrl.LoggerFrom(ctx).V(1).Info("Deleted stale reservation object", "object", klog.KObj(obj), "kind", fmt.Sprintf("%T", obj))
	}
	return errors.Join(errs...)
}
