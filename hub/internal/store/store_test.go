package store

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/types/known/timestamppb"
	clocktesting "k8s.io/utils/clock/testing"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// step is one message of a spoke, or a hub event, in a state-machine test.
type step struct {
	hello     *federationv1.Hello
	snapshot  *federationv1.Snapshot
	delta     *federationv1.Delta
	heartbeat *federationv1.Heartbeat
	epoch     uint64
	wantRes   Result
}

func machine(name string, available int32) *federationv1.Machine {
	return &federationv1.Machine{Name: name, Group: "g", Types: []*federationv1.MachineType{{Name: "t", Cpu: "4", Memory: "16Gi", Available: available}}}
}

func snapshot(gen uint64, machines ...*federationv1.Machine) *federationv1.Snapshot {
	return &federationv1.Snapshot{Generation: gen, ObservedAt: timestamppb.New(time.Unix(int64(gen), 0)), Machines: machines}
}

func delta(gen uint64, upserts []*federationv1.Machine, removals ...string) *federationv1.Delta {
	return &federationv1.Delta{Generation: gen, ObservedAt: timestamppb.New(time.Unix(int64(gen), 0)), Upserts: upserts, Removals: removals}
}

// available returns machine name → available of its first type.
func available(c *Cluster) map[string]int32 {
	out := map[string]int32{}
	for _, m := range c.Machines {
		out[m.GetName()] = m.GetTypes()[0].GetAvailable()
	}
	return out
}

func TestStateMachine(t *testing.T) {
	hello := &federationv1.Hello{ClusterName: "a", AgentVersion: "v1", Epoch: 1}
	hello2 := &federationv1.Hello{ClusterName: "a", AgentVersion: "v2", Epoch: 2}
	cases := map[string]struct {
		steps          []step
		wantGeneration uint64
		wantMachines   map[string]int32
	}{
		"snapshot then deltas": {
			steps: []step{
				{hello: hello},
				{epoch: 1, snapshot: snapshot(1, machine("m1", 1), machine("m2", 2)), wantRes: Result{Ack: true, Generation: 1}},
				{epoch: 1, delta: delta(2, []*federationv1.Machine{machine("m1", 5), machine("m3", 3)}), wantRes: Result{Ack: true, Generation: 2}},
				{epoch: 1, delta: delta(3, nil, "m2"), wantRes: Result{Ack: true, Generation: 3}},
			},
			wantGeneration: 3,
			wantMachines:   map[string]int32{"m1": 5, "m3": 3},
		},
		"stale delta is ignored": {
			steps: []step{
				{hello: hello},
				{epoch: 1, snapshot: snapshot(4, machine("m1", 1)), wantRes: Result{Ack: true, Generation: 4}},
				{epoch: 1, delta: delta(3, []*federationv1.Machine{machine("m1", 9)}), wantRes: Result{Ack: true, Generation: 4, Stale: true}},
			},
			wantGeneration: 4,
			wantMachines:   map[string]int32{"m1": 1},
		},
		"stale snapshot is ignored": {
			steps: []step{
				{hello: hello},
				{epoch: 1, snapshot: snapshot(4, machine("m1", 1)), wantRes: Result{Ack: true, Generation: 4}},
				{epoch: 1, snapshot: snapshot(2, machine("m1", 9)), wantRes: Result{Ack: true, Generation: 4, Stale: true}},
			},
			wantGeneration: 4,
			wantMachines:   map[string]int32{"m1": 1},
		},
		"gap asks for one resync, snapshot recovers": {
			steps: []step{
				{hello: hello},
				{epoch: 1, snapshot: snapshot(1, machine("m1", 1)), wantRes: Result{Ack: true, Generation: 1}},
				{epoch: 1, delta: delta(3, []*federationv1.Machine{machine("m1", 3)}), wantRes: Result{Resync: "generation gap"}},
				{epoch: 1, delta: delta(4, []*federationv1.Machine{machine("m1", 4)}), wantRes: Result{}},
				{epoch: 1, snapshot: snapshot(4, machine("m1", 4), machine("m2", 2)), wantRes: Result{Ack: true, Generation: 4}},
				{epoch: 1, delta: delta(5, nil, "m1"), wantRes: Result{Ack: true, Generation: 5}},
			},
			wantGeneration: 5,
			wantMachines:   map[string]int32{"m2": 2},
		},
		"delta before any snapshot asks for resync": {
			steps: []step{
				{hello: hello},
				{epoch: 1, delta: delta(1, []*federationv1.Machine{machine("m1", 1)}), wantRes: Result{Resync: "no snapshot of this epoch"}},
			},
			wantMachines: map[string]int32{},
		},
		"new epoch needs a snapshot; lower generation accepted then": {
			steps: []step{
				{hello: hello},
				{epoch: 1, snapshot: snapshot(7, machine("m1", 1)), wantRes: Result{Ack: true, Generation: 7}},
				{hello: hello2},
				{epoch: 2, delta: delta(2, []*federationv1.Machine{machine("m1", 2)}), wantRes: Result{Resync: "no snapshot of this epoch"}},
				{epoch: 2, snapshot: snapshot(1, machine("m1", 6)), wantRes: Result{Ack: true, Generation: 1}},
			},
			wantGeneration: 1,
			wantMachines:   map[string]int32{"m1": 6},
		},
		"heartbeat ahead of the hub asks for resync": {
			steps: []step{
				{hello: hello},
				{epoch: 1, snapshot: snapshot(1, machine("m1", 1)), wantRes: Result{Ack: true, Generation: 1}},
				{epoch: 1, heartbeat: &federationv1.Heartbeat{Generation: 1}, wantRes: Result{}},
				{epoch: 1, heartbeat: &federationv1.Heartbeat{Generation: 2}, wantRes: Result{Resync: "hub is behind the spoke's generation"}},
				{epoch: 1, heartbeat: &federationv1.Heartbeat{Generation: 2}, wantRes: Result{}},
			},
			wantGeneration: 1,
			wantMachines:   map[string]int32{"m1": 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := New(clocktesting.NewFakePassiveClock(time.Unix(1000, 0)), 0)
			for i, st := range tc.steps {
				var got Result
				switch {
				case st.hello != nil:
					s.Connect("a", st.hello)
					continue
				case st.snapshot != nil:
					got = s.ApplySnapshot("a", st.epoch, st.snapshot)
				case st.delta != nil:
					got = s.ApplyDelta("a", st.epoch, st.delta)
				case st.heartbeat != nil:
					got = s.Heartbeat("a", st.epoch, st.heartbeat)
				}
				if diff := cmp.Diff(st.wantRes, got); diff != "" {
					t.Errorf("step %d result (-want +got):\n%s", i, diff)
				}
			}
			c, ok := s.Get("a")
			if !ok {
				t.Fatal("cluster a not in the store")
			}
			if c.Generation != tc.wantGeneration {
				t.Errorf("generation = %d, want %d", c.Generation, tc.wantGeneration)
			}
			if diff := cmp.Diff(tc.wantMachines, available(c), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("machines (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadersSeeImmutableSnapshots(t *testing.T) {
	s := New(nil, 0)
	s.Connect("a", &federationv1.Hello{Epoch: 1})
	s.ApplySnapshot("a", 1, snapshot(1, machine("m1", 1)))
	before, _ := s.Get("a")
	s.ApplyDelta("a", 1, delta(2, []*federationv1.Machine{machine("m2", 2)}, "m1"))
	if diff := cmp.Diff(map[string]int32{"m1": 1}, available(before)); diff != "" {
		t.Errorf("a value read before the delta changed (-want +got):\n%s", diff)
	}
	after, _ := s.Get("a")
	if _, ok := after.Machine("m2"); !ok {
		t.Error("Machine(m2) not found after the delta")
	}
	if _, ok := after.Machine("m1"); ok {
		t.Error("Machine(m1) still found after its removal")
	}
}

func TestLiveness(t *testing.T) {
	start := time.Unix(1000, 0)
	cases := map[string]struct {
		restore       *Cluster
		connect       bool
		advance       time.Duration
		heartbeat     bool
		wantLiveness  Liveness
		wantStale     bool
		wantChanged   []string
		wantConnected bool
	}{
		"within grace stays available": {
			connect: true, advance: 30 * time.Second,
			wantLiveness: LivenessAvailable, wantConnected: true,
		},
		"silent past grace becomes unknown": {
			connect: true, advance: 41 * time.Second,
			wantLiveness: LivenessUnknown, wantStale: true, wantChanged: []string{"a"}, wantConnected: true,
		},
		"heartbeat after silence is available again": {
			connect: true, advance: 41 * time.Second, heartbeat: true,
			wantLiveness: LivenessAvailable, wantChanged: []string{"a"}, wantConnected: true,
		},
		"restored with an old heartbeat is unknown and stale": {
			restore:      &Cluster{Name: "a", Generation: 3, LastHeartbeat: start.Add(-time.Hour), Machines: []*federationv1.Machine{machine("m1", 1)}},
			wantLiveness: LivenessUnknown, wantStale: true,
		},
		"restored with a recent heartbeat is available but stale": {
			restore:      &Cluster{Name: "a", Generation: 3, LastHeartbeat: start.Add(-time.Second)},
			wantLiveness: LivenessAvailable, wantStale: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(start)
			s := New(clk, 40*time.Second)
			if tc.restore != nil {
				s.Observe("a", Peer{Inventory: *tc.restore})
			}
			if tc.connect {
				s.Connect("a", &federationv1.Hello{Epoch: 1})
			}
			clk.SetTime(start.Add(tc.advance))
			gotChanged := s.EvaluateLiveness()
			if tc.heartbeat {
				s.Heartbeat("a", 1, &federationv1.Heartbeat{})
			}
			c, _ := s.Get("a")
			if diff := cmp.Diff(tc.wantChanged, gotChanged, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("changed (-want +got):\n%s", diff)
			}
			if c.Liveness != tc.wantLiveness || c.Stale() != tc.wantStale || c.Connected != tc.wantConnected {
				t.Errorf("state=%s stale=%t connected=%t, want %s %t %t", c.Liveness, c.Stale(), c.Connected, tc.wantLiveness, tc.wantStale, tc.wantConnected)
			}
		})
	}
}

func TestRestoredInventoryIsStaleUntilTheSpokeReconnects(t *testing.T) {
	s := New(clocktesting.NewFakePassiveClock(time.Unix(1000, 0)), 0)
	var notified []string
	s.OnChange(func(name string) { notified = append(notified, name) })
	s.Observe("a", Peer{Inventory: Cluster{Epoch: 1, Generation: 5, LastHeartbeat: time.Unix(990, 0), Machines: []*federationv1.Machine{machine("m1", 1)}}})
	c, _ := s.Get("a")
	if !c.Restored || !c.Stale() || len(c.Machines) != 1 {
		t.Fatalf("restored cluster: restored=%t stale=%t machines=%d, want true true 1", c.Restored, c.Stale(), len(c.Machines))
	}
	// The same agent run reconnects: a delta is refused until its snapshot.
	s.Connect("a", &federationv1.Hello{Epoch: 1})
	if got := s.ApplyDelta("a", 1, delta(6, nil, "m1")); got.Resync == "" {
		t.Errorf("delta on a restored inventory: %+v, want a resync", got)
	}
	if got := s.ApplySnapshot("a", 1, snapshot(6, machine("m1", 2))); !got.Ack || got.Generation != 6 {
		t.Errorf("snapshot after reconnect: %+v, want ack of 6", got)
	}
	c, _ = s.Get("a")
	if c.Restored || c.Stale() {
		t.Errorf("after the snapshot restored=%t stale=%t, want false false", c.Restored, c.Stale())
	}
	// A late restore must not clobber live figures.
	s.Observe("a", Peer{Inventory: Cluster{Generation: 1}})
	if c, _ = s.Get("a"); c.Generation != 6 {
		t.Errorf("generation after a late restore = %d, want 6", c.Generation)
	}
	if len(notified) < 3 {
		t.Errorf("listeners heard %v, want at least restore, connect and snapshot", notified)
	}
}

func TestRemove(t *testing.T) {
	s := New(nil, 0)
	var notified []string
	s.OnChange(func(name string) { notified = append(notified, name) })
	s.Connect("a", &federationv1.Hello{Epoch: 1})
	s.ApplySnapshot("a", 1, snapshot(1, machine("m1", 1)))
	notified = nil
	s.Remove("a")
	s.Disconnect("a") // the stream of the removed cluster ends afterwards
	s.Remove("unknown")
	if _, ok := s.Get("a"); ok {
		t.Error("cluster a still in the store after Remove and Disconnect")
	}
	if diff := cmp.Diff([]string{"a"}, notified); diff != "" {
		t.Errorf("notified (-want +got):\n%s", diff)
	}
}

// TestObserveAnotherReplica covers several hub replicas sharing the hub
// cluster's API: what one replica learns of the clusters another serves.
func TestObserveAnotherReplica(t *testing.T) {
	start := time.Unix(10_000, 0)
	inventory := func(gen uint64, heartbeat time.Time) Cluster {
		return Cluster{AgentVersion: "v1", Epoch: 7, Generation: gen, ObservedAt: heartbeat, LastHeartbeat: heartbeat, Machines: []*federationv1.Machine{machine("m1", int32(gen))}}
	}
	cases := map[string]struct {
		// local opens a stream here first, with a snapshot of generation 2.
		local, disconnect bool
		peer              Peer
		advance           time.Duration

		wantSuperseded bool
		wantGeneration uint64
		wantReplica    string
		wantLiveness   Liveness
		wantConnected  bool
		wantStale      bool
	}{
		"served by a live replica: current and connected": {
			peer:           Peer{Inventory: inventory(4, start.Add(-5*time.Second)), Replica: "hub-b", RenewTime: start.Add(-time.Second), Live: true},
			wantGeneration: 4, wantReplica: "hub-b", wantLiveness: LivenessAvailable, wantConnected: true,
		},
		"lease renewed before this replica started: stale until confirmed": {
			peer:           Peer{Inventory: inventory(4, start.Add(-5*time.Second)), Replica: "hub-old", RenewTime: start.Add(-time.Second)},
			wantGeneration: 4, wantReplica: "hub-old", wantLiveness: LivenessAvailable, wantStale: true,
		},
		"lease not renewed for longer than the grace period: unknown": {
			peer:           Peer{Inventory: inventory(4, start.Add(-time.Hour)), Replica: "hub-b", RenewTime: start.Add(-time.Minute), Live: true},
			wantGeneration: 4, wantReplica: "hub-b", wantLiveness: LivenessUnknown, wantStale: true,
		},
		"holder goes silent afterwards: unknown and no longer connected": {
			peer:    Peer{Inventory: inventory(4, start), Replica: "hub-b", RenewTime: start, Live: true},
			advance: 41 * time.Second, wantGeneration: 4, wantReplica: "hub-b", wantLiveness: LivenessUnknown, wantStale: true,
		},
		"own open stream wins over an older lease of another replica": {
			local:          true,
			peer:           Peer{Inventory: inventory(9, start.Add(-time.Minute)), Replica: "hub-b", RenewTime: start.Add(-time.Minute), Live: true},
			wantGeneration: 2, wantReplica: "hub-a", wantLiveness: LivenessAvailable, wantConnected: true,
		},
		"own stream outlived by a newer lease of another replica: superseded": {
			local:          true,
			peer:           Peer{Inventory: inventory(9, start.Add(time.Second)), Replica: "hub-b", RenewTime: start.Add(time.Second), Live: true},
			wantSuperseded: true, wantGeneration: 9, wantReplica: "hub-b", wantLiveness: LivenessAvailable, wantConnected: true,
		},
		"stream closed here, spoke now on another replica: its figures are taken": {
			local: true, disconnect: true,
			peer:           Peer{Inventory: inventory(9, start.Add(time.Second)), Replica: "hub-b", RenewTime: start.Add(time.Second), Live: true},
			wantGeneration: 9, wantReplica: "hub-b", wantLiveness: LivenessAvailable, wantConnected: true,
		},
		"own lease echoed back changes nothing": {
			local: true, disconnect: true,
			peer:           Peer{Inventory: inventory(1, start), Replica: "hub-a", RenewTime: start, Live: true},
			wantGeneration: 2, wantReplica: "hub-a", wantLiveness: LivenessAvailable,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(start)
			s := New(clk, 40*time.Second)
			s.SetReplica("hub-a")
			if tc.local {
				s.Connect("a", &federationv1.Hello{Epoch: 1})
				s.ApplySnapshot("a", 1, snapshot(2, machine("m1", 2)))
			}
			if tc.disconnect {
				s.Disconnect("a")
			}
			if got := s.Observe("a", tc.peer); got != tc.wantSuperseded {
				t.Errorf("superseded = %t, want %t", got, tc.wantSuperseded)
			}
			clk.SetTime(start.Add(tc.advance))
			s.EvaluateLiveness()
			s.Disconnect("a") // a stream ending later must not touch another replica's cluster
			if tc.local && !tc.disconnect && !tc.wantSuperseded {
				s.Connect("a", &federationv1.Hello{Epoch: 1}) // still ours: reopen to compare
			}
			c, _ := s.Get("a")
			if c.Generation != tc.wantGeneration || c.Replica != tc.wantReplica || c.Liveness != tc.wantLiveness || c.Connected != tc.wantConnected || c.Stale() != tc.wantStale {
				t.Errorf("generation=%d replica=%q state=%s connected=%t stale=%t, want %d %q %s %t %t",
					c.Generation, c.Replica, c.Liveness, c.Connected, c.Stale(),
					tc.wantGeneration, tc.wantReplica, tc.wantLiveness, tc.wantConnected, tc.wantStale)
			}
			if s.Local(c) != (tc.wantReplica == "hub-a") {
				t.Errorf("Local = %t for replica %q", s.Local(c), c.Replica)
			}
		})
	}
}

func TestObserveNotifiesOnlyChanges(t *testing.T) {
	start := time.Unix(10_000, 0)
	s := New(clocktesting.NewFakePassiveClock(start), 40*time.Second)
	s.SetReplica("hub-a")
	var notified int
	s.OnChange(func(string) { notified++ })
	peer := Peer{Inventory: Cluster{Epoch: 1, Generation: 3, Machines: []*federationv1.Machine{machine("m1", 1)}}, Replica: "hub-b", RenewTime: start, Live: true}
	s.Observe("a", peer)
	peer.RenewTime = start.Add(10 * time.Second) // a lease renewal alone
	s.Observe("a", peer)
	if notified != 1 {
		t.Errorf("listeners heard %d changes, want 1 (a renewal is not a change)", notified)
	}
	peer.Inventory.Generation = 4
	peer.Inventory.Machines = []*federationv1.Machine{machine("m1", 2)}
	s.Observe("a", peer)
	if c, _ := s.Get("a"); notified != 2 || c.Generation != 4 || c.Machines[0].GetTypes()[0].GetAvailable() != 2 {
		t.Errorf("after a new generation: notified=%d generation=%d, want 2 and 4 with the new figures", notified, c.Generation)
	}
}

func TestConfirmReplicaMakesAllItsClustersCurrent(t *testing.T) {
	start := time.Unix(10_000, 0)
	s := New(clocktesting.NewFakePassiveClock(start), 40*time.Second)
	s.SetReplica("hub-a")
	// Read back at start: renewed before this replica started, not live yet.
	for _, name := range []string{"x", "y"} {
		s.Observe(name, Peer{Inventory: Cluster{Generation: 1}, Replica: "hub-b", RenewTime: start.Add(-time.Second)})
	}
	s.Observe("z", Peer{Inventory: Cluster{Generation: 1}, Replica: "hub-c", RenewTime: start.Add(-time.Second)})
	var notified []string
	s.OnChange(func(name string) { notified = append(notified, name) })
	s.ConfirmReplica("hub-b")
	for name, wantStale := range map[string]bool{"x": false, "y": false, "z": true} {
		c, _ := s.Get(name)
		if c.Stale() != wantStale || c.Connected == wantStale {
			t.Errorf("%s: stale=%t connected=%t, want stale=%t", name, c.Stale(), c.Connected, wantStale)
		}
	}
	if diff := cmp.Diff([]string{"x", "y"}, notified); diff != "" {
		t.Errorf("notified (-want +got):\n%s", diff)
	}
}

func TestOwnLeaseEchoDoesNotReviveAClosedStream(t *testing.T) {
	start := time.Unix(10_000, 0)
	s := New(clocktesting.NewFakePassiveClock(start), 40*time.Second)
	s.SetReplica("hub-a")
	s.Connect("a", &federationv1.Hello{Epoch: 2}) // closed before its Snapshot
	s.Disconnect("a")
	s.Observe("a", Peer{Inventory: Cluster{Epoch: 1, Generation: 7}, Replica: "hub-a", RenewTime: start, Live: true})
	if c, _ := s.Get("a"); c.Connected || c.Generation == 7 {
		t.Errorf("connected=%t generation=%d after our own Lease came back, want false and the figures held here", c.Connected, c.Generation)
	}
}

// Listeners (persister, Watch streams, score publisher) hear of a spoke
// message only when it changes what the hub holds: not of every heartbeat.
func TestStreamNotifiesOnlyChanges(t *testing.T) {
	start := time.Unix(10_000, 0)
	clk := clocktesting.NewFakePassiveClock(start)
	s := New(clk, 40*time.Second)
	var notified int
	s.OnChange(func(string) { notified++ })
	// In order: each step acts on what the steps before left.
	steps := []struct {
		name         string
		apply        func()
		wantNotified int
	}{
		{name: "hello", apply: func() { s.Connect("a", &federationv1.Hello{Epoch: 1}) }, wantNotified: 1},
		{name: "snapshot", apply: func() { s.ApplySnapshot("a", 1, snapshot(1, machine("m1", 1))) }, wantNotified: 1},
		{name: "heartbeat", apply: func() { s.Heartbeat("a", 1, &federationv1.Heartbeat{Generation: 1}) }, wantNotified: 0},
		{name: "stale snapshot", apply: func() { s.ApplySnapshot("a", 1, snapshot(1, machine("m1", 9))) }, wantNotified: 0},
		{name: "delta", apply: func() { s.ApplyDelta("a", 1, delta(2, []*federationv1.Machine{machine("m1", 2)})) }, wantNotified: 1},
		{name: "stale delta", apply: func() { s.ApplyDelta("a", 1, delta(2, []*federationv1.Machine{machine("m1", 9)})) }, wantNotified: 0},
		{name: "later heartbeat", apply: func() {
			clk.SetTime(start.Add(10 * time.Second))
			s.Heartbeat("a", 1, &federationv1.Heartbeat{Generation: 2})
		}, wantNotified: 0},
		{name: "heartbeat after silence", apply: func() {
			clk.SetTime(start.Add(time.Minute))
			s.EvaluateLiveness()
			notified = 0 // the turn to Unknown is a change; tested in TestLiveness
			s.Heartbeat("a", 1, &federationv1.Heartbeat{Generation: 2})
		}, wantNotified: 1},
	}
	for _, step := range steps {
		notified = 0
		step.apply()
		if notified != step.wantNotified {
			t.Errorf("%s: listeners heard %d changes, want %d", step.name, notified, step.wantNotified)
		}
	}
}

func TestAgentModeAndUnreachableWebhooksAreKeptFromTheSpoke(t *testing.T) {
	long := strings.Repeat("é", maxInjectionMessage) // two bytes each
	cases := map[string]struct {
		hello         *federationv1.Hello
		heartbeats    []*federationv1.Heartbeat
		wantMode      string
		wantInjection string
	}{
		"hosted member whose API server cannot reach the agent": {
			hello:         &federationv1.Hello{Epoch: 1, AgentMode: federationv1.AgentMode_AGENT_MODE_HOSTED},
			heartbeats:    []*federationv1.Heartbeat{{InjectionUnavailable: "connection refused"}},
			wantMode:      "hosted",
			wantInjection: "connection refused",
		},
		"reachable again": {
			hello:      &federationv1.Hello{Epoch: 1, AgentMode: federationv1.AgentMode_AGENT_MODE_HOSTED},
			heartbeats: []*federationv1.Heartbeat{{InjectionUnavailable: "connection refused"}, {}},
			wantMode:   "hosted",
		},
		"agent that predates agent modes": {
			hello: &federationv1.Hello{Epoch: 1},
		},
		"agent mode this hub does not know": {
			hello: &federationv1.Hello{Epoch: 1, AgentMode: federationv1.AgentMode(42)},
		},
		"control characters become spaces (the text is shown in tables)": {
			hello:         &federationv1.Hello{Epoch: 1, AgentMode: federationv1.AgentMode_AGENT_MODE_HOSTED},
			heartbeats:    []*federationv1.Heartbeat{{InjectionUnavailable: "refused\nprod-a Available\x1b[2J"}},
			wantMode:      "hosted",
			wantInjection: "refused prod-a Available [2J",
		},
		"a message too long is cut on a character boundary, marked by an ellipsis": {
			hello:         &federationv1.Hello{Epoch: 1, AgentMode: federationv1.AgentMode_AGENT_MODE_IN_CLUSTER},
			heartbeats:    []*federationv1.Heartbeat{{InjectionUnavailable: long}},
			wantMode:      "in-cluster",
			wantInjection: strings.Repeat("é", (maxInjectionMessage-3)/2) + "...",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := New(nil, 0)
			s.Connect("a", tc.hello)
			for _, hb := range tc.heartbeats {
				s.Heartbeat("a", 1, hb)
			}
			c, _ := s.Get("a")
			if diff := cmp.Diff(tc.wantMode, c.AgentMode); diff != "" {
				t.Errorf("agent mode (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantInjection, c.InjectionUnavailable); diff != "" {
				t.Errorf("injection unavailable (-want +got):\n%s", diff)
			}
		})
	}
}

func TestInjectionUnavailableFollowsTheReplicaThatHearsTheSpoke(t *testing.T) {
	s := New(clocktesting.NewFakePassiveClock(time.Unix(1000, 0)), 0)
	// Served by another replica: what it persisted is shown here.
	s.Observe("a", Peer{Replica: "other", Live: true, Inventory: Cluster{Epoch: 1, Generation: 1, AgentMode: "hosted", InjectionUnavailable: "connection refused"}})
	if c, _ := s.Get("a"); c.InjectionUnavailable != "connection refused" || c.AgentMode != "hosted" {
		t.Errorf("from the other replica: injection %q, mode %q; want its figures", c.InjectionUnavailable, c.AgentMode)
	}
	s.Observe("a", Peer{Replica: "other", Live: true, Inventory: Cluster{Epoch: 1, Generation: 1, AgentMode: "hosted"}})
	if c, _ := s.Get("a"); c.InjectionUnavailable != "" {
		t.Errorf("after the other replica cleared it: %q, want none", c.InjectionUnavailable)
	}
	// The spoke streams here, says its webhooks are unreachable, then goes:
	// this replica no longer knows, and says nothing rather than old news.
	s.Connect("a", &federationv1.Hello{Epoch: 2})
	s.Heartbeat("a", 2, &federationv1.Heartbeat{InjectionUnavailable: "timeout"})
	if c, _ := s.Get("a"); c.InjectionUnavailable != "timeout" {
		t.Fatalf("while streaming here: %q, want timeout", c.InjectionUnavailable)
	}
	s.Disconnect("a")
	if c, _ := s.Get("a"); c.InjectionUnavailable != "" {
		t.Errorf("after the stream ended: %q, want none", c.InjectionUnavailable)
	}
}
