package reporter

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

func TestValidateHoldRequest(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	valid := func() *federationv1.HoldRequest {
		return &federationv1.HoldRequest{Name: "train-42", Group: "team-a", Type: "compute-xlarge", Count: 4,
			ValidUntil: timestamppb.New(now.Add(time.Hour)), FleetHold: "imperator-system/train-42"}
	}
	cases := map[string]struct {
		change    func(*federationv1.HoldRequest)
		wantField string
	}{
		"valid":                        {change: func(*federationv1.HoldRequest) {}},
		"release needs only the name":  {change: func(r *federationv1.HoldRequest) { *r = federationv1.HoldRequest{Name: "x", Release: true} }},
		"name guests cannot quote":     {change: func(r *federationv1.HoldRequest) { r.Name = "Train_42" }, wantField: "name"},
		"no group":                     {change: func(r *federationv1.HoldRequest) { r.Group = "" }, wantField: "group"},
		"bad type":                     {change: func(r *federationv1.HoldRequest) { r.Type = "X" }, wantField: "type"},
		"zero count":                   {change: func(r *federationv1.HoldRequest) { r.Count = 0 }, wantField: "count"},
		"count over the CRD's maximum": {change: func(r *federationv1.HoldRequest) { r.Count = 10001 }, wantField: "count"},
		"valid_until in the past":      {change: func(r *federationv1.HoldRequest) { r.ValidUntil = timestamppb.New(now.Add(-time.Second)) }, wantField: "valid_until"},
		"no valid_until":               {change: func(r *federationv1.HoldRequest) { r.ValidUntil = nil }, wantField: "valid_until"},
		"namespaces":                   {change: func(r *federationv1.HoldRequest) { r.Namespaces = []string{"team-a", "team-b"} }},
		"a namespace that is no label": {change: func(r *federationv1.HoldRequest) { r.Namespaces = []string{"team-a", "Team_B"} }, wantField: "namespaces[1]"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := valid()
			tc.change(req)
			err := validateHoldRequest(req, now)
			switch {
			case tc.wantField == "" && err != nil:
				t.Errorf("validateHoldRequest() = %v, want nil", err)
			case tc.wantField != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.wantField+" ")):
				t.Errorf("validateHoldRequest() = %v, want an error naming %s", err, tc.wantField)
			}
		})
	}
}

// TestARetriedHoldRequestIsTheSameBookingAndAnEarlierOneIsNot: the spoke
// answers a retried request from the CapacityHold it made for it, but not
// from a hold of the same name left by an earlier booking (other
// validUntil or namespaces): that one is another team's units.
func TestARetriedHoldRequestIsTheSameBookingAndAnEarlierOneIsNot(t *testing.T) {
	until := time.Date(2026, 5, 1, 13, 0, 0, 0, time.UTC)
	req := &federationv1.HoldRequest{Name: "train-42", Group: "team-a", Type: "compute-xlarge", Count: 4,
		ValidUntil: timestamppb.New(until.Add(300 * time.Millisecond)), FleetHold: "imperator-system/train-42", Namespaces: []string{"team-a", "team-b"}}
	made := &imperatorv1alpha1.CapacityHold{Spec: imperatorv1alpha1.CapacityHoldSpec{
		MachineGroup: "team-a", MachineType: "compute-xlarge", Count: 4, ValidUntil: metav1.NewTime(until),
		FleetHold: "imperator-system/train-42", Namespaces: []string{"team-b", "team-a"},
	}}
	if !sameBooking(made, req) {
		t.Errorf("sameBooking(the hold made for this request) = false, want true")
	}
	earlier := made.DeepCopy()
	earlier.Spec.ValidUntil = metav1.NewTime(until.Add(-time.Hour))
	if sameBooking(earlier, req) {
		t.Errorf("sameBooking(hold of an earlier booking with another validUntil) = true, want false")
	}
	open := made.DeepCopy()
	open.Spec.Namespaces = nil
	if sameBooking(open, req) {
		t.Errorf("sameBooking(hold open to every namespace, for a request limited to two) = true, want false")
	}
}
