package provisioningrequest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// ControllerName names the controller in logs and events.
const ControllerName = "imperator-provisioningrequest"

// BookingDuration is how long a hold made for a request keeps its units for
// the request's pods: Cluster Autoscaler's booking time. Kueue admits the
// Workload as soon as the request is Provisioned, so its pods arrive well
// within it; units they claim stay with them until they finish.
const BookingDuration = 10 * time.Minute

// machineGrace is how long a request whose machine type the cache does not
// show waits before it fails: a Machine created at the same moment may not
// have reached the cache yet.
const machineGrace = 5 * time.Second

// +kubebuilder:rbac:groups=autoscaling.x-k8s.io,resources=provisioningrequests,verbs=get;list;watch
// +kubebuilder:rbac:groups=autoscaling.x-k8s.io,resources=provisioningrequests/status,verbs=get;patch;update
// +kubebuilder:rbac:groups="",resources=podtemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=capacityholds,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=machines,verbs=get;list;watch

// Options configure the Controller.
type Options struct {
	// Clock gives the instants of the holds' bookings (the agent's one
	// clock for holds). Default: the system clock.
	Clock clock.PassiveClock
	// AgentNamespace is the agent's namespace, where the pod injector
	// injects no guest: requests there are refused.
	AgentNamespace string
	// MaxUnitsPerNamespace caps the units the requests of one namespace
	// hold at once (--provisioning-max-units-per-namespace); 0: no cap.
	MaxUnitsPerNamespace int32
	// RecheckInterval is how often the Server asks discovery whether the
	// ProvisioningRequest CRD is served. Default: DefaultRecheckInterval.
	RecheckInterval time.Duration
}

// Controller serves the ProvisioningRequests of the class
// capacity-hold.imperator.tenzen-y.io with CapacityHolds (see the package
// doc).
type Controller struct {
	mgr  mcmanager.Manager
	now  func() time.Time
	opts Options
	// booking serializes the cap check and the holds' creation, so that
	// two requests of a namespace booked at once cannot both pass the cap
	// (the controller runs several workers).
	booking sync.Mutex
}

// Served tells whether the API server of config serves ProvisioningRequests
// (autoscaling.x-k8s.io/v1): the Controller runs only then, since its watch
// would fail without the CRD.
func Served(config *rest.Config) (bool, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		return false, fmt.Errorf("creating a discovery client: %w", err)
	}
	resources, err := dc.ServerResourcesForGroupVersion(GroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovering %s: %w", GroupVersion, err)
	}
	return slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == "provisioningrequests" }), nil
}

// SetupWithManager runs the Controller on the clusters of mgr (the local
// one, or every member in hosted mode) while their API server serves the
// ProvisioningRequest CRD (Server).
func SetupWithManager(mgr mcmanager.Manager, opts Options) error {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	server, err := NewServer(mgr, opts)
	if err != nil {
		return err
	}
	if err := mgr.Add(server); err != nil {
		return fmt.Errorf("setting up the provisioning request server: %w", err)
	}
	return nil
}

// ofOurClass lets through the requests of the class the agent serves.
func ofOurClass(obj client.Object) bool {
	pr, ok := obj.(*ProvisioningRequest)
	return ok && pr.Spec.ProvisioningClassName == imperatorv1alpha1.CapacityHoldProvisioningClass
}

// holdToRequest maps a hold the Controller made to its request.
func holdToRequest(_ context.Context, obj client.Object) []reconcile.Request {
	namespace, name := obj.GetLabels()[RequestNamespaceLabel], obj.GetAnnotations()[RequestNameAnnotation]
	if namespace == "" || name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}}}
}

// consumerToRequest maps a pod consuming a request of the class to the
// request: whether the pods that claim a hold exist ends its booking.
func consumerToRequest(_ context.Context, obj client.Object) []reconcile.Request {
	annotations := obj.GetAnnotations()
	name := annotations[imperatorv1alpha1.ConsumeProvisioningRequestAnnotation]
	if name == "" || annotations[imperatorv1alpha1.ProvisioningClassNameAnnotation] != imperatorv1alpha1.CapacityHoldProvisioningClass {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}

// Reconcile releases the holds of a request that is gone, and otherwise
// makes the request's holds while it is not provisioned and keeps its
// conditions from them.
func (r *Controller) Reconcile(ctx context.Context, req mcreconcile.Request) (ctrl.Result, error) {
	cl, err := r.mgr.GetCluster(ctx, req.ClusterName)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("getting cluster %q: %w", req.ClusterName, err)
	}
	c := cl.GetClient()
	pr := &ProvisioningRequest{}
	if err := c.Get(ctx, req.NamespacedName, pr); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.releaseStale(ctx, c, req.NamespacedName, "")
		}
		return ctrl.Result{}, fmt.Errorf("getting ProvisioningRequest %s: %w", req.NamespacedName, err)
	}
	if !ofOurClass(pr) || !pr.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.releaseStale(ctx, c, req.NamespacedName, "")
	}
	if err := r.releaseStale(ctx, c, req.NamespacedName, pr.UID); err != nil {
		return ctrl.Result{}, err
	}
	holds, err := r.holdsOf(ctx, c, pr)
	if err != nil {
		return ctrl.Result{}, err
	}
	before := pr.DeepCopy()
	var result ctrl.Result
	var release []string
	switch {
	case meta.IsStatusConditionTrue(pr.Status.Conditions, ConditionFailed):
		// Every hold made for this request, also those made before a
		// later one was refused (not recorded in its status).
		release = slices.Sorted(maps.Keys(holds))
	case Final(pr):
	default:
		if !ProvisionedOnce(pr) {
			result, err = r.book(ctx, c, cl.GetAPIReader(), pr, holds)
			if err != nil {
				return ctrl.Result{}, err
			}
		}
		var recheck time.Duration
		release, recheck = FromHolds(pr, holds, r.now())
		if recheck > 0 && (result.RequeueAfter == 0 || recheck < result.RequeueAfter) {
			result.RequeueAfter = recheck
		}
	}
	errs := []error{r.patchStatus(ctx, c, before, pr)}
	if ProvisionedOnce(pr) && !meta.IsStatusConditionTrue(pr.Status.Conditions, ConditionFailed) {
		for _, name := range HoldNames(pr) {
			if hold, ok := holds[name]; ok {
				errs = append(errs, r.endConsumedBooking(ctx, c, hold))
			}
		}
	}
	for _, name := range release {
		if hold, ok := holds[name]; ok {
			errs = append(errs, r.deleteHold(ctx, c, hold, "the ProvisioningRequest failed"))
		}
	}
	return result, errors.Join(errs...)
}

// book maps the request's pod sets to machine types and creates the holds
// it lacks, recording them in the request's status; a request that cannot
// be mapped is refused.
func (r *Controller) book(ctx context.Context, c client.Client, live client.Reader, pr *ProvisioningRequest, holds map[string]*imperatorv1alpha1.CapacityHold) (ctrl.Result, error) {
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: pr.Namespace}, ns); err != nil {
		return ctrl.Result{}, fmt.Errorf("getting the namespace of ProvisioningRequest %s: %w", klog.KObj(pr), err)
	}
	if refusal := OptedIn(ns, r.opts.AgentNamespace); refusal != nil {
		// A label set with the request may not be in the cache yet.
		if wait := pr.CreationTimestamp.Add(machineGrace).Sub(r.now()); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		r.refuse(ctx, pr, refusal)
		return ctrl.Result{}, nil
	}
	templates := map[string]*corev1.PodTemplate{}
	for _, ps := range pr.Spec.PodSets {
		t := &corev1.PodTemplate{}
		err := c.Get(ctx, client.ObjectKey{Namespace: pr.Namespace, Name: ps.PodTemplateRef.Name}, t)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("getting PodTemplate %s/%s: %w", pr.Namespace, ps.PodTemplateRef.Name, err)
		}
		templates[t.Name] = t
	}
	machines := &imperatorv1alpha1.MachineList{}
	if err := c.List(ctx, machines); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing Machines: %w", err)
	}
	bookings, refusal := Bookings(pr.Spec.PodSets, templates, machines.Items)
	if refusal != nil {
		// A Machine or PodTemplate created with the request may not be in
		// the cache yet.
		if wait := pr.CreationTimestamp.Add(machineGrace).Sub(r.now()); wait > 0 && refusal.Reason != ReasonResourcesNotStated && refusal.Reason != ReasonTooManyUnits {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		r.refuse(ctx, pr, refusal)
		return ctrl.Result{}, nil
	}
	if r.opts.MaxUnitsPerNamespace > 0 && slices.ContainsFunc(bookings, func(b Booking) bool {
		_, made := holds[HoldName(pr.Namespace, pr.Name, b.MachineGroup, b.MachineType)]
		return !made
	}) {
		// Held until the holds are created: the live list of the next
		// request's check then shows them.
		r.booking.Lock()
		defer r.booking.Unlock()
		others := &imperatorv1alpha1.CapacityHoldList{}
		if err := live.List(ctx, others, client.MatchingLabels{RequestNamespaceLabel: pr.Namespace}); err != nil {
			return ctrl.Result{}, fmt.Errorf("listing the CapacityHolds of namespace %s's ProvisioningRequests: %w", pr.Namespace, err)
		}
		if refusal := WithinCap(pr.Namespace, pr.UID, bookings, others.Items, r.opts.MaxUnitsPerNamespace, r.now()); refusal != nil {
			r.refuse(ctx, pr, refusal)
			return ctrl.Result{}, nil
		}
	}
	names := make([]string, 0, len(bookings))
	for _, b := range bookings {
		name := HoldName(pr.Namespace, pr.Name, b.MachineGroup, b.MachineType)
		names = append(names, name)
		if _, ok := holds[name]; ok {
			continue
		}
		hold, refusal, err := r.createHold(ctx, c, pr, name, b)
		if err != nil {
			return ctrl.Result{}, err
		}
		if refusal != nil {
			r.refuse(ctx, pr, refusal)
			return ctrl.Result{}, nil
		}
		if hold != nil {
			holds[name] = hold
		}
	}
	Accept(pr, names)
	return ctrl.Result{}, nil
}

// refuse marks pr Failed for refusal and logs it.
func (r *Controller) refuse(ctx context.Context, pr *ProvisioningRequest, refusal *Refusal) {
	Refuse(pr, refusal)
	ctrl.LoggerFrom(ctx).V(1).Info("Refused a ProvisioningRequest", "provisioningRequest", klog.KObj(pr), "reason", refusal.Reason, "message", refusal.Message)
}

// patchStatus writes the request's status when it changed, with the
// resourceVersion it was read at.
func (r *Controller) patchStatus(ctx context.Context, c client.Client, before, pr *ProvisioningRequest) error {
	if equality.Semantic.DeepEqual(before.Status, pr.Status) {
		return nil
	}
	if err := c.Status().Patch(ctx, pr, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// Changed since the cache gave it (its event queues it
			// again), or gone.
			return nil
		}
		return fmt.Errorf("patching the status of ProvisioningRequest %s: %w", klog.KObj(pr), err)
	}
	return nil
}
