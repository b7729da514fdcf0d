package reservation

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/internal/schemes"
)

// Objects finds the reservation StatefulSets and Services of one namespace,
// the agent's and the original's alike, of every machine group; not a
// guest's objects, nor another namespace's reservations.
func TestObjectsAreTheNamespacesReservations(t *testing.T) {
	scheme, err := schemes.Spoke()
	if err != nil {
		t.Fatal(err)
	}
	meta := func(namespace, name string, role imperatorv1alpha1.PodRole) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{
			imperatorv1alpha1.PodRoleKey: string(role), imperatorv1alpha1.MachineGroupKey: "gpu-machines",
		}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&appsv1.StatefulSet{ObjectMeta: meta("imperator-system", "compute-xlarge-gpu-machines", imperatorv1alpha1.PodRoleReservation)},
		&appsv1.StatefulSet{ObjectMeta: meta("imperator-system", "gpu-machines-compute-xlarge", imperatorv1alpha1.PodRoleReservation)},
		&appsv1.StatefulSet{ObjectMeta: meta("imperator-system", "a-guest-workload", imperatorv1alpha1.PodRoleGuest)},
		&appsv1.StatefulSet{ObjectMeta: meta("elsewhere", "compute-xlarge-gpu-machines", imperatorv1alpha1.PodRoleReservation)},
		&corev1.Service{ObjectMeta: meta("imperator-system", "compute-xlarge-gpu-machines", imperatorv1alpha1.PodRoleReservation)},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "imperator-system", Name: "imperator-webhook"}},
	).Build()

	objects, err := Objects(context.Background(), c, "imperator-system")
	if err != nil {
		t.Fatalf("Objects() error = %v", err)
	}
	var got []string
	for _, obj := range objects {
		kind := "StatefulSet"
		if _, ok := obj.(*corev1.Service); ok {
			kind = "Service"
		}
		got = append(got, kind+" "+client.ObjectKeyFromObject(obj).String())
	}
	want := []string{
		"StatefulSet imperator-system/compute-xlarge-gpu-machines",
		"StatefulSet imperator-system/gpu-machines-compute-xlarge",
		"Service imperator-system/compute-xlarge-gpu-machines",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Objects() (-want +got):\n%s", diff)
	}
}
