package reporter

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

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
