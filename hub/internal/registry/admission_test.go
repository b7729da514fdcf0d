package registry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/imperator-federation/imperator/internal/identity"
)

const currentUID = "2f1d7e0a-6c55-4a8e-8d3b-7a9e0c1b2d3e"

// managedCluster is cluster a's ManagedCluster of registration currentUID.
func managedCluster(accepts bool, deleting bool) *clusterv1.ManagedCluster {
	mc := &clusterv1.ManagedCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "a", UID: types.UID(currentUID)},
		Spec:       clusterv1.ManagedClusterSpec{HubAcceptsClient: accepts},
	}
	if deleting {
		now := metav1.Now()
		mc.DeletionTimestamp = &now
		mc.Finalizers = []string{"example.com/keep"}
	}
	return mc
}

func TestAdmission(t *testing.T) {
	cases := map[string]struct {
		mc         *clusterv1.ManagedCluster
		spoke      identity.Spoke
		wantReason RefusalReason
		wantMsg    string
	}{
		"certificate of the current registration": {
			mc:    managedCluster(true, false),
			spoke: identity.Spoke{Cluster: "a", RegistrationUID: currentUID},
		},
		"certificate of an earlier registration": {
			mc:         managedCluster(true, false),
			spoke:      identity.Spoke{Cluster: "a", RegistrationUID: "9c0b6a4e-0000-4000-8000-000000000001"},
			wantReason: RefusedEarlierRegistration,
			wantMsg:    `certificate was issued for an earlier registration of cluster "a"; join again with a new token`,
		},
		"certificate without registration": {
			mc:         managedCluster(true, false),
			spoke:      identity.Spoke{Cluster: "a"},
			wantReason: RefusedNoRegistration,
			wantMsg:    `certificate of cluster "a" names no registration (issued by an older hub); join again with a new token`,
		},
		"current registration not accepted": {
			mc:         managedCluster(false, false),
			spoke:      identity.Spoke{Cluster: "a", RegistrationUID: currentUID},
			wantReason: RefusedNotAccepted,
			wantMsg:    `the hub does not accept cluster "a": its ManagedCluster has spec.hubAcceptsClient=false`,
		},
		"earlier registration of a cluster not accepted names the registration": {
			mc:         managedCluster(false, false),
			spoke:      identity.Spoke{Cluster: "a", RegistrationUID: "other"},
			wantReason: RefusedEarlierRegistration,
			wantMsg:    `certificate was issued for an earlier registration of cluster "a"; join again with a new token`,
		},
		"cluster deregistered": {
			spoke:      identity.Spoke{Cluster: "a", RegistrationUID: currentUID},
			wantReason: RefusedNotRegistered,
			wantMsg:    `cluster "a" is not registered at the hub (its ManagedCluster is missing or being deleted); join again with a new token`,
		},
		"cluster being deregistered": {
			mc:         managedCluster(true, true),
			spoke:      identity.Spoke{Cluster: "a", RegistrationUID: currentUID},
			wantReason: RefusedNotRegistered,
			wantMsg:    `cluster "a" is not registered at the hub (its ManagedCluster is missing or being deleted); join again with a new token`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := Admission(tc.mc, tc.spoke, time.Now())
			var gotReason RefusalReason
			var refused *RefusedError
			if errors.As(err, &refused) {
				gotReason = refused.Reason
			} else if err != nil {
				t.Fatalf("Admission returned %v, want nil or a *RefusedError", err)
			}
			if gotReason != tc.wantReason {
				t.Errorf("refusal = %q, want %q (error %v)", gotReason, tc.wantReason, err)
			}
			if err != nil && err.Error() != tc.wantMsg {
				t.Errorf("message:\n got %s\nwant %s", err.Error(), tc.wantMsg)
			}
		})
	}
}

func TestAdmitterReadsLiveWhenTheCacheRefuses(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clusterv1.Install(scheme); err != nil {
		t.Fatal(err)
	}
	failing := interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
		return apierrors.NewServiceUnavailable("hub API down")
	}}
	stale := managedCluster(true, false)
	stale.UID = "earlier"
	current := managedCluster(true, false)
	cases := map[string]struct {
		cached, live  client.Reader
		spoke         identity.Spoke
		wantRefusal   RefusalReason
		wantReadError bool
	}{
		"cache admits": {
			cached: fake.NewClientBuilder().WithScheme(scheme).WithObjects(current.DeepCopy()).Build(),
			live:   fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(failing).Build(),
			spoke:  identity.Spoke{Cluster: "a", RegistrationUID: currentUID},
		},
		"cache has not seen the new registration yet": {
			cached: fake.NewClientBuilder().WithScheme(scheme).WithObjects(stale).Build(),
			live:   fake.NewClientBuilder().WithScheme(scheme).WithObjects(current.DeepCopy()).Build(),
			spoke:  identity.Spoke{Cluster: "a", RegistrationUID: currentUID},
		},
		"cache has not seen the cluster yet": {
			cached: fake.NewClientBuilder().WithScheme(scheme).Build(),
			live:   fake.NewClientBuilder().WithScheme(scheme).WithObjects(current.DeepCopy()).Build(),
			spoke:  identity.Spoke{Cluster: "a", RegistrationUID: currentUID},
		},
		"both refuse": {
			cached:      fake.NewClientBuilder().WithScheme(scheme).WithObjects(current.DeepCopy()).Build(),
			live:        fake.NewClientBuilder().WithScheme(scheme).WithObjects(current.DeepCopy()).Build(),
			spoke:       identity.Spoke{Cluster: "a", RegistrationUID: "earlier"},
			wantRefusal: RefusedEarlierRegistration,
		},
		"live read fails": {
			cached:        fake.NewClientBuilder().WithScheme(scheme).Build(),
			live:          fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(failing).Build(),
			spoke:         identity.Spoke{Cluster: "a", RegistrationUID: currentUID},
			wantReadError: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := Admitter(tc.cached, tc.live)(context.Background(), tc.spoke)
			var refused *RefusedError
			var gotRefusal RefusalReason
			if errors.As(err, &refused) {
				gotRefusal = refused.Reason
			}
			if diff := cmp.Diff(tc.wantRefusal, gotRefusal); diff != "" {
				t.Errorf("refusal (-want +got):\n%s", diff)
			}
			if gotReadError := err != nil && refused == nil; gotReadError != tc.wantReadError {
				t.Errorf("read error = %v, want one: %t", err, tc.wantReadError)
			}
		})
	}
}
