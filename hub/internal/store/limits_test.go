package store

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/imperator-federation/imperator/hub/internal/ingest"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// machines returns n valid Machines named m00000, m00001, …
func machines(n int) []*federationv1.Machine {
	out := make([]*federationv1.Machine, n)
	for i := range out {
		out[i] = machine(fmt.Sprintf("m%05d", i), 1)
	}
	return out
}

// refusal is what a refused message's error says, for comparisons.
type refusal struct{ Reason, Field string }

func refusalOf(t *testing.T, err error) *refusal {
	t.Helper()
	if err == nil {
		return nil
	}
	var ie *ingest.Error
	if !errors.As(err, &ie) {
		t.Fatalf("refusal %v is not an *ingest.Error", err)
	}
	return &refusal{Reason: ie.Reason(), Field: ie.Field()}
}

// A spoke that sends an inventory breaking the limits is refused with the
// field named, and queries keep answering with the last good inventory —
// marked stale, because the spoke has moved on — until a good Snapshot.
func TestRefusedInventoryKeepsTheLastGoodOne(t *testing.T) {
	duplicateTypes := machine("m1", 1)
	duplicateTypes.Types = append(duplicateTypes.Types, duplicateTypes.Types[0])
	negative := machine("m1", 1)
	negative.Types[0].Usage = &federationv1.Usage{Maximum: 1, Used: -1}
	unknownCondition := machine("m1", 1)
	unknownCondition.Nodes = []*federationv1.PoolNode{{Name: "node-1", MachineType: "t", Condition: 42}}

	cases := map[string]struct {
		apply       func(s *Store) Result
		wantRefusal *refusal
	}{
		"a Snapshot with 10,001 Machines": {
			apply:       func(s *Store) Result { return s.ApplySnapshot("a", 1, snapshot(2, machines(10_001)...)) },
			wantRefusal: &refusal{Reason: "FieldValueTooMany", Field: "snapshot.machines"},
		},
		"a Snapshot with duplicate type names": {
			apply:       func(s *Store) Result { return s.ApplySnapshot("a", 1, snapshot(2, duplicateTypes)) },
			wantRefusal: &refusal{Reason: "FieldValueDuplicate", Field: "snapshot.machines[0].types[1].name"},
		},
		"a Snapshot with a negative count": {
			apply:       func(s *Store) Result { return s.ApplySnapshot("a", 1, snapshot(2, negative)) },
			wantRefusal: &refusal{Reason: "FieldValueInvalid", Field: "snapshot.machines[0].types[0].usage.used"},
		},
		"a Snapshot with an unknown node condition": {
			apply:       func(s *Store) Result { return s.ApplySnapshot("a", 1, snapshot(2, unknownCondition)) },
			wantRefusal: &refusal{Reason: "FieldValueNotSupported", Field: "snapshot.machines[0].nodes[0].condition"},
		},
		"a Snapshot with two Machines of one name": {
			apply:       func(s *Store) Result { return s.ApplySnapshot("a", 1, snapshot(2, machine("m1", 1), machine("m1", 2))) },
			wantRefusal: &refusal{Reason: "FieldValueDuplicate", Field: "snapshot.machines[1].name"},
		},
		"a Delta upserting a Machine with an invalid name": {
			apply: func(s *Store) Result {
				return s.ApplyDelta("a", 1, delta(2, []*federationv1.Machine{machine("Not_A_Name", 1)}))
			},
			wantRefusal: &refusal{Reason: "FieldValueInvalid", Field: "delta.upserts[0].name"},
		},
		"a Delta with a negative count": {
			apply:       func(s *Store) Result { return s.ApplyDelta("a", 1, delta(2, []*federationv1.Machine{negative})) },
			wantRefusal: &refusal{Reason: "FieldValueInvalid", Field: "delta.upserts[0].types[0].usage.used"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := New(clocktesting.NewFakePassiveClock(time.Unix(1000, 0)), 0)
			s.Connect("a", &federationv1.Hello{ClusterName: "a", Epoch: 1})
			if res := s.ApplySnapshot("a", 1, snapshot(1, machine("m1", 3))); !res.Ack {
				t.Fatalf("good snapshot not acknowledged: %+v", res)
			}
			res := tc.apply(s)
			if diff := cmp.Diff(tc.wantRefusal, refusalOf(t, res.Refused)); diff != "" {
				t.Errorf("refusal (-want +got):\n%s", diff)
			}
			if res.Ack || res.Resync != "" {
				t.Errorf("refused message answered with ack=%v resync=%q, want neither", res.Ack, res.Resync)
			}
			c, _ := s.Get("a")
			if diff := cmp.Diff(map[string]int32{"m1": 3}, available(c)); diff != "" || c.Generation != 1 {
				t.Errorf("inventory after the refusal: generation %d, machines (-want +got):\n%s", c.Generation, diff)
			}
			if c.Outdated == "" || !c.Stale() {
				t.Errorf("after a refusal Outdated=%q Stale=%v, want a reason and stale figures", c.Outdated, c.Stale())
			}

			if res := s.ApplySnapshot("a", 1, snapshot(3, machine("m1", 4))); !res.Ack || res.Refused != nil {
				t.Fatalf("good snapshot after the refusal: %+v", res)
			}
			if c, _ := s.Get("a"); c.Outdated != "" || c.Stale() {
				t.Errorf("after a good snapshot Outdated=%q Stale=%v, want current figures", c.Outdated, c.Stale())
			}
		})
	}
}

// Deltas cannot grow an inventory past the cap one Machine at a time: the
// cap applies to what a Delta results in.
func TestDeltasCannotGrowMachinesPastTheCap(t *testing.T) {
	s := New(clocktesting.NewFakePassiveClock(time.Unix(1000, 0)), 0)
	s.Connect("a", &federationv1.Hello{ClusterName: "a", Epoch: 1})
	if res := s.ApplySnapshot("a", 1, snapshot(1, machines(ingest.DefaultMaxMachines-2)...)); !res.Ack {
		t.Fatalf("snapshot under the cap: %+v", res)
	}
	gen := uint64(1)
	for i := range 2 {
		gen++
		if res := s.ApplyDelta("a", 1, delta(gen, []*federationv1.Machine{machine(fmt.Sprintf("extra-%d", i), 1)})); !res.Ack || res.Refused != nil {
			t.Fatalf("delta %d up to the cap: %+v", gen, res)
		}
	}
	res := s.ApplyDelta("a", 1, delta(gen+1, []*federationv1.Machine{machine("one-too-many", 1)}))
	if diff := cmp.Diff(&refusal{Reason: "FieldValueTooMany", Field: "delta.machines"}, refusalOf(t, res.Refused)); diff != "" {
		t.Errorf("delta past the cap: refusal (-want +got):\n%s", diff)
	}
	c, _ := s.Get("a")
	if len(c.Machines) != ingest.DefaultMaxMachines || c.Generation != gen {
		t.Errorf("after the refused delta: %d Machines at generation %d, want %d at %d", len(c.Machines), c.Generation, ingest.DefaultMaxMachines, gen)
	}
	if _, ok := c.Machine("one-too-many"); ok {
		t.Error("the Machine of the refused delta is in the inventory")
	}

	// Changing or removing Machines at the cap is still fine.
	res = s.ApplyDelta("a", 1, delta(gen+1, []*federationv1.Machine{machine("extra-0", 5)}, "extra-1"))
	if !res.Ack || res.Refused != nil {
		t.Errorf("delta changing Machines at the cap: %+v, want an ack", res)
	}
}

// The per-cluster type cap counts the types of every Machine together.
func TestDeltasCannotGrowTypesPastTheCap(t *testing.T) {
	s := New(clocktesting.NewFakePassiveClock(time.Unix(1000, 0)), 0)
	limits := ingest.DefaultLimits()
	limits.MaxTypes = 3
	s.SetLimits(limits)
	s.Connect("a", &federationv1.Hello{ClusterName: "a", Epoch: 1})
	if res := s.ApplySnapshot("a", 1, snapshot(1, machine("m1", 1), machine("m2", 1), machine("m3", 1))); !res.Ack {
		t.Fatalf("snapshot at the cap: %+v", res)
	}
	res := s.ApplyDelta("a", 1, delta(2, []*federationv1.Machine{machine("m4", 1)}))
	if diff := cmp.Diff(&refusal{Reason: "FieldValueInvalid", Field: "delta.machines.types"}, refusalOf(t, res.Refused)); diff != "" {
		t.Errorf("refusal (-want +got):\n%s", diff)
	}
}

// Deltas merged outside the lock never lose a concurrent change of the
// Machines they were built from: a second writer replacing the Machines
// (a newer stream's Snapshot) between merge and swap makes the Delta merge
// again or give way, and readers always see a sorted, duplicate-free list.
func TestDeltaMergeRacesSnapshots(t *testing.T) {
	s := New(clocktesting.NewFakePassiveClock(time.Unix(1000, 0)), 0)
	s.Connect("a", &federationv1.Hello{ClusterName: "a", Epoch: 1})
	s.ApplySnapshot("a", 1, snapshot(1, machines(200)...))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for gen := uint64(2); gen < 400; gen++ {
			s.ApplyDelta("a", 1, delta(gen, []*federationv1.Machine{machine(fmt.Sprintf("m%05d", gen%200), int32(gen))}))
		}
	}()
	for gen := uint64(1000); gen < 1050; gen++ {
		s.ApplySnapshot("a", 1, snapshot(gen, machines(200)...))
		c, _ := s.Get("a")
		for i := 1; i < len(c.Machines); i++ {
			if c.Machines[i-1].GetName() >= c.Machines[i].GetName() {
				t.Fatalf("Machines out of order or duplicated at %d: %s, %s", i, c.Machines[i-1].GetName(), c.Machines[i].GetName())
			}
		}
	}
	<-done
	c, _ := s.Get("a")
	if len(c.Machines) != 200 {
		t.Errorf("%d Machines after the race, want 200", len(c.Machines))
	}
}

func TestSameMachines(t *testing.T) {
	a := machines(3)
	cases := map[string]struct {
		x, y []*federationv1.Machine
		want bool
	}{
		"the same slice":          {a, a, true},
		"both empty":              {nil, []*federationv1.Machine{}, true},
		"a copy":                  {a, slices.Clone(a), false},
		"a shorter view":          {a, a[:2], false},
		"one empty, one not":      {nil, a, false},
		"same start, other array": {a[:1], machines(1), false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := sameMachines(tc.x, tc.y); got != tc.want {
				t.Errorf("sameMachines = %v, want %v", got, tc.want)
			}
		})
	}
}
