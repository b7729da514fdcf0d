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
				c := &Cluster{Phase: from, Liveness: LivenessAvailable}
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
		state         Liveness
		wantConnected bool
		wantRestored  bool
		wantStale     bool
	}{
		{PhaseIdle, LivenessAvailable, false, false, false},
		{PhaseIdle, LivenessUnknown, false, false, true},
		{PhaseStreaming, LivenessAvailable, true, false, false},
		// A frozen agent: its stream stays open, it is Unknown.
		{PhaseStreaming, LivenessUnknown, true, false, true},
		{PhaseResyncing, LivenessAvailable, true, false, false},
		{PhaseResyncing, LivenessUnknown, true, false, true},
		{PhaseRemote, LivenessAvailable, true, false, false},
		// Another replica's stream goes with its silence.
		{PhaseRemote, LivenessUnknown, false, false, true},
		{PhaseRestored, LivenessAvailable, false, true, true},
		{PhaseRestored, LivenessUnknown, false, true, true},
	}
	for _, tc := range cases {
		c := &Cluster{Phase: tc.phase}
		c.setLiveness(tc.state)
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

// TestEvaluateLivenessOf: a heartbeating cluster is looked at again when its
// grace period runs out, and turns Unknown then, not before.
func TestEvaluateLivenessOf(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	s := New(clk, 10*time.Second)
	s.Connect("a", &federationv1.Hello{Epoch: 1})
	clk.SetTime(clk.Now().Add(4 * time.Second))
	changed, recheck := s.EvaluateLivenessOf("a")
	if changed || recheck != 6*time.Second+livenessSlack {
		t.Fatalf("4s after the last message: changed=%t recheck=%s, want false and 6s", changed, recheck)
	}
	clk.SetTime(clk.Now().Add(recheck))
	changed, recheck = s.EvaluateLivenessOf("a")
	if c, _ := s.Get("a"); !changed || recheck != 0 || c.Liveness != LivenessUnknown {
		t.Fatalf("past the grace period: changed=%t recheck=%s state=%s, want true 0 Unknown", changed, recheck, c.Liveness)
	}
	if changed, recheck := s.EvaluateLivenessOf("gone"); changed || recheck != 0 {
		t.Errorf("a cluster not in the store: changed=%t recheck=%s, want false 0", changed, recheck)
	}
}

// TestReplicaClockSkew: another replica whose clock runs 10 s ahead or behind
// this one's neither makes a cluster it serves look silent here, nor makes a
// stream open here look moved, nor keeps this one from noticing that the
// spoke did move.
func TestReplicaClockSkew(t *testing.T) {
	for _, skew := range []time.Duration{10 * time.Second, -10 * time.Second} {
		t.Run("served by a replica "+skew.String()+" off: Available while it renews", func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Unix(10_000, 0))
			s := New(clk, 15*time.Second)
			s.SetReplica("hub-a")
			renew := func() {
				// hub-b heard from the spoke 4 s ago by its clock.
				at := clk.Now().Add(skew - 4*time.Second)
				s.Observe("a", Peer{Inventory: Cluster{Epoch: 1, Generation: 1, LastHeartbeat: at}, Replica: "hub-b", RenewTime: at, Live: true})
			}
			renew()
			for range 10 {
				clk.SetTime(clk.Now().Add(5 * time.Second))
				renew()
				s.EvaluateLiveness()
				if c, _ := s.Get("a"); c.Liveness != LivenessAvailable || !c.Connected {
					t.Fatalf("state=%s connected=%t while hub-b renews every 5s, want Available and connected", c.Liveness, c.Connected)
				}
			}
			clk.SetTime(clk.Now().Add(16 * time.Second))
			s.EvaluateLiveness()
			if c, _ := s.Get("a"); c.Liveness != LivenessUnknown {
				t.Errorf("state=%s 16s after hub-b's last renewal, want Unknown", c.Liveness)
			}
		})
		t.Run("previous holder "+skew.String()+" off: a late renewal does not end the stream open here", func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Unix(10_000, 0))
			s := New(clk, 15*time.Second)
			s.SetReplica("hub-a")
			first := clk.Now().Add(skew - 3*time.Second)
			s.Observe("a", Peer{Inventory: Cluster{Epoch: 1, Generation: 1}, Replica: "hub-b", RenewTime: first, Live: true})
			clk.SetTime(clk.Now().Add(time.Second))
			s.Connect("a", &federationv1.Hello{Epoch: 1})
			s.ApplySnapshot("a", 1, snapshot(2))
			// hub-b's renewal written just before the spoke left it,
			// seen only now.
			late := first.Add(2 * time.Second)
			if s.Observe("a", Peer{Inventory: Cluster{Epoch: 1, Generation: 1}, Replica: "hub-b", RenewTime: late, Live: true}) {
				t.Fatal("a renewal written before the stream opened here ended it")
			}
			if c, _ := s.Get("a"); c.Replica != "hub-a" || c.Generation != 2 {
				t.Fatalf("replica=%q generation=%d, want the stream's figures (hub-a, 2)", c.Replica, c.Generation)
			}
			// This replica takes the Lease; then hub-b takes it back:
			// the spoke is on hub-b now.
			clk.SetTime(clk.Now().Add(time.Second))
			s.Observe("a", Peer{Replica: "hub-a", RenewTime: clk.Now(), Live: true})
			clk.SetTime(clk.Now().Add(5 * time.Second))
			if !s.Observe("a", Peer{Inventory: Cluster{Epoch: 1, Generation: 3}, Replica: "hub-b", RenewTime: clk.Now().Add(skew), Live: true}) {
				t.Fatal("hub-b took the Lease from this replica: the stream open here is a leftover, want it ended")
			}
			if c, _ := s.Get("a"); c.Replica != "hub-b" || c.Generation != 3 {
				t.Errorf("replica=%q generation=%d, want hub-b's figures (3)", c.Replica, c.Generation)
			}
		})
	}
}

// TestRemoteClusterStaysCurrentOnAnInventoryWrite: once this replica saw the
// serving replica renew a cluster's Lease, a write of the cluster's
// inventory alone (the Lease unchanged, its time before this replica's
// start by this replica's clock) leaves the figures current.
func TestRemoteClusterStaysCurrentOnAnInventoryWrite(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(10_000, 0))
	s := New(clk, 15*time.Second)
	s.SetReplica("hub-a")
	// hub-b's clock runs 10 s behind: its times all look older than this
	// replica's start.
	at := clk.Now().Add(-10 * time.Second)
	s.Observe("a", Peer{Inventory: Cluster{Epoch: 1, Generation: 1}, Replica: "hub-b", RenewTime: at})
	clk.SetTime(clk.Now().Add(2 * time.Second))
	s.Observe("a", Peer{Inventory: Cluster{Epoch: 1, Generation: 1}, Replica: "hub-b", RenewTime: at.Add(2 * time.Second)})
	if c, _ := s.Get("a"); c.Phase != PhaseRemote || c.Stale() {
		t.Fatalf("phase=%s stale=%t after hub-b was seen renewing, want Remote and current", c.Phase, c.Stale())
	}
	s.Observe("a", Peer{Inventory: Cluster{Epoch: 1, Generation: 2}, Replica: "hub-b", RenewTime: at.Add(2 * time.Second)})
	if c, _ := s.Get("a"); c.Phase != PhaseRemote || c.Stale() || c.Generation != 2 {
		t.Errorf("phase=%s stale=%t generation=%d after an inventory write alone, want Remote, current, 2", c.Phase, c.Stale(), c.Generation)
	}
}
