package store

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// TestPhaseTransitions covers every phase × event pair: the allowed ones lead
// where the package documentation says, the refused ones leave the cluster
// as it is (a stream that is not open here cannot end here, a Resync is not
// asked twice, only figures read back can be confirmed).
func TestPhaseTransitions(t *testing.T) {
	const refused = Phase("")
	want := map[Phase]map[Event]Phase{
		PhaseIdle: {
			EventConnect: PhaseStreaming, EventDisconnect: refused, EventSnapshot: PhaseIdle, EventResync: refused,
			EventObserveLive: PhaseRemote, EventObserveRestored: PhaseRestored, EventConfirmReplica: refused,
		},
		PhaseStreaming: {
			EventConnect: PhaseStreaming, EventDisconnect: PhaseIdle, EventSnapshot: PhaseStreaming, EventResync: PhaseResyncing,
			EventObserveLive: PhaseRemote, EventObserveRestored: PhaseRestored, EventConfirmReplica: refused,
		},
		PhaseResyncing: {
			EventConnect: PhaseStreaming, EventDisconnect: PhaseIdle, EventSnapshot: PhaseStreaming, EventResync: refused,
			EventObserveLive: PhaseRemote, EventObserveRestored: PhaseRestored, EventConfirmReplica: refused,
		},
		PhaseRemote: {
			EventConnect: PhaseStreaming, EventDisconnect: refused, EventSnapshot: PhaseRemote, EventResync: refused,
			EventObserveLive: PhaseRemote, EventObserveRestored: PhaseRestored, EventConfirmReplica: refused,
		},
		PhaseRestored: {
			EventConnect: PhaseStreaming, EventDisconnect: refused, EventSnapshot: PhaseIdle, EventResync: refused,
			EventObserveLive: PhaseRemote, EventObserveRestored: PhaseRestored, EventConfirmReplica: PhaseRemote,
		},
	}
	if len(want) != len(Phases) {
		t.Fatalf("the test covers %d phases, the package has %d", len(want), len(Phases))
	}
	for _, from := range Phases {
		for _, ev := range Events {
			wantTo, listed := want[from][ev]
			if !listed {
				t.Fatalf("the test does not say what %s does in %s", ev, from)
			}
			t.Run(string(from)+"/"+string(ev), func(t *testing.T) {
				to, ok := Transition(from, ev)
				if wantTo == refused {
					if ok {
						t.Fatalf("%s in %s leads to %s, want it refused", ev, from, to)
					}
				} else if !ok || to != wantTo {
					t.Fatalf("%s in %s: got %q (allowed %t), want %s", ev, from, to, ok, wantTo)
				}
				c := &Cluster{Phase: from, State: StateAvailable}
				c.derive()
				fired := c.fire(ev)
				if fired != ok {
					t.Errorf("fire returned %t, the table says %t", fired, ok)
				}
				if !ok && c.Phase != from {
					t.Errorf("a refused %s moved the cluster from %s to %s", ev, from, c.Phase)
				}
			})
		}
	}
}

// TestPhaseViews: what users see (Connected, Restored, Stale) derives from
// the phase and the liveness alone.
func TestPhaseViews(t *testing.T) {
	cases := []struct {
		phase         Phase
		state         State
		wantConnected bool
		wantRestored  bool
		wantStale     bool
	}{
		{PhaseIdle, StateAvailable, false, false, false},
		{PhaseIdle, StateUnknown, false, false, true},
		{PhaseStreaming, StateAvailable, true, false, false},
		// A frozen agent: its stream stays open, it is Unknown.
		{PhaseStreaming, StateUnknown, true, false, true},
		{PhaseResyncing, StateAvailable, true, false, false},
		{PhaseResyncing, StateUnknown, true, false, true},
		{PhaseRemote, StateAvailable, true, false, false},
		// Another replica's stream goes with its silence.
		{PhaseRemote, StateUnknown, false, false, true},
		{PhaseRestored, StateAvailable, false, true, true},
		{PhaseRestored, StateUnknown, false, true, true},
	}
	for _, tc := range cases {
		c := &Cluster{Phase: tc.phase}
		c.setState(tc.state)
		if c.Connected != tc.wantConnected || c.Restored != tc.wantRestored || c.Stale() != tc.wantStale {
			t.Errorf("%s/%s: connected=%t restored=%t stale=%t, want %t %t %t", tc.phase, tc.state,
				c.Connected, c.Restored, c.Stale(), tc.wantConnected, tc.wantRestored, tc.wantStale)
		}
	}
}

// TestStorePhases walks one cluster through the store's methods and checks
// the phase after each, as the table says.
func TestStorePhases(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	s := New(clk, 10*time.Second)
	s.SetReplica("hub-a")
	phase := func() Phase {
		c, ok := s.Get("a")
		if !ok {
			t.Fatal("cluster a not in the store")
		}
		return c.Phase
	}
	steps := []struct {
		name string
		do   func()
		want Phase
	}{
		{"read back on start", func() {
			s.Observe("a", Peer{Inventory: Cluster{Epoch: 1, Generation: 3, LastHeartbeat: clk.Now()}, Replica: "hub-old", RenewTime: clk.Now()})
		}, PhaseRestored},
		{"its replica is seen running", func() { s.ConfirmReplica("hub-old") }, PhaseRemote},
		{"the spoke connects here", func() {
			clk.SetTime(clk.Now().Add(time.Second))
			s.Connect("a", &federationv1.Hello{Epoch: 2})
		}, PhaseStreaming},
		{"a Delta before the Snapshot asks for one", func() { s.ApplyDelta("a", 2, delta(1, nil)) }, PhaseResyncing},
		{"the Snapshot comes", func() { s.ApplySnapshot("a", 2, snapshot(1)) }, PhaseStreaming},
		{"a gap asks for a Snapshot", func() { s.ApplyDelta("a", 2, delta(3, nil)) }, PhaseResyncing},
		{"the stream ends", func() { s.Disconnect("a") }, PhaseIdle},
		{"ending it again changes nothing", func() { s.Disconnect("a") }, PhaseIdle},
		{"the spoke reports to another replica later", func() {
			s.Observe("a", Peer{Inventory: Cluster{Epoch: 2, Generation: 5}, Replica: "hub-b", RenewTime: clk.Now().Add(time.Second), Live: true})
		}, PhaseRemote},
	}
	for _, st := range steps {
		st.do()
		if got := phase(); got != st.want {
			t.Fatalf("%s: phase %s, want %s", st.name, got, st.want)
		}
	}
	s.Remove("a")
	if _, ok := s.Get("a"); ok {
		t.Error("a deregistered cluster stays in the store")
	}
}
