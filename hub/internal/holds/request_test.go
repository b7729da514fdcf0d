package holds

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// TestAHoldRequestCarriesDurationsAndTheBooking: the spoke reads how long
// to hold and how long to take from durations, never from the hub's clock;
// the booking (the FleetHold's UID) tells a retry from an earlier booking
// of the same name.
func TestAHoldRequestCarriesDurationsAndTheBooking(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	fh := &imperatorv1alpha1.FleetHold{
		ObjectMeta: metav1.ObjectMeta{Name: "train-42", Namespace: "imperator-system", UID: "uid-1"},
		Spec:       imperatorv1alpha1.FleetHoldSpec{ValidUntil: metav1.NewTime(now.Add(time.Hour)), Namespaces: []string{"team-a"}},
	}
	part := imperatorv1alpha1.FleetHoldCluster{Cluster: "spoke-a", Group: "team-a", Type: "compute-xlarge", Count: 2}
	got := holdRequest(fh, part, false, now, now.Add(10*time.Second))
	want := &federationv1.HoldRequest{
		Name: "train-42", Group: "team-a", Type: "compute-xlarge", Count: 2,
		FleetHold: "imperator-system/train-42", Namespaces: []string{"team-a"}, Booking: "uid-1",
		ValidFor: durationpb.New(time.Hour), AnswerWithin: durationpb.New(10 * time.Second),
		ValidUntil: timestamppb.New(now.Add(time.Hour)), Deadline: timestamppb.New(now.Add(10 * time.Second)),
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("holdRequest() (-want +got):\n%s", diff)
	}
}
