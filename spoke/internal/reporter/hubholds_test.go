package reporter

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// TestTheSpokeReportsTheLiveHoldsTheHubAskedFor: the hub learns of every
// CapacityHold it asked for that may hold units (Pending or Active), with
// its booking, and of nothing else: not a team's own holds, not one that
// failed or expired.
func TestTheSpokeReportsTheLiveHoldsTheHubAskedFor(t *testing.T) {
	now := time.Now()
	hold := func(name, fleetHold, booking string, validUntil time.Time, conditions ...string) *imperatorv1alpha1.CapacityHold {
		h := &imperatorv1alpha1.CapacityHold{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: imperatorv1alpha1.CapacityHoldSpec{MachineGroup: "team-a", MachineType: "compute-xlarge", Count: 2,
				ValidUntil: metav1.NewTime(validUntil), FleetHold: fleetHold},
		}
		if booking != "" {
			h.Annotations = map[string]string{BookingAnnotation: booking}
		}
		for _, c := range conditions {
			meta.SetStatusCondition(&h.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: "Test"})
		}
		if meta.IsStatusConditionTrue(h.Status.Conditions, imperatorv1alpha1.HoldConditionProvisioned) {
			h.Status.Held = 2
		}
		return h
	}
	objects := []client.Object{
		hold("active", "imperator-system/active", "uid-1", now.Add(time.Hour), imperatorv1alpha1.HoldConditionAccepted, imperatorv1alpha1.HoldConditionProvisioned),
		hold("pending", "imperator-system/pending", "uid-2", now.Add(time.Hour)),
		hold("old-hub", "imperator-system/old-hub", "", now.Add(time.Hour), imperatorv1alpha1.HoldConditionAccepted, imperatorv1alpha1.HoldConditionProvisioned),
		hold("teams-own", "", "", now.Add(time.Hour), imperatorv1alpha1.HoldConditionAccepted, imperatorv1alpha1.HoldConditionProvisioned),
		hold("failed", "imperator-system/failed", "uid-3", now.Add(time.Hour), imperatorv1alpha1.HoldConditionAccepted, imperatorv1alpha1.HoldConditionFailed),
		hold("expired", "imperator-system/expired", "uid-4", now.Add(-time.Minute), imperatorv1alpha1.HoldConditionAccepted, imperatorv1alpha1.HoldConditionProvisioned),
	}
	cache := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objects...).Build()
	got, err := hubHolds(context.Background(), cache, now)
	if err != nil {
		t.Fatal(err)
	}
	want := []*federationv1.HubHold{
		{Name: "active", FleetHold: "imperator-system/active", Booking: "uid-1", Group: "team-a", Type: "compute-xlarge", Count: 2, Held: 2},
		{Name: "old-hub", FleetHold: "imperator-system/old-hub", Group: "team-a", Type: "compute-xlarge", Count: 2, Held: 2},
		{Name: "pending", FleetHold: "imperator-system/pending", Booking: "uid-2", Group: "team-a", Type: "compute-xlarge", Count: 2},
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("hubHolds() (-want +got):\n%s", diff)
	}
	if !sameHubHolds(got, want) || sameHubHolds(got, want[:2]) {
		t.Errorf("sameHubHolds does not tell the lists apart")
	}
}

// TestHoldsAreOfferedOnlyWhereTheAgentCanHold: the agent offers the hub
// capacity holds only when the CapacityHold CRD is served (they are
// watched) and it may create and delete them; otherwise every hold placed
// on it would be refused.
func TestHoldsAreOfferedOnlyWhereTheAgentCanHold(t *testing.T) {
	cases := map[string]struct {
		crdServed bool
		allowed   map[string]bool
		wantHolds bool
		wantHub   bool
	}{
		"CRD served, may create and delete": {crdServed: true, allowed: map[string]bool{"create": true, "delete": true}, wantHolds: true, wantHub: true},
		"CRD served, may not create":        {crdServed: true, allowed: map[string]bool{"delete": true}, wantHub: true},
		"CRD served, may not delete":        {crdServed: true, allowed: map[string]bool{"create": true}, wantHub: true},
		"CRD not served":                    {allowed: map[string]bool{"create": true, "delete": true}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			review := interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if r, ok := obj.(*authorizationv1.SelfSubjectAccessReview); ok {
					r.Status.Allowed = tc.allowed[r.Spec.ResourceAttributes.Verb]
					return nil
				}
				return c.Create(ctx, obj, opts...)
			}}
			r := &Reporter{opts: Options{Client: fake.NewClientBuilder().WithScheme(testScheme(t)).WithInterceptorFuncs(review).Build()}, log: logr.Discard()}
			r.reportsHubHolds.Store(tc.crdServed)
			got := r.capabilities(context.Background())
			if slices.Contains(got, holdCapability) != tc.wantHolds || slices.Contains(got, hubHoldsCapability) != tc.wantHub {
				t.Errorf("capabilities = %v, want holds %t, hub-holds %t", got, tc.wantHolds, tc.wantHub)
			}
			if !slices.Contains(got, "delta") {
				t.Errorf("capabilities = %v, want the others kept", got)
			}
		})
	}
}
