package schemes

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// TestSchemesKnowEveryKindTheBinariesReadAndWrite fails when a scheme lacks a
// kind its binary reads or writes (the client would refuse the object: "no
// kind is registered"), or when the spoke's knows the hub's OCM kinds, which
// its RBAC does not cover.
func TestSchemesKnowEveryKindTheBinariesReadAndWrite(t *testing.T) {
	spokeKinds := []runtime.Object{&corev1.Pod{}, &corev1.Secret{}, &appsv1.StatefulSet{}, &schedulingv1.PriorityClass{},
		&coordinationv1.Lease{}, &imperatorv1alpha1.Machine{}, &imperatorv1alpha1.CapacityHold{}}
	ocmKinds := []runtime.Object{&clusterv1.ManagedCluster{}, &clusterv1alpha1.AddOnPlacementScore{}}
	tests := map[string]struct {
		build   func() (*runtime.Scheme, error)
		known   []runtime.Object
		unknown []runtime.Object
	}{
		"spoke": {build: Spoke, known: spokeKinds, unknown: ocmKinds},
		"hub":   {build: Hub, known: append(append([]runtime.Object{&imperatorv1alpha1.FleetHold{}}, spokeKinds...), ocmKinds...)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			scheme, err := tc.build()
			if err != nil {
				t.Fatal(err)
			}
			for _, obj := range tc.known {
				if _, _, err := scheme.ObjectKinds(obj); err != nil {
					t.Errorf("%T: %v", obj, err)
				}
			}
			for _, obj := range tc.unknown {
				if _, _, err := scheme.ObjectKinds(obj); err == nil {
					t.Errorf("%T is known to the %s scheme, want unknown", obj, name)
				}
			}
		})
	}
}
