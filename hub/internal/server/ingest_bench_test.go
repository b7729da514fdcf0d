package server

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/imperator-federation/imperator/hub/internal/capacity"
	"github.com/imperator-federation/imperator/hub/internal/store"
	"github.com/imperator-federation/imperator/internal/identity"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	"github.com/imperator-federation/imperator/test/util/benchstat"
)

// BenchmarkQueriesWhileOneSpokeStreams measures what one spoke streaming
// Deltas at the hub's default per-stream limit (100/s) costs the queries
// about other clusters: the p99 latency of the query work (GetUsage and
// ListMachines of a quiet cluster, FindCapacity over the fleet, as the
// Query handlers run it against the store) with the spoke's inventory held
// but idle, then with the spoke streaming over a real Report stream. The
// goal is p99-ratio ≤ 2.
//
//	go test -run '^$' -bench BenchmarkQueriesWhileOneSpokeStreams -benchtime 3s ./hub/internal/server/
func BenchmarkQueriesWhileOneSpokeStreams(b *testing.B) {
	h := startTestHub(b)
	now := time.Now()
	for i := range 50 {
		name := fmt.Sprintf("quiet-%02d", i)
		h.store.Connect(name, &federationv1.Hello{ClusterName: name, Epoch: 1})
		h.store.ApplySnapshot(name, 1, &federationv1.Snapshot{Generation: 1, ObservedAt: timestamppb.New(now), Machines: []*federationv1.Machine{benchMachine(8)}})
	}
	query := func() {
		other, _ := h.store.Get("quiet-07")
		capacity.Usage([]*store.Cluster{other}, nil)
		capacity.Machines([]*store.Cluster{other}, capacity.Filter{Cluster: "quiet-07"})
		capacity.Find(h.store.List(), capacity.Request{Type: "type-3", Count: 4}, now)
	}
	measure := func(n int) []time.Duration {
		out := make([]time.Duration, 0, n)
		for range n {
			t0 := time.Now()
			query()
			out = append(out, time.Since(t0))
		}
		return out
	}

	// The noisy spoke: 100 Machines of 10 types each (1,000 types), 5 of
	// them changed by every Delta (5,500 entries/s, within the default
	// entry rate).
	noisy := make([]*federationv1.Machine, 100)
	for i := range noisy {
		noisy[i] = benchMachine(8)
		noisy[i].Name = fmt.Sprintf("gpu-%03d", i)
		noisy[i].Group = fmt.Sprintf("team-%03d", i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fed := h.client(b, h.certificate(b, "noisy", identity.SpokeOrganization))
	stream, err := fed.Report(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := stream.Send(hello("noisy", 1)); err != nil {
		b.Fatal(err)
	}
	if err := stream.Send(snapshotMsg(1, noisy...)); err != nil {
		b.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		b.Fatal(err)
	}
	// Idle: the noisy spoke's inventory is held, but nothing streams.
	idle := measure(5000)

	var acked atomic.Int64
	recvErr := make(chan error, 1)
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				recvErr <- err
				return
			}
			acked.Add(1)
		}
	}()
	sendDone := make(chan struct{})
	go func() {
		defer close(sendDone)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for gen := uint64(2); ; gen++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			upserts := make([]*federationv1.Machine, 5)
			for j := range upserts {
				m := benchMachine(int32(4 + gen%5))
				m.Name = noisy[(int(gen)*5+j)%len(noisy)].Name
				m.Group = noisy[(int(gen)*5+j)%len(noisy)].Group
				upserts[j] = m
			}
			if err := stream.Send(deltaMsg(gen, upserts...)); err != nil {
				return
			}
		}
	}()

	var loaded []time.Duration
	start := time.Now()
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		query()
		loaded = append(loaded, time.Since(t0))
	}
	b.StopTimer()
	elapsed := time.Since(start)
	cancel()
	<-sendDone
	select {
	case err := <-recvErr:
		if ctx.Err() == nil {
			b.Fatalf("the noisy spoke's stream ended: %v", err)
		}
	default:
	}

	slices.Sort(idle)
	slices.Sort(loaded)
	idleP99, loadedP99 := benchstat.Percentile(idle, 0.99), benchstat.Percentile(loaded, 0.99)
	b.ReportMetric(float64(idleP99.Nanoseconds()), "idle-p99-ns")
	b.ReportMetric(float64(loadedP99.Nanoseconds()), "loaded-p99-ns")
	b.ReportMetric(float64(loadedP99)/float64(idleP99), "p99-ratio")
	b.ReportMetric(float64(acked.Load())/elapsed.Seconds(), "deltas-acked/s")
}
