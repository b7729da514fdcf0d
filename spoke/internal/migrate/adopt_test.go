package migrate

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/internal/schemes"
)

// An adoption pass over several Machines detaches the namespace's
// reservations once (each Detach lists every reservation StatefulSet and
// Service of the namespace), and a failed Detach is reported on every
// Machine that needed it, as each Machine's step depends on it.
func TestPassDetachesOncePerPass(t *testing.T) {
	cases := map[string]struct {
		listErr      error
		wantDetaches int
		wantProgress map[string]string
	}{
		"three Machines, one Detach": {
			wantDetaches: 1,
			wantProgress: map[string]string{
				"a": "waiting for the agent's MachineNodePool a-node-pool",
				"b": "waiting for the agent's MachineNodePool b-node-pool",
				"c": "waiting for the agent's MachineNodePool c-node-pool",
			},
		},
		"a failed Detach fails every Machine's step": {
			listErr:      errors.New("connection refused"),
			wantDetaches: 1,
			wantProgress: map[string]string{
				"a": "listing reservation StatefulSets in imperator-system: connection refused",
				"b": "listing reservation StatefulSets in imperator-system: connection refused",
				"c": "listing reservation StatefulSets in imperator-system: connection refused",
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			scheme, err := schemes.Spoke()
			if err != nil {
				t.Fatal(err)
			}
			var objs []client.Object
			for _, name := range []string{"a", "b", "c"} {
				objs = append(objs, &imperatorv1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{
					Name:        name,
					Labels:      map[string]string{imperatorv1alpha1.MachineGroupKey: "group-" + name},
					Annotations: map[string]string{AdoptAnnotation: "true"},
				}})
			}
			detaches := 0
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
				List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
					listOpts := (&client.ListOptions{}).ApplyOptions(opts)
					// Detach's list: every reservation StatefulSet of the
					// namespace, of any machine group.
					if _, ok := list.(*appsv1.StatefulSetList); ok && listOpts.LabelSelector != nil &&
						!strings.Contains(listOpts.LabelSelector.String(), imperatorv1alpha1.MachineGroupKey) {
						detaches++
						if tc.listErr != nil {
							return tc.listErr
						}
					}
					return c.List(ctx, list, opts...)
				},
			}).Build()
			a := &Adopter{Client: c, Namespace: "imperator-system"}
			err = a.Pass(context.Background())
			if (err != nil) != (tc.listErr != nil) {
				t.Fatalf("Pass() error = %v, want an error: %v", err, tc.listErr != nil)
			}
			if detaches != tc.wantDetaches {
				t.Errorf("Detach listed the namespace's reservations %d times in one pass, want %d", detaches, tc.wantDetaches)
			}
			got := map[string]string{}
			for _, name := range []string{"a", "b", "c"} {
				m := &imperatorv1alpha1.Machine{}
				if err := c.Get(context.Background(), client.ObjectKey{Name: name}, m); err != nil {
					t.Fatal(err)
				}
				got[name] = m.Annotations[AdoptionAnnotation]
			}
			if diff := cmp.Diff(tc.wantProgress, got); diff != "" {
				t.Errorf("adoption progress (-want +got):\n%s", diff)
			}
		})
	}
}
