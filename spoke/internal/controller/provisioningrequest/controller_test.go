package provisioningrequest

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// The watches wake the request a hold serves and the request a pod
// consumes, and nothing for objects of someone else.
func TestWatchesMapToTheRequest(t *testing.T) {
	train := []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "train"}}}
	consumer := func(class string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "w-0", Annotations: map[string]string{
			imperatorv1alpha1.ConsumeProvisioningRequestAnnotation: "train", imperatorv1alpha1.ProvisioningClassNameAnnotation: class}}}
	}
	cases := map[string]struct {
		mapper func(context.Context, client.Object) []reconcile.Request
		obj    client.Object
		want   []reconcile.Request
	}{
		"a hold made for a request": {mapper: holdToRequest, want: train, obj: &imperatorv1alpha1.CapacityHold{ObjectMeta: metav1.ObjectMeta{
			Name: "pr-x", Labels: map[string]string{RequestNamespaceLabel: "team-a"}, Annotations: map[string]string{RequestNameAnnotation: "train"}}}},
		"a hold someone made by hand":            {mapper: holdToRequest, obj: &imperatorv1alpha1.CapacityHold{ObjectMeta: metav1.ObjectMeta{Name: "train"}}},
		"a pod consuming a request of the class": {mapper: consumerToRequest, obj: consumer(imperatorv1alpha1.CapacityHoldProvisioningClass), want: train},
		"a pod of the legacy class names a hold, not a request": {mapper: consumerToRequest,
			obj: consumer(imperatorv1alpha1.LegacyCapacityHoldProvisioningClass)},
		"a pod of Cluster Autoscaler's class": {mapper: consumerToRequest, obj: consumer("check-capacity.autoscaling.x-k8s.io")},
		"a pod consuming nothing":             {mapper: consumerToRequest, obj: &corev1.Pod{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.mapper(context.Background(), tc.obj)); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOfOurClass(t *testing.T) {
	for class, want := range map[string]bool{
		imperatorv1alpha1.CapacityHoldProvisioningClass:       true,
		imperatorv1alpha1.LegacyCapacityHoldProvisioningClass: false,
		"check-capacity.autoscaling.x-k8s.io":                 false,
		"":                                                    false,
	} {
		pr := &ProvisioningRequest{Spec: ProvisioningRequestSpec{ProvisioningClassName: class}}
		if got := ofOurClass(pr); got != want {
			t.Errorf("ofOurClass(%q) = %t, want %t", class, got, want)
		}
	}
	if ofOurClass(&corev1.Pod{}) {
		t.Error("ofOurClass(a Pod) = true, want false")
	}
}
