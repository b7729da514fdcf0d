package machine

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The group objects a gang's size may come from when its members carry no
// imperator.tenzen-y.io/gang-size (gang.go): a scheduler-plugins
// coscheduling PodGroup's spec.minMember, a native PodGroup's
// spec.schedulingPolicy.gang.minCount (scheduling.k8s.io/v1alpha2, served
// only with the GenericWorkload feature gate and that API version
// enabled). They are read live, once per gang and reconcile, and only for a
// gang at the gate without a size of its own: the agent neither caches nor
// watches them, so a cluster without their CRD or API costs nothing.
var (
	coschedulingPodGroup = schema.GroupVersionKind{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Kind: "PodGroup"}
	nativePodGroup       = schema.GroupVersionKind{Group: "scheduling.k8s.io", Version: "v1alpha2", Kind: "PodGroup"}
)

// The agent's generated role does not grant get on podgroups (the deploy
// RBAC minimality suite needs a scenario for every rule it ships): an
// operator who wants the PodGroups read grants it to the agent's
// ServiceAccount; without it, the read is refused and members need
// gang-size.

// groupSizes reads gang sizes from group objects, remembering each answer
// for one reconcile.
type groupSizes struct {
	reader client.Reader
	read   map[gangID]int32
}

// groupSizesFrom reads group objects through reader (the cluster's API
// reader, not the cache).
func groupSizesFrom(reader client.Reader) *groupSizes {
	return &groupSizes{reader: reader, read: map[gangID]int32{}}
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

func (s *groupSizes) get(ctx context.Context, id gangID) int32 {
	obj := &unstructured.Unstructured{}
	var path []string
	switch id.source {
	case "coscheduling":
		obj.SetGroupVersionKind(coschedulingPodGroup)
		path = []string{"spec", "minMember"}
	case "podgroup":
		obj.SetGroupVersionKind(nativePodGroup)
		path = []string{"spec", "schedulingPolicy", "gang", "minCount"}
	default:
		return 0
	}
	if err := s.reader.Get(ctx, client.ObjectKey{Namespace: id.namespace, Name: id.name}, obj); err != nil {
		ctrl.LoggerFrom(ctx).V(2).Info("No gang size from the group object", "gang", id.String(), "kind", obj.GetKind(), "reason", err.Error())
		return 0
	}
	n, found, err := unstructured.NestedInt64(obj.Object, path...)
	if err != nil || !found || n < 1 || n > 1<<31-1 {
		return 0
	}
	return int32(n)
}
