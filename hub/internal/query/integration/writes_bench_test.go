package integration

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/hub/internal/config"
	"github.com/imperator-federation/imperator/hub/internal/store"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// BenchmarkHubAPIWrites connects N idle spokes (real gRPC + mTLS streams,
// each joined with its own token, heartbeating every 5 s like the agent's
// default) to two hub replicas on one API server, half to each, waits until
// both replicas see every cluster live and the writes of joining are over,
// then counts the API server's write requests (apiserver_request_total,
// verbs POST, PUT, PATCH, DELETE and APPLY) over a window: writes/s is what
// the hub costs its cluster at steady state. The log line breaks it down by
// resource.
//
//	go test -run '^$' -bench BenchmarkHubAPIWrites -benchtime 1x ./hub/internal/query/integration/
//
// Measured on 2 cores: 39.1 writes/s at 200 spokes and 154.1 at 1,000 with
// a Lease renewal per spoke; 1.0 at both (replica Leases 0.4, leader Lease
// 0.6) with per-replica Leases. The window misses the placement scores'
// refresh, one write per cluster every 15 minutes (N/900 writes/s).
//
// IMPERATOR_BENCH_SPOKES chooses the fleet sizes (default 200,1000),
// IMPERATOR_BENCH_WINDOW the window (default 30s); make bench runs 200,1000
// and, with BENCH_FULL=1, 10000.
func BenchmarkHubAPIWrites(b *testing.B) {
	sizes := []int{200, 1000}
	if v := os.Getenv("IMPERATOR_BENCH_SPOKES"); v != "" {
		sizes = sizes[:0]
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("IMPERATOR_BENCH_SPOKES=%q: %q is not a number of spokes", v, f)
			}
			sizes = append(sizes, n)
		}
	}
	window := 30 * time.Second
	if v := os.Getenv("IMPERATOR_BENCH_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("IMPERATOR_BENCH_WINDOW=%q is not a positive duration", v)
		}
		window = d
	}
	for _, n := range sizes {
		b.Run("spokes="+strconv.Itoa(n), func(b *testing.B) { benchmarkHubAPIWrites(b, n, window) })
	}
}

// idleSpoke holds a Report stream open and heartbeats, as an agent whose
// Machines do not change does.
type idleSpoke struct {
	conn   *grpc.ClientConn
	cancel context.CancelFunc
	done   chan struct{}
}

func startIdleSpoke(s *simSpoke, every time.Duration) (*idleSpoke, error) {
	conn, err := dial(s.addr, &s.cert)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := federationv1.NewFederationClient(conn).Report(ctx)
	if err != nil {
		cancel()
		_ = conn.Close()
		return nil, err
	}
	sp := &idleSpoke{conn: conn, cancel: cancel, done: make(chan struct{})}
	send := func(m *federationv1.SpokeMessage) error { return stream.Send(m) }
	err = send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Hello{Hello: &federationv1.Hello{ClusterName: s.name, AgentVersion: "v0.1.0", Epoch: uint64(time.Now().UnixNano())}}})
	if err == nil {
		err = send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Snapshot{Snapshot: &federationv1.Snapshot{Generation: 1, ObservedAt: timestamppb.Now(), Machines: []*federationv1.Machine{gpuMachine("g", 1000, 0)}}}})
	}
	if err != nil {
		sp.stop()
		return nil, fmt.Errorf("opening the stream of %s: %w", s.name, err)
	}
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
	go func() {
		defer close(sp.done)
		// Spread over the interval, as a fleet's agents are.
		timer := time.NewTimer(rand.N(every))
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
				if send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Heartbeat{Heartbeat: &federationv1.Heartbeat{Generation: 1, SentAt: timestamppb.Now()}}}) != nil {
					return
				}
				timer.Reset(every)
			}
		}
	}()
	return sp, nil
}

func (s *idleSpoke) stop() {
	s.cancel()
	if s.done != nil {
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
		}
	}
	_ = s.conn.Close()
}

func benchmarkHubAPIWrites(b *testing.B, n int, window time.Duration) {
	ctx := context.Background()
	stop, err := startHubCluster(ctx)
	b.Cleanup(func() { _ = stop() })
	if err != nil {
		b.Fatal(err)
	}
	// Every simulated spoke joins and connects from 127.0.0.1, which a real
	// fleet spreads over a source per cluster: the per-source limits are
	// lifted to the fleet's size.
	configure := func(c *config.Config) {
		c.Limits.JoinRatePerSource, c.Limits.JoinBurstPerSource = float64(n), n
		c.Limits.MaxConnections = max(c.Limits.MaxConnections, n+256)
		c.Limits.MaxAuthenticatedConnectionsPerSource = n + 256
		c.Limits.MaxAnonymousConnectionsPerSource = c.Limits.MaxHandshakes
	}
	replicas := make([]*hubtest.Hub, 2)
	for i := range replicas {
		h, err := hubtest.Start(hubClientConfig, hubtest.Options{Namespace: hubNamespace, Configure: configure})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = h.Stop() })
		replicas[i] = h
	}

	start := time.Now()
	spokes := make([]*idleSpoke, n)
	b.Cleanup(func() {
		for _, s := range spokes {
			if s != nil {
				s.stop()
			}
		}
	})
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sim, err := joinSpokeVia(ctx, replicas[i%2].Address(), fmt.Sprintf("spoke-%05d", i))
			if err == nil {
				spokes[i], err = startIdleSpoke(sim, 5*time.Second)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	live := func(h *hubtest.Hub) int {
		count := 0
		for i := range n {
			if c, ok := h.Cluster(fmt.Sprintf("spoke-%05d", i)); ok && c.State == store.StateAvailable && !c.Stale() {
				count++
			}
		}
		return count
	}
	if err := waitFor(func() bool { return live(replicas[0]) == n && live(replicas[1]) == n }, 10*time.Minute); err != nil {
		b.Fatalf("the replicas never saw every spoke live (%d and %d of %d): %v", live(replicas[0]), live(replicas[1]), n, err)
	}
	b.Logf("%d spokes joined and live on both replicas after %s", n, time.Since(start).Round(time.Second))
	// Settle: the writes of joining and of the first inventories are over
	// after a few persist intervals and a grace period's worth of renewals.
	time.Sleep(20 * time.Second)

	metrics := kubernetes.NewForConfigOrDie(hubClientConfig).RESTClient()
	before, err := apiWrites(ctx, metrics)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	time.Sleep(window)
	b.StopTimer()
	after, err := apiWrites(ctx, metrics)
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	var parts []string
	for key, v := range after {
		d := v - before[key]
		if d <= 0 {
			continue
		}
		total += d
		parts = append(parts, fmt.Sprintf("%s %.1f/s", key, d/window.Seconds()))
	}
	sort.Strings(parts)
	b.Logf("writes over %s at %d spokes: %s", window, n, strings.Join(parts, ", "))
	if l0, l1 := live(replicas[0]), live(replicas[1]); l0 != n || l1 != n {
		b.Fatalf("after the window, the replicas see %d and %d of %d spokes live", l0, l1, n)
	}
	b.ReportMetric(total/window.Seconds(), "writes/s")
	b.ReportMetric(0, "ns/op")
}

// apiWrites reads the API server's apiserver_request_total and sums the
// write requests by verb and resource.
func apiWrites(ctx context.Context, c rest.Interface) (map[string]float64, error) {
	raw, err := c.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parsing the API server's metrics: %w", err)
	}
	family, ok := families["apiserver_request_total"]
	if !ok {
		return nil, fmt.Errorf("the API server's metrics have no apiserver_request_total")
	}
	writes := map[string]float64{}
	for _, m := range family.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		switch strings.ToUpper(labels["verb"]) {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY", "CREATE", "UPDATE":
			key := strings.ToLower(labels["verb"]) + " " + labels["resource"]
			if labels["subresource"] != "" {
				key += "/" + labels["subresource"]
			}
			writes[key] += m.GetCounter().GetValue()
		}
	}
	return writes, nil
}
