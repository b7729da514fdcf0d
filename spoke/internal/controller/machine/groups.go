package machine

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	mchandler "sigs.k8s.io/multicluster-runtime/pkg/handler"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
)

// The group objects a gang's size may come from when its members carry no
// imperator.tenzen-y.io/gang-size (gang.go): a scheduler-plugins
// coscheduling PodGroup's spec.minMember, a native PodGroup's
// spec.schedulingPolicy.gang.minCount (scheduling.k8s.io/v1alpha2, served
// only with the GenericWorkload feature gate and that API version
// enabled).
//
// A kind the API server serves when the controller starts is watched and
// read from the cache: a PodGroup created, changed or deleted reconciles the
// Machines of its members' group, and a reconcile costs no request. A kind
// served only later (a CRD installed after the agent started) is read live,
// once per gang and reconcile, until the agent restarts, and so is every
// PodGroup in hosted mode (machine_controller.go); a cluster serving
// neither costs nothing, since no member names such a group.
var (
	coschedulingPodGroup = schema.GroupVersionKind{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Kind: "PodGroup"}
	nativePodGroup       = schema.GroupVersionKind{Group: "scheduling.k8s.io", Version: "v1alpha2", Kind: "PodGroup"}
)

// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=podgroups,verbs=get;list;watch
// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=podgroups/status,verbs=patch
// +kubebuilder:rbac:groups=scheduling.x-k8s.io,resources=podgroups,verbs=get;list;watch

// podGroupKinds are the PodGroup kinds the controller watches.
type podGroupKinds struct {
	native, coscheduling bool
}

// servedPodGroupKinds asks mapper which PodGroup kinds the API server
// serves.
func servedPodGroupKinds(mapper meta.RESTMapper) podGroupKinds {
	served := func(gvk schema.GroupVersionKind) bool {
		_, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		return err == nil
	}
	return podGroupKinds{native: served(nativePodGroup), coscheduling: served(coschedulingPodGroup)}
}

// watched tells whether the gang's group object is in the cache.
func (k podGroupKinds) watched(source string) bool {
	return (source == "podgroup" && k.native) || (source == "coscheduling" && k.coscheduling)
}

// newCoschedulingPodGroup is an empty coscheduling PodGroup, to read or
// watch one.
func newCoschedulingPodGroup() *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(coschedulingPodGroup)
	return obj
}

// groupSizes reads gang sizes from group objects, remembering each answer
// for one reconcile, and the native PodGroups read from the cache, whose
// status the controller writes (podgroup_status.go).
type groupSizes struct {
	// cache reads the watched kinds, live the others.
	cache, live client.Reader
	kinds       podGroupKinds
	read        map[gangID]int32
	native      map[gangID]*schedulingv1alpha2.PodGroup
}

func newGroupSizes(cache, live client.Reader, kinds podGroupKinds) *groupSizes {
	return &groupSizes{cache: cache, live: live, kinds: kinds, read: map[gangID]int32{}, native: map[gangID]*schedulingv1alpha2.PodGroup{}}
}

// of returns the size the gang's group object gives, 0 when it has none:
// no such object, an API the server does not serve, no positive size.
func (s *groupSizes) of(ctx context.Context) func(gangID) int32 {
	return func(id gangID) int32 {
		if n, ok := s.read[id]; ok {
			return n
		}
		n := s.get(ctx, id)
		s.read[id] = n
		return n
	}
}

// cachedPodGroup is the native PodGroup of the gang, when the cache holds
// it; nil otherwise.
func (s *groupSizes) cachedPodGroup(ctx context.Context, id gangID) *schedulingv1alpha2.PodGroup {
	if id.source != "podgroup" || !s.kinds.native {
		return nil
	}
	if pg, ok := s.native[id]; ok {
		return pg
	}
	pg := &schedulingv1alpha2.PodGroup{}
	if err := s.cache.Get(ctx, client.ObjectKey{Namespace: id.namespace, Name: id.name}, pg); err != nil {
		pg = nil
	}
	s.native[id] = pg
	return pg
}

func (s *groupSizes) get(ctx context.Context, id gangID) int32 {
	reader := s.live
	if s.kinds.watched(id.source) {
		reader = s.cache
	}
	var n int64
	switch id.source {
	case "podgroup":
		pg := s.cachedPodGroup(ctx, id)
		if !s.kinds.native {
			pg = &schedulingv1alpha2.PodGroup{}
			if err := reader.Get(ctx, client.ObjectKey{Namespace: id.namespace, Name: id.name}, pg); err != nil {
				ctrl.LoggerFrom(ctx).V(2).Info("No gang size from the group object", "gang", id.String(), "kind", nativePodGroup.Kind, "reason", err.Error())
				return 0
			}
		}
		if pg == nil || pg.Spec.SchedulingPolicy.Gang == nil {
			return 0
		}
		n = int64(pg.Spec.SchedulingPolicy.Gang.MinCount)
	case "coscheduling":
		obj := newCoschedulingPodGroup()
		if err := reader.Get(ctx, client.ObjectKey{Namespace: id.namespace, Name: id.name}, obj); err != nil {
			ctrl.LoggerFrom(ctx).V(2).Info("No gang size from the group object", "gang", id.String(), "kind", coschedulingPodGroup.Kind, "reason", err.Error())
			return 0
		}
		var found bool
		var err error
		if n, found, err = unstructured.NestedInt64(obj.Object, "spec", "minMember"); err != nil || !found {
			return 0
		}
	default:
		return 0
	}
	if n < 1 || n > 1<<31-1 {
		return 0
	}
	return int32(n)
}

// podGroupHandler maps a PodGroup of source ("podgroup", "coscheduling") to
// the Machines of the groups of the guests that name it, read from the
// cache (guests carry the machine-group label the pod cache keeps).
func (r *Reconciler) podGroupHandler(source string) func(multicluster.ClusterName, cluster.Cluster) mchandler.EventHandler {
	return func(name multicluster.ClusterName, cl cluster.Cluster) mchandler.EventHandler {
		enqueue := func(ctx context.Context, q queue, obj client.Object) {
			pods := &corev1.PodList{}
			if err := cl.GetCache().List(ctx, pods, client.InNamespace(obj.GetNamespace()), client.UnsafeDisableDeepCopy); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "Listing the pods of a PodGroup's namespace failed", "namespace", obj.GetNamespace())
				return
			}
			var groups []string
			for i := range pods.Items {
				id, _, _, ok := gangMembership(&pods.Items[i])
				if group := groupOf(&pods.Items[i]); ok && id.source == source && id.name == obj.GetName() && !slices.Contains(groups, group) {
					groups = append(groups, group)
				}
			}
			for _, group := range groups {
				enqueueGroup(ctx, name, cl, q, group)
			}
		}
		return handler.TypedFuncs[client.Object, mcreconcile.Request]{
			CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[client.Object], q queue) { enqueue(ctx, q, e.Object) },
			// Only the spec matters (the size); the status is the
			// scheduler's and ours.
			UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[client.Object], q queue) {
				if e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() {
					enqueue(ctx, q, e.ObjectNew)
				}
			},
			DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[client.Object], q queue) { enqueue(ctx, q, e.Object) },
		}
	}
}
