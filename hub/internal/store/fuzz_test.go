package store

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	clocktesting "k8s.io/utils/clock/testing"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// FuzzSpokeMessages feeds the store any wire bytes a spoke could send as
// Snapshots and Deltas: it must never panic, and whatever it accepts keeps
// the index's invariants (Machines sorted, names unique, counts never
// negative).
//
//	go test -run '^$' -fuzz FuzzSpokeMessages -fuzztime 30s ./hub/internal/store/
func FuzzSpokeMessages(f *testing.F) {
	for _, msg := range []*federationv1.SpokeMessage{
		{Kind: &federationv1.SpokeMessage_Snapshot{Snapshot: snapshot(2, machine("m1", 1), machine("m2", 2))}},
		{Kind: &federationv1.SpokeMessage_Delta{Delta: delta(2, []*federationv1.Machine{machine("m3", 3)}, "m1")}},
	} {
		b, err := proto.Marshal(msg)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		msg := &federationv1.SpokeMessage{}
		if err := proto.Unmarshal(data, msg); err != nil {
			return
		}
		s := New(clocktesting.NewFakePassiveClock(time.Unix(1000, 0)), 0)
		s.Connect("a", &federationv1.Hello{ClusterName: "a", Epoch: 1})
		s.ApplySnapshot("a", 1, snapshot(1, machine("m1", 1)))
		var res Result
		switch {
		case msg.GetSnapshot() != nil:
			res = s.ApplySnapshot("a", 1, msg.GetSnapshot())
		case msg.GetDelta() != nil:
			res = s.ApplyDelta("a", 1, msg.GetDelta())
		default:
			return
		}
		c, _ := s.Get("a")
		if res.Refused != nil && (c.Generation != 1 || c.Outdated == "") {
			t.Fatalf("refused message changed the inventory: generation %d, outdated %q", c.Generation, c.Outdated)
		}
		for i, m := range c.Machines {
			if i > 0 && c.Machines[i-1].GetName() >= m.GetName() {
				t.Fatalf("Machines not sorted and unique: %q then %q", c.Machines[i-1].GetName(), m.GetName())
			}
			for _, typ := range m.GetTypes() {
				if typ.GetAvailable() < 0 || typ.GetUsage().GetUsed() < 0 || typ.GetUsage().GetReserved() < 0 {
					t.Fatalf("accepted a negative count in %v", typ)
				}
			}
		}
	})
}
