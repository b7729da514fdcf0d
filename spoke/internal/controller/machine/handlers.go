package machine

import (
	"context"
	"maps"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mchandler "sigs.k8s.io/multicluster-runtime/pkg/handler"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

type queue = workqueue.TypedRateLimitingInterface[mcreconcile.Request]

// enqueueGroup adds the Machines labelled with group, read from the
// cluster's cache, to the queue.
func enqueueGroup(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster, q queue, group string) {
	if group == "" {
		return
	}
	enqueueMachines(ctx, name, cl, q, client.MatchingLabels{imperatorv1alpha1.MachineGroupKey: group})
}

// enqueueMachines adds the Machines of the cluster's cache that match opts
// (every one without opts) to the queue.
func enqueueMachines(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster, q queue, opts ...client.ListOption) {
	machines := &imperatorv1alpha1.MachineList{}
	if err := cl.GetCache().List(ctx, machines, opts...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing Machines failed")
		return
	}
	for _, m := range machines.Items {
		q.Add(mcreconcile.Request{Request: reconcile.Request{NamespacedName: types.NamespacedName{Name: m.Name}}, ClusterName: name})
	}
}

func groupOf(obj client.Object) string { return obj.GetLabels()[imperatorv1alpha1.MachineGroupKey] }

// groupHandler maps an object to the Machines of the machine group that
// groupOf reads from it, before and after an update. An update for which
// unchanged returns true is dropped; a nil unchanged drops none.
func groupHandler(name multicluster.ClusterName, cl cluster.Cluster, groupOf func(client.Object) string,
	unchanged func(ctx context.Context, oldObj, newObj client.Object) bool) mchandler.EventHandler {
	enqueue := func(ctx context.Context, q queue, obj client.Object) { enqueueGroup(ctx, name, cl, q, groupOf(obj)) }
	return handler.TypedFuncs[client.Object, mcreconcile.Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[client.Object], q queue) { enqueue(ctx, q, e.Object) },
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[client.Object], q queue) {
			if unchanged != nil && unchanged(ctx, e.ObjectOld, e.ObjectNew) {
				return
			}
			enqueue(ctx, q, e.ObjectOld)
			if groupOf(e.ObjectNew) != groupOf(e.ObjectOld) {
				enqueue(ctx, q, e.ObjectNew)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[client.Object], q queue) { enqueue(ctx, q, e.Object) },
		GenericFunc: func(ctx context.Context, e event.TypedGenericEvent[client.Object], q queue) {
			enqueue(ctx, q, e.Object)
		},
	}
}

// podHandler maps a pod to the Machines of its machine-group label. Updates
// that change nothing the usage depends on are dropped, and a guest that
// starts running is timed for the handover histogram.
func (r *Reconciler) podHandler(name multicluster.ClusterName, cl cluster.Cluster) mchandler.EventHandler {
	return groupHandler(name, cl, groupOf, func(ctx context.Context, oldObj, newObj client.Object) bool {
		oldPod, okOld := oldObj.(*corev1.Pod)
		newPod, okNew := newObj.(*corev1.Pod)
		if !okOld || !okNew {
			return false
		}
		observeHandover(ctx, name, cl, oldPod, newPod)
		return podView(oldPod) == podView(newPod)
	})
}

// podState is what the usage of a pod depends on.
type podState struct {
	group, machineType, role, nodeName, ordinal string
	// injected is the injector's record: whether the pod is a guest at all.
	injected string
	// controller is the UID of the pod's controller: whether a reservation
	// pod is the Machine's (ownReservation).
	controller                     types.UID
	phase                          corev1.PodPhase
	deleting, unschedulable, gated bool
}

func podView(pod *corev1.Pod) podState {
	role := pod.Labels[imperatorv1alpha1.PodRoleKey]
	return podState{
		group:       pod.Labels[imperatorv1alpha1.MachineGroupKey],
		machineType: pod.Labels[imperatorv1alpha1.MachineTypeKey],
		role:        role,
		ordinal:     pod.Labels[appsv1.PodIndexLabel],
		injected:    pod.Annotations[imperatorv1alpha1.InjectedAnnotation],
		controller:  controllerUID(pod),
		nodeName:    pod.Spec.NodeName,
		phase:       pod.Status.Phase,
		deleting:    pod.DeletionTimestamp != nil,
		// Only a reservation pod's: whether the scheduler could place a
		// guest changes no count, and pods anyone may create with the guest
		// labels would otherwise cost a reconcile each at their first failed
		// scheduling attempt.
		unschedulable: role == string(imperatorv1alpha1.PodRoleReservation) && unschedulable(pod),
		gated:         gated(pod),
	}
}

// controllerUID is the UID of a pod's controller, "" without one.
func controllerUID(pod *corev1.Pod) types.UID {
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		return ref.UID
	}
	return ""
}

// observeHandover records the time from a guest's creation until it runs,
// once, when the pod turns Running.
func observeHandover(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster, oldPod, newPod *corev1.Pod) {
	if newPod.Labels[imperatorv1alpha1.PodRoleKey] != string(imperatorv1alpha1.PodRoleGuest) ||
		oldPod.Status.Phase == corev1.PodRunning || newPod.Status.Phase != corev1.PodRunning || !active(newPod) {
		return
	}
	ns := &corev1.Namespace{}
	if err := cl.GetCache().Get(ctx, client.ObjectKey{Name: newPod.Namespace}, ns); err != nil || !injectionEnabled(ns.Labels) {
		return
	}
	guestHandoverSeconds.WithLabelValues(name.String(), newPod.Labels[imperatorv1alpha1.MachineGroupKey],
		newPod.Labels[imperatorv1alpha1.MachineTypeKey]).Observe(time.Since(newPod.CreationTimestamp.Time).Seconds())
}

// namespaceHandler reconciles every Machine of the cluster when a namespace
// turns guest injection on or off: its guests at the slot gate join the line
// again, or are told they are not let through.
func (r *Reconciler) namespaceHandler(name multicluster.ClusterName, cl cluster.Cluster) mchandler.EventHandler {
	return handler.TypedFuncs[client.Object, mcreconcile.Request]{
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[client.Object], q queue) {
			if injectionEnabled(e.ObjectOld.GetLabels()) == injectionEnabled(e.ObjectNew.GetLabels()) {
				return
			}
			enqueueMachines(ctx, name, cl, q)
		},
	}
}

// nodeHandler maps a Node to the Machines of the machine group it is
// annotated with, before and after an update: whether the reservation pods
// bound to it are reserved depends on its node-pool label.
func (r *Reconciler) nodeHandler(name multicluster.ClusterName, cl cluster.Cluster) mchandler.EventHandler {
	return groupHandler(name, cl, nodeGroupOf, nil)
}

func nodeGroupOf(obj client.Object) string {
	return obj.GetAnnotations()[imperatorv1alpha1.MachineGroupKey]
}

// nodePoolChanged lets through the node updates that change what the node
// pool put on it (the node-pool and machine-type labels, every label under
// imperatorv1alpha1.Prefix, and the machine-group annotation) or which
// guests it can take: any label (a guest's nodeSelector or node affinity
// may name it), its taints and whether it is cordoned. Heartbeats, status
// and annotations are dropped.
func nodePoolChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			if nodeGroupOf(e.ObjectOld) != nodeGroupOf(e.ObjectNew) || !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels()) {
				return true
			}
			oldNode, okOld := e.ObjectOld.(*corev1.Node)
			newNode, okNew := e.ObjectNew.(*corev1.Node)
			return okOld && okNew && (oldNode.Spec.Unschedulable != newNode.Spec.Unschedulable ||
				!equality.Semantic.DeepEqual(oldNode.Spec.Taints, newNode.Spec.Taints))
		},
	}
}
