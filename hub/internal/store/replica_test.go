package store

import (
	"fmt"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// Another replica's clusters stay live on its replica Lease alone: no
// per-cluster write while it runs, Unknown a grace period after this
// replica last saw it renew, and Unknown at once when it says the spoke
// went silent, however fresh its own Lease.
func TestOtherReplicasClustersLiveWhileItsReplicaLeaseIsRenewed(t *testing.T) {
	start := time.Unix(10_000, 0)
	clk := clocktesting.NewFakeClock(start)
	s := New(clk, 40*time.Second)
	s.SetReplica("hub-a")
	// The Leases of x and y were taken once, long ago by this replica's clock.
	for _, name := range []string{"x", "y"} {
		s.Observe(name, Peer{Inventory: Cluster{Generation: 1, LastHeartbeat: start.Add(-time.Hour)}, Replica: "hub-b", RenewTime: start.Add(-time.Hour)})
	}
	state := func(name string) Liveness {
		c, _ := s.Get(name)
		return c.Liveness
	}
	if state("x") != LivenessUnknown {
		t.Fatalf("before hub-b is seen running: x is %s, want Unknown", state("x"))
	}

	for at := time.Duration(0); at <= 2*time.Minute; at += 5 * time.Second {
		clk.SetTime(start.Add(at))
		s.ReplicaRenewed("hub-b")
		s.EvaluateLiveness()
		if state("x") != LivenessAvailable || state("y") != LivenessAvailable {
			t.Fatalf("%s in, hub-b renewing every 5s: x %s, y %s, want both Available", at, state("x"), state("y"))
		}
	}
	if c, _ := s.Get("x"); c.Stale() || !c.Connected || !s.ReplicaLive("hub-b") {
		t.Errorf("x while hub-b runs: stale=%t connected=%t replicaLive=%t, want current, connected, live", c.Stale(), c.Connected, s.ReplicaLive("hub-b"))
	}

	last := start.Add(2 * time.Minute)
	// hub-b says y's spoke went silent: y is Unknown at once, x is not.
	s.Observe("y", Peer{Inventory: Cluster{Generation: 1, LastHeartbeat: last.Add(-41 * time.Second)}, Replica: "hub-b", RenewTime: start.Add(-time.Hour), Live: true, Silent: true})
	s.ReplicaRenewed("hub-b")
	s.EvaluateLiveness()
	if state("y") != LivenessUnknown || state("x") != LivenessAvailable {
		t.Errorf("after hub-b marked y silent: x %s, y %s, want Available and Unknown", state("x"), state("y"))
	}

	// hub-b stops renewing: x turns Unknown just after the grace period.
	clk.SetTime(last.Add(40 * time.Second))
	s.EvaluateLiveness()
	if state("x") != LivenessAvailable {
		t.Errorf("40s after the last renewal seen: x %s, want Available (the grace period is 40s)", state("x"))
	}
	clk.SetTime(last.Add(41 * time.Second))
	s.EvaluateLiveness()
	if c, _ := s.Get("x"); c.Liveness != LivenessUnknown || c.Connected || s.ReplicaLive("hub-b") {
		t.Errorf("41s after the last renewal seen: x %s connected=%t replicaLive=%t, want Unknown, not connected, not live", c.Liveness, c.Connected, s.ReplicaLive("hub-b"))
	}
}

// A replica whose Lease is gone is forgotten: the store keeps no entry per
// replica ever seen (replicas get new names when they restart), and its
// clusters go Unknown a grace period after its last renewal seen.
func TestReplicaGoneIsForgotten(t *testing.T) {
	start := time.Unix(10_000, 0)
	clk := clocktesting.NewFakeClock(start)
	s := New(clk, 40*time.Second)
	s.SetReplica("hub-a")
	s.ReplicaRenewed("hub-b")
	if !s.ReplicaLive("hub-b") {
		t.Fatal("hub-b not live right after its renewal was seen")
	}
	s.ReplicaGone("hub-b")
	if s.ReplicaLive("hub-b") {
		t.Error("hub-b still live after its Lease was deleted")
	}
	if n := len(s.replicaSeen); n != 0 {
		t.Errorf("store keeps %d replicas it saw, want 0 once they are gone", n)
	}
}

// A renewal of another replica's Lease makes a new snapshot only of the
// clusters it changes: those that replica says are silent keep theirs (a
// snapshot is an allocation per cluster, every RenewInterval), the others
// show the renewal as their last heartbeat.
func TestReplicaRenewalCopiesOnlyTheClustersItChanges(t *testing.T) {
	start := time.Unix(10_000, 0)
	clk := clocktesting.NewFakeClock(start)
	s := New(clk, 40*time.Second)
	s.SetReplica("hub-a")
	s.Observe("live", Peer{Inventory: Cluster{Generation: 1, LastHeartbeat: start.Add(-time.Second)}, Replica: "hub-b", RenewTime: start.Add(-time.Second), Live: true})
	s.Observe("silent", Peer{Inventory: Cluster{Generation: 1, LastHeartbeat: start.Add(-time.Minute)}, Replica: "hub-b", RenewTime: start.Add(-time.Hour), Live: true, Silent: true})
	clk.SetTime(start.Add(5 * time.Second))
	s.ReplicaRenewed("hub-b")
	silentBefore, _ := s.Get("silent")
	liveBefore, _ := s.Get("live")

	clk.SetTime(start.Add(10 * time.Second))
	s.ReplicaRenewed("hub-b")
	silent, _ := s.Get("silent")
	live, _ := s.Get("live")
	if silent != silentBefore {
		t.Errorf("a renewal made a new snapshot of a cluster its replica says is silent")
	}
	if silent.Liveness != LivenessUnknown || !silent.LastHeartbeat.Equal(start.Add(-time.Minute)) {
		t.Errorf("silent cluster after a renewal: %s, last heartbeat %s, want Unknown and %s", silent.Liveness, silent.LastHeartbeat, start.Add(-time.Minute))
	}
	if live == liveBefore || !live.LastHeartbeat.Equal(start.Add(10*time.Second)) || !liveBefore.LastHeartbeat.Equal(start.Add(5*time.Second)) {
		t.Errorf("live cluster's last heartbeat %s after the renewal (snapshot held before: %s), want %s (and %s unchanged)",
			live.LastHeartbeat, liveBefore.LastHeartbeat, start.Add(10*time.Second), start.Add(5*time.Second))
	}
}

// BenchmarkReplicaRenewed is one renewal seen of a replica serving 5,000
// clusters, one in ten of them silent, in a store of 10,000.
func BenchmarkReplicaRenewed(b *testing.B) {
	start := time.Unix(10_000, 0)
	clk := clocktesting.NewFakeClock(start)
	s := New(clk, 40*time.Second)
	s.SetReplica("hub-a")
	for i := range 10_000 {
		replica := []string{"hub-b", "hub-c"}[i%2]
		s.Observe(fmt.Sprintf("c%05d", i), Peer{Inventory: Cluster{Generation: 1, LastHeartbeat: start}, Replica: replica, RenewTime: start, Live: true, Silent: i%20 == 0})
	}
	b.ReportAllocs()
	for b.Loop() {
		clk.Step(time.Millisecond)
		s.ReplicaRenewed("hub-b")
	}
}
