package scores

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/imperator-federation/imperator/hub/internal/store"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

func TestValue(t *testing.T) {
	cases := map[string]struct {
		free int32
		want int32
	}{
		"none free":       {free: 0, want: -100},
		"one free":        {free: 1, want: -98},
		"fifty free":      {free: 50, want: 0},
		"hundred free":    {free: 100, want: 100},
		"capped":          {free: 5000, want: 100},
		"negative clamps": {free: -3, want: -100},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Value(tc.free); got != tc.want {
				t.Errorf("Value(%d) = %d, want %d", tc.free, got, tc.want)
			}
		})
	}
}

func TestScores(t *testing.T) {
	typ := func(name string, maximum, used int32) *federationv1.MachineType {
		return &federationv1.MachineType{Name: name, Usage: &federationv1.Usage{Maximum: maximum, Used: used, Reserved: maximum - used}}
	}
	c := &store.Cluster{Name: "a", Liveness: store.LivenessAvailable, Machines: []*federationv1.Machine{
		{Name: "cpu", Group: "team-b", Types: []*federationv1.MachineType{typ("compute-xlarge", 2, 0), typ("small", 4, 4)}},
		{Name: "gpu", Group: "team-a", Types: []*federationv1.MachineType{typ("compute-xlarge", 4, 1)}},
	}}
	want := []clusterv1alpha1.AddOnPlacementScoreItem{
		{Name: "compute-xlarge", Value: -90},
		{Name: "small", Value: -100},
		{Name: "team-a.compute-xlarge", Value: -94},
		{Name: "team-b.compute-xlarge", Value: -96},
		{Name: "team-b.small", Value: -100},
	}
	if diff := cmp.Diff(want, Scores(c)); diff != "" {
		t.Errorf("Scores (-want +got):\n%s", diff)
	}
	if got := ScoreName("", "x"); got != "x" {
		t.Errorf("ScoreName without group = %q", got)
	}
	if got := ScoreName("g", "x"); got != "g.x" {
		t.Errorf("ScoreName with group = %q", got)
	}
}

// Free units of one type summed over groups past MaxInt32 score the
// maximum, never a wrapped negative sum's −100.
func TestScoresSaturate(t *testing.T) {
	huge := func() []*federationv1.MachineType {
		return []*federationv1.MachineType{{Name: "x", Usage: &federationv1.Usage{Maximum: math.MaxInt32, Reserved: math.MaxInt32}}}
	}
	c := &store.Cluster{Name: "a", Liveness: store.LivenessAvailable, Machines: []*federationv1.Machine{
		{Name: "m1", Group: "g1", Types: huge()},
		{Name: "m2", Group: "g2", Types: huge()},
	}}
	want := []clusterv1alpha1.AddOnPlacementScoreItem{{Name: "g1.x", Value: MaxScore}, {Name: "g2.x", Value: MaxScore}, {Name: "x", Value: MaxScore}}
	if diff := cmp.Diff(want, Scores(c)); diff != "" {
		t.Errorf("Scores (-want +got):\n%s", diff)
	}
}
