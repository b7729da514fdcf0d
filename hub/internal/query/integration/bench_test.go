package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/hub/internal/config"
	"github.com/imperator-federation/imperator/hub/internal/persist"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// BenchmarkReplicaPropagation measures how long a usage change a spoke
// reports to one hub replica takes to reach the other replica's answers
// (through the ClusterInventory the first writes and the second follows),
// with every spoke changing at once. "quiet": each change comes after a
// persist interval without one, so it is written at once; "busy": changes
// follow each other, and the persist interval (3s) coalesces them.
//
//	go test -run '^$' -bench ReplicaPropagation -benchtime 5x ./hub/internal/query/integration/
func BenchmarkReplicaPropagation(b *testing.B) {
	for _, n := range []int{10, 50} {
		for _, quiet := range []bool{true, false} {
			name := fmt.Sprintf("spokes=%d/quiet=%t", n, quiet)
			b.Run(name, func(b *testing.B) { benchmarkReplicaPropagation(b, n, quiet) })
		}
	}
}

func benchmarkReplicaPropagation(b *testing.B, n int, quiet bool) {
	ctx := context.Background()
	stop, err := startHubCluster(ctx)
	b.Cleanup(func() { _ = stop() })
	if err != nil {
		b.Fatal(err)
	}
	first, err := hubtest.Start(hubClientConfig, hubtest.Options{Namespace: hubNamespace})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = first.Stop() })
	second, err := hubtest.Start(hubClientConfig, hubtest.Options{Namespace: hubNamespace, Configure: func(c *config.Config) {
		// Every simulated spoke joins from 127.0.0.1, which a real fleet
		// spreads over a source per cluster.
		c.Limits.JoinRatePerSource, c.Limits.JoinBurstPerSource = float64(n), n
	}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = second.Stop() })

	spokes := make([]*simSpoke, n)
	for i := range spokes {
		s, err := joinSpokeVia(ctx, second.Address(), fmt.Sprintf("spoke-%03d", i))
		if err != nil {
			b.Fatal(err)
		}
		if err := s.start(gpuMachine("g", 1000, 0)); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.stop() })
		spokes[i] = s
	}
	seen := func(used int32) int {
		count := 0
		for _, s := range spokes {
			if c, ok := first.Cluster(s.name); ok && usedOf(c, "g") == used {
				count++
			}
		}
		return count
	}
	if err := waitFor(func() bool { return seen(0) == n }, 2*time.Minute); err != nil {
		b.Fatal("the first replica never saw every spoke:", err)
	}

	var latencies []time.Duration
	b.ResetTimer()
	for round := 1; round <= b.N; round++ {
		if quiet {
			b.StopTimer()
			time.Sleep(persist.DefaultInterval)
			b.StartTimer()
		}
		sent := time.Now()
		for _, s := range spokes {
			if err := s.update(gpuMachine("g", 1000, int32(round))); err != nil {
				b.Fatal(err)
			}
		}
		arrived := map[string]bool{}
		err := waitFor(func() bool {
			for _, s := range spokes {
				if c, ok := first.Cluster(s.name); !arrived[s.name] && ok && usedOf(c, "g") == int32(round) {
					arrived[s.name] = true
					latencies = append(latencies, time.Since(sent))
				}
			}
			return len(arrived) == n
		}, time.Minute)
		if err != nil {
			b.Fatalf("round %d: %d of %d changes reached the other replica: %v", round, len(arrived), n, err)
		}
	}
	b.StopTimer()
	slices.Sort(latencies)
	b.ReportMetric(float64(latencies[len(latencies)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(latencies[len(latencies)*99/100].Milliseconds()), "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// waitFor polls done every 10ms until it is true or timeout passes.
func waitFor(done func() bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !done() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not done within %s", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// BenchmarkFleetHold measures CreateHold end to end at the hub: placement,
// the FleetHold written (create, Pending, Held), and the two phases over
// the Report streams of two simulated spokes that answer at once (their
// CapacityHold's own time to Provisioned, one Machine reconcile on a real
// spoke, is not in it). Each round releases the hold again (not timed).
//
//	go test -run '^$' -bench FleetHold -benchtime 50x ./hub/internal/query/integration/
func BenchmarkFleetHold(b *testing.B) {
	ctx := context.Background()
	stop, err := startHubCluster(ctx)
	b.Cleanup(func() { _ = stop() })
	if err != nil {
		b.Fatal(err)
	}
	h, err := hubtest.Start(hubClientConfig, hubtest.Options{Namespace: hubNamespace})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Stop() })
	for _, name := range []string{"bench-a", "bench-b"} {
		s, err := joinSpokeVia(ctx, h.Address(), name)
		if err != nil {
			b.Fatal(err)
		}
		s.onHold = answeringAtOnce(s, "g-"+name)
		if err := s.start(holdMachine("g-"+name, 8, 0)); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.stop() })
	}
	cert, err := hubtest.ClientCertificate(ctx, hubClient, hubNamespace, "bench", "holder")
	if err != nil {
		b.Fatal(err)
	}
	conn, err := dial(h.Address(), &cert)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	holder := queryv1.NewQueryClient(conn)
	if err := waitFor(func() bool {
		for _, name := range []string{"bench-a", "bench-b"} {
			if c, ok := h.Cluster(name); !ok || c.Stale() {
				return false
			}
		}
		return true
	}, time.Minute); err != nil {
		b.Fatal("the spokes never reported:", err)
	}

	measureCreateHold(b, holder)
}

// measureCreateHold times CreateHold of a SPREAD hold of 12 units (8 on
// one spoke, 4 on the other, so both are asked), releasing it after each
// round (not timed), and reports p50 and p99.
func measureCreateHold(b *testing.B, holder queryv1.QueryClient) {
	ctx := context.Background()
	var latencies []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		began := time.Now()
		fh, err := holder.CreateHold(ctx, holdRequest("bench-hold", 12, queryv1.CapacityMode_CAPACITY_MODE_SPREAD))
		latencies = append(latencies, time.Since(began))
		if err != nil {
			b.Fatal(err)
		}
		if fh.GetPhase() != queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_HELD || len(fh.GetClusters()) != 2 {
			b.Fatalf("round %d: hold %s on %d clusters: %s", i, fh.GetPhase(), len(fh.GetClusters()), fh.GetMessage())
		}
		b.StopTimer()
		if _, err := holder.ReleaseHold(ctx, &queryv1.ReleaseHoldRequest{Name: "bench-hold"}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(latencies)
	b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkFleetHoldTwoReplicas is BenchmarkFleetHold on a hub of two
// replicas with the spokes spread over them: CreateHold answered by the
// replica of bench-a, bench-b's part delivered by the other replica
// through the FleetHold.
//
//	go test -run '^$' -bench FleetHoldTwoReplicas -benchtime 50x ./hub/internal/query/integration/
func BenchmarkFleetHoldTwoReplicas(b *testing.B) {
	ctx := context.Background()
	stop, err := startHubCluster(ctx)
	b.Cleanup(func() { _ = stop() })
	if err != nil {
		b.Fatal(err)
	}
	var hubs []*hubtest.Hub
	for range 2 {
		h, err := hubtest.Start(hubClientConfig, hubtest.Options{Namespace: hubNamespace, PersistInterval: 200 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = h.Stop() })
		hubs = append(hubs, h)
	}
	for i, name := range []string{"bench-a", "bench-b"} {
		s, err := joinSpokeVia(ctx, hubs[i].Address(), name)
		if err != nil {
			b.Fatal(err)
		}
		s.onHold = answeringAtOnce(s, "g-"+name)
		if err := s.start(holdMachine("g-"+name, 8, 0)); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.stop() })
	}
	cert, err := hubtest.ClientCertificate(ctx, hubClient, hubNamespace, "bench", "holder")
	if err != nil {
		b.Fatal(err)
	}
	conn, err := dial(hubs[0].Address(), &cert)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	if err := waitFor(func() bool {
		for _, name := range []string{"bench-a", "bench-b"} {
			if c, ok := hubs[0].Cluster(name); !ok || c.Stale() {
				return false
			}
		}
		return true
	}, time.Minute); err != nil {
		b.Fatal("the spokes never reported to the first replica:", err)
	}
	measureCreateHold(b, queryv1.NewQueryClient(conn))
}

// answeringAtOnce is a spoke that holds or releases at once and, as the
// agent does, reports the usage that shows it before it answers.
func answeringAtOnce(s *simSpoke, group string) func(*federationv1.HoldRequest) *federationv1.HoldResponse {
	return func(req *federationv1.HoldRequest) *federationv1.HoldResponse {
		if req.GetRelease() {
			_ = s.update(holdMachine(group, 8, 0))
			return &federationv1.HoldResponse{Result: federationv1.HoldResult_HOLD_RESULT_RELEASED}
		}
		_ = s.update(holdMachine(group, 8, req.GetCount()))
		return &federationv1.HoldResponse{Result: federationv1.HoldResult_HOLD_RESULT_HELD, Held: req.GetCount()}
	}
}
