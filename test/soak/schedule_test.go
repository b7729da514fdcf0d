package soak

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var testTopology = Topology{
	Spokes: []string{"spoke-a", "spoke-b"}, Replicas: []string{"hub", "hub-2"},
	Clusters: []string{"hub", "spoke-a", "spoke-b"}, Nodes: []string{"spoke-a/utaha", "spoke-b/kasumi"},
}

func TestScheduleIsDrawnFromTheSeed(t *testing.T) {
	a := NewSchedule(42, 300*time.Second, CalmReserve, FaultEvery, testTopology)
	b := NewSchedule(42, 300*time.Second, CalmReserve, FaultEvery, testTopology)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("one seed drew two schedules (-first +second):\n%s", diff)
	}
	if c := NewSchedule(43, 300*time.Second, CalmReserve, FaultEvery, testTopology); cmp.Equal(a, c) {
		t.Fatal("seeds 42 and 43 drew the same schedule")
	}
}

func TestScheduleShape(t *testing.T) {
	for seed := range uint64(50) {
		s := NewSchedule(seed, 300*time.Second, CalmReserve, FaultEvery, testTopology)
		var planned time.Duration
		seen := map[int]bool{}
		for i, r := range s.Rounds {
			planned += r.Storm + CalmReserve
			for _, f := range r.Faults {
				if f.Round != i || f.At < 0 || f.At+f.For > r.Storm {
					t.Errorf("seed %d: %s does not fit its round %d (storm %s)", seed, f, i, r.Storm)
				}
				if seen[f.Index] {
					t.Errorf("seed %d: index %d drawn twice", seed, f.Index)
				}
				seen[f.Index] = true
			}
			for x, f := range r.Faults {
				for _, g := range r.Faults[x+1:] {
					if f.resource() == g.resource() && overlaps([]Fault{f}, g) {
						t.Errorf("seed %d: %s and %s act on %s at once", seed, f, g, f.resource())
					}
				}
			}
		}
		if planned > 300*time.Second {
			t.Errorf("seed %d: the rounds plan %s for a run of 300s", seed, planned)
		}
		if len(s.Faults()) == 0 {
			t.Errorf("seed %d: no fault drawn", seed)
		}
	}
}

func TestKeepReplaysTheChosenFaults(t *testing.T) {
	s := NewSchedule(7, 300*time.Second, CalmReserve, FaultEvery, testTopology)
	all := s.Faults()
	keep, err := ParseIndexes(Indexes(all[1:2]))
	if err != nil {
		t.Fatal(err)
	}
	kept := s.Keep(func(i int) bool { return keep[i] })
	if diff := cmp.Diff(all[1:2], kept.Faults()); diff != "" {
		t.Errorf("kept faults (-want +got):\n%s", diff)
	}
	if len(kept.Rounds) != len(s.Rounds) {
		t.Errorf("kept %d rounds of %d: the rounds' timing must stay", len(kept.Rounds), len(s.Rounds))
	}
	none, err := ParseIndexes(Indexes(nil))
	if err != nil || len(none) != 0 {
		t.Errorf("ParseIndexes(%q) = %v, %v; want no fault", Indexes(nil), none, err)
	}
}

func TestParseIndexesRefusesWhatIsNotAnIndex(t *testing.T) {
	for _, in := range []string{"1,x", "-3", "1;2"} {
		if _, err := ParseIndexes(in); err == nil {
			t.Errorf("ParseIndexes(%q) took it", in)
		}
	}
}
