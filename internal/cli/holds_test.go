package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

func TestHoldDetailNamesTheClustersAndTheGuestLabels(t *testing.T) {
	part := &queryv1.FleetHoldCluster{Cluster: "spoke-b", Group: "hopper-machine", Type: "compute-xlarge", Count: 2, Held: 2, Result: federationv1.HoldResult_HOLD_RESULT_HELD}
	cases := map[string]struct {
		hold         *queryv1.FleetHold
		wantContains []string
		wantAbsent   []string
	}{
		"held, by machine type": {
			hold: &queryv1.FleetHold{Name: "train-42", Phase: queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_HELD, Count: 2,
				MachineType: &queryv1.MachineTypeRef{Type: "compute-xlarge"}, Clusters: []*queryv1.FleetHoldCluster{part},
				GuestLabels: map[string]string{"imperator.tenzen-y.io/hold": "train-42", "imperator.tenzen-y.io/pod-role": "guest"}},
			wantContains: []string{"Held", "spoke-b:2", "Guests on cluster spoke-b carry the labels:",
				"imperator.tenzen-y.io/hold: train-42", "imperator.tenzen-y.io/machine-group: hopper-machine",
				"imperator.tenzen-y.io/machine-type: compute-xlarge", "imperator.tenzen-y.io/pod-role: guest"},
		},
		"failed, by shape: the reasons, no labels": {
			hold: &queryv1.FleetHold{Name: "h100", Phase: queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_FAILED, Count: 1,
				Shape:    &queryv1.ResourceShape{GpuCount: 8},
				Message:  "not every cluster could hold its part",
				Clusters: []*queryv1.FleetHoldCluster{{Cluster: "spoke-a", Count: 1, Result: federationv1.HoldResult_HOLD_RESULT_TIMED_OUT, Reason: "NoAnswer"}}},
			wantContains: []string{"Failed", "TimedOut", "NoAnswer", "not every cluster could hold its part"},
			wantAbsent:   []string{"carry the labels"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			p, err := newPrinter(formatTable, Env{Stdout: &out, Now: time.Now})
			if err != nil {
				t.Fatal(err)
			}
			tc.hold.ValidUntil = timestamppb.Now()
			if err := p.holdDetail(tc.hold); err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.wantContains {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
			for _, absent := range tc.wantAbsent {
				if strings.Contains(out.String(), absent) {
					t.Errorf("output has %q:\n%s", absent, out.String())
				}
			}
		})
	}
}
