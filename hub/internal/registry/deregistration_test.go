package registry

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/imperator-federation/imperator/internal/schemes"
)

// TestDeregisteredClusterIsForgotten: the hub forgets a cluster (ends its
// stream, drops it from its answers) once its ManagedCluster is gone, and
// keeps one registered again under the same name.
func TestDeregisteredClusterIsForgotten(t *testing.T) {
	scheme, err := schemes.Hub()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(&clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: "registered"}}).Build()
	var forgotten []string
	d := &Deregistrations{Reader: c, Forget: func(cluster string) { forgotten = append(forgotten, cluster) }}
	for _, name := range []string{"registered", "gone"} {
		if _, err := d.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: name}}); err != nil {
			t.Fatalf("reconciling %s: %v", name, err)
		}
	}
	if len(forgotten) != 1 || forgotten[0] != "gone" {
		t.Errorf("forgotten %v, want only the cluster whose ManagedCluster is gone", forgotten)
	}
}
