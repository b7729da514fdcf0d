package integration

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/hub/internal/config"
	"github.com/imperator-federation/imperator/hub/internal/hubca"
	"github.com/imperator-federation/imperator/hub/internal/join"
	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/hub/internal/store"
	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/pki"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/loadgen"
)

// BenchmarkHubAPIWrites connects N idle spokes to two hub replicas on one
// API server, half to each, waits until both replicas see every cluster live
// and the writes of joining are over, then counts the API server's write
// requests (apiserver_request_total, verbs POST, PUT, PATCH, DELETE and
// APPLY) over a window: writes/s is what the hub costs its cluster at steady
// state. The log line breaks it down by resource.
//
// Each spoke is registered as a Join registers it (registerSpokes: its
// namespace, its ManagedCluster, a client certificate of the hub CA bound to
// that registration, recorded as its only good one), without a bootstrap
// token, which a spoke no longer needs once joined. The spokes run in
// load-generator processes (test/util/loadgen), 5,000 a process, each a real
// gRPC connection with mTLS and a Report stream that sends a Hello and a
// Snapshot and then heartbeats every 5 s, as the agent's reporter does by
// default. The two replicas stay in the benchmark process: they hold one
// descriptor per spoke, 10,000 together at most, within this machine's
// limit of 20,000, and the benchmark reads their in-memory index to see
// every spoke live.
//
//	go test -run '^$' -bench BenchmarkHubAPIWrites -benchtime 1x -timeout 60m ./hub/internal/query/integration/
//
// Measured on 2 cores: 39.1 writes/s at 200 spokes and 154.1 at 1,000 with
// a Lease renewal per spoke; 1.0 at both (replica Leases 0.4, leader Lease
// 0.6) with per-replica Leases. With the load generators: 1.0 at 200 and at
// 1,000 (registering 1.3 and 6.3 s, connecting 0.7 and 3.4 s, every spoke
// live on both replicas 6 and 29 s after connecting began), and 1.0 at
// 10,000 (patch leases 0.4, put leases 0.6), where registering took 85 s
// and connecting 42 s, but each replica learned of the other's spokes at
// only 8 to 15 a second (its ClusterInventory writes, one cluster at a time:
// namespace, Lease, ClusterInventory and its status, ManagedCluster
// status): 8,701 and 8,681 live after 8 minutes, all of them and the
// writes of joining over about 13 minutes after connecting. With the
// persister's 8 workers and a request fewer per new cluster (no namespace
// create): every spoke live on both replicas 18 s after connecting began at
// 1,000 (32 to 48 s before, in runs beside other suites) and 3m48s at
// 10,000 (connecting 40 s; 5m23s in two busier runs, connecting 58 and
// 72 s: the 2 cores are saturated); the writes of taking in the fleet, logged per
// spoke, are 4.3 at 10,000 (Lease, ManagedCluster status, ClusterInventory
// and its status; the placement scores' the rest). The window misses the
// placement scores' refresh, one write per cluster every 15 to 22.5
// minutes (about N/1,125 writes/s).
//
// IMPERATOR_BENCH_SPOKES chooses the fleet sizes (default 200,1000),
// IMPERATOR_BENCH_WINDOW the window (default 30s); make bench runs 200,1000
// and, with BENCH_FULL=1, 10000.
func BenchmarkHubAPIWrites(b *testing.B) {
	// The replicas' own log (a few lines per spoke) is left out, as
	// controller-runtime leaves it out when no logger is set, without its
	// warning that none is.
	ctrl.SetLogger(logr.Discard())
	sizes, err := loadgen.FleetSizes(200, 1000)
	if err != nil {
		b.Fatal(err)
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

const (
	// idleHeartbeat is the agent reporter's default heartbeat interval.
	idleHeartbeat = 5 * time.Second
	// settleStep is how often the benchmark looks at the writes while the
	// writes of joining go on, and settleMax how long it waits for them to end.
	settleStep = 10 * time.Second
	settleMin  = 20 * time.Second
	settleMax  = 10 * time.Minute
	// registerParallelism is how many spokes are registered at once.
	registerParallelism = 16
)

func benchmarkHubAPIWrites(b *testing.B, n int, window time.Duration) {
	ctx := context.Background()
	runStart := time.Now()
	stop, err := startHubCluster(ctx)
	b.Cleanup(func() { _ = stop() })
	if err != nil {
		b.Fatal(err)
	}
	// Every simulated spoke connects from 127.0.0.1, which a real fleet
	// spreads over a source per cluster: the per-source limits are lifted
	// to the fleet's size.
	configure := func(c *config.Config) {
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
	names := make([]string, n)
	addrs := make([]string, n)
	for i := range n {
		names[i], addrs[i] = fmt.Sprintf("spoke-%05d", i), replicas[i%2].Address()
	}
	spokes, err := registerSpokes(ctx, names, addrs)
	if err != nil {
		b.Fatal(err)
	}
	registered := time.Since(start)
	b.Logf("%d spokes registered as a Join does in %s", n, registered.Round(time.Second))

	gens, err := loadgen.Start(b, loadgen.Job{
		CAPEM: caPEM, AgentVersion: "v0.1.0", HeartbeatInterval: idleHeartbeat,
		Snapshot: []*federationv1.Machine{gpuMachine("g", 1000, 0)}, Spokes: spokes,
	})
	if err != nil {
		b.Fatal(err)
	}
	// The writes of taking in the new fleet: from connecting until every
	// spoke is live on both replicas, per spoke.
	intakeBefore, err := apiWrites(ctx, hubClientConfig)
	if err != nil {
		b.Fatal(err)
	}
	start = time.Now()
	connectTimes, err := gens.Connect()
	if err != nil {
		b.Fatal(err)
	}
	connected := time.Since(start)
	slices.Sort(connectTimes)
	b.Logf("%d spokes connected in %s (each: median %s, p99 %s)", n, connected.Round(time.Millisecond),
		connectTimes[len(connectTimes)/2].Round(time.Millisecond), connectTimes[len(connectTimes)*99/100].Round(time.Millisecond))

	live := func(h *hubtest.Hub) int {
		count := 0
		for _, name := range names {
			if c, ok := h.Cluster(name); ok && c.Liveness == store.LivenessAvailable && !c.Stale() {
				count++
			}
		}
		return count
	}
	// notLive says, per replica, why the spokes it does not see live are not:
	// those connected to it (own) and to the other replica (other).
	notLive := func() string {
		var parts []string
		for r, h := range replicas {
			why := map[string]int{}
			for i, name := range names {
				side := "other"
				if i%2 == r {
					side = "own"
				}
				c, ok := h.Cluster(name)
				switch {
				case !ok:
					why[side+" missing"]++
				case c.Liveness != store.LivenessAvailable:
					why[side+" "+string(c.Liveness)]++
				case c.Restored:
					why[side+" restored"]++
				case c.Outdated != "":
					why[side+" outdated"]++
				case c.Stale():
					why[side+" stale"]++
				}
			}
			parts = append(parts, fmt.Sprintf("replica %d: %v", r, why))
		}
		return strings.Join(parts, "; ")
	}
	// At 10,000 spokes the replicas take about 13 minutes to learn of each
	// other's spokes (see above).
	liveTimeout := 10*time.Minute + time.Duration(n)*60*time.Millisecond
	allLive := true
	for next := time.Now().Add(30 * time.Second); live(replicas[0]) != n || live(replicas[1]) != n; time.Sleep(time.Second) {
		if time.Since(start) > liveTimeout {
			// The writes are still measured, for the figures, and the
			// benchmark fails at the end.
			allLive = false
			b.Errorf("the replicas did not see every spoke live within %s (%d and %d of %d): %s", liveTimeout, live(replicas[0]), live(replicas[1]), n, notLive())
			break
		}
		if time.Now().After(next) {
			next = time.Now().Add(30 * time.Second)
			b.Logf("%s after connecting began, live: %d and %d of %d; %s", time.Since(start).Round(time.Second), live(replicas[0]), live(replicas[1]), n, notLive())
		}
	}
	liveAfter := time.Since(start)
	if allLive {
		b.Logf("%d spokes live on both replicas %s after connecting began", n, liveAfter.Round(time.Second))
	}
	intakeAfter, err := apiWrites(ctx, hubClientConfig)
	if err != nil {
		b.Fatal(err)
	}
	perSpoke, intakeTotal := writesPerSpoke(intakeBefore, intakeAfter, n)
	b.Logf("writes until every spoke was live: %.2f per spoke (%s)", intakeTotal, strings.Join(perSpoke, ", "))

	// Settle: the writes of joining (ManagedCluster status, the first
	// inventories) are over once a step sees only Lease renewals.
	metrics := hubClientConfig
	settleStart := time.Now()
	last, err := apiWrites(ctx, metrics)
	if err != nil {
		b.Fatal(err)
	}
	for {
		time.Sleep(settleStep)
		now, err := apiWrites(ctx, metrics)
		if err != nil {
			b.Fatal(err)
		}
		rates, other := writeRates(last, now, settleStep)
		last = now
		b.Logf("settling, writes over the last %s: %s", settleStep, strings.Join(rates, ", "))
		if waited := time.Since(settleStart); (!other && waited >= settleMin) || waited >= settleMax {
			break
		}
	}

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
	for key, v := range after {
		total += max(0, v-before[key])
	}
	rates, _ := writeRates(before, after, window)
	b.Logf("writes over %s at %d spokes: %s", window, n, strings.Join(rates, ", "))
	if l0, l1 := live(replicas[0]), live(replicas[1]); l0 != n || l1 != n {
		b.Fatalf("after the window, the replicas see %d and %d of %d spokes live: %s", l0, l1, n, notLive())
	}
	b.Logf("the run at %d spokes took %s", n, time.Since(runStart).Round(time.Second))
	b.ReportMetric(total/window.Seconds(), "writes/s")
	b.ReportMetric(registered.Seconds(), "register-s")
	b.ReportMetric(connected.Seconds(), "connect-all-s")
	b.ReportMetric(liveAfter.Seconds(), "live-s")
	b.ReportMetric(intakeTotal, "intake-writes/spoke")
	b.ReportMetric(0, "ns/op")
}

// writeRates lists the writes/s by verb and resource between two readings
// of apiWrites over d, sorted; other says whether any was not of a Lease.
func writeRates(before, after map[string]float64, d time.Duration) (rates []string, other bool) {
	for key, v := range after {
		delta := v - before[key]
		if delta <= 0 {
			continue
		}
		rates = append(rates, fmt.Sprintf("%s %.1f/s", key, delta/d.Seconds()))
		if !strings.HasSuffix(key, " leases") {
			other = true
		}
	}
	sort.Strings(rates)
	if len(rates) == 0 {
		rates = []string{"none"}
	}
	return rates, other
}

// writesPerSpoke lists the writes by verb and resource between two readings
// of apiWrites per spoke of n, sorted, and their sum per spoke.
func writesPerSpoke(before, after map[string]float64, n int) (writes []string, total float64) {
	for key, v := range after {
		delta := v - before[key]
		if delta <= 0 {
			continue
		}
		total += delta / float64(n)
		writes = append(writes, fmt.Sprintf("%s %.2f", key, delta/float64(n)))
	}
	sort.Strings(writes)
	return writes, total
}

// registerSpokes registers every named cluster as the hub's Join does
// (join.Service.Join): its namespace and ManagedCluster (registry.Register),
// a client certificate of the hub CA for a new key, bound to the
// ManagedCluster's UID, and the record that makes it the registration's
// only good certificate (registry.RecordJoin). Only the bootstrap token is
// left out: a joined spoke has no use for it, and creating and consuming
// 10,000 of them one by one is most of a join's time. Each spoke dials the
// replica at the same index of addrs.
func registerSpokes(ctx context.Context, names, addrs []string) ([]loadgen.Spoke, error) {
	ca, err := hubca.LoadOrCreate(ctx, hubClient, hubNamespace, config.Default().CASecret)
	if err != nil {
		return nil, err
	}
	// The suite's client may be rate limited; registering 10,000 clusters
	// is 30,000 writes.
	cfg := rest.CopyConfig(hubClientConfig)
	cfg.QPS, cfg.Burst = 2000, 4000
	c, err := client.New(cfg, client.Options{Scheme: hubClient.Scheme()})
	if err != nil {
		return nil, err
	}
	spokes := make([]loadgen.Spoke, len(names))
	var g errgroup.Group
	g.SetLimit(registerParallelism)
	for i, name := range names {
		g.Go(func() error {
			uid, err := registry.Register(ctx, c, name)
			if err != nil {
				return err
			}
			csrPEM, keyPEM, err := pki.NewCSR(name)
			if err != nil {
				return err
			}
			uris := []*url.URL{identity.RegistrationURI(name, string(uid))}
			certPEM, err := ca.SignClientCSR(csrPEM, name, []string{identity.SpokeOrganization}, uris, join.DefaultCertificateValidity)
			if err != nil {
				return fmt.Errorf("issuing the certificate of %s: %w", name, err)
			}
			cert, err := pki.ParseCertificate(certPEM)
			if err != nil {
				return err
			}
			if _, err := registry.RecordJoin(ctx, c, name, uid, identity.SerialOf(cert), registry.KeyDigest(cert.RawSubjectPublicKeyInfo), cert.NotBefore); err != nil {
				return fmt.Errorf("recording the certificate of %s: %w", name, err)
			}
			spokes[i] = loadgen.Spoke{Cluster: name, Addr: addrs[i], CertPEM: certPEM, KeyPEM: keyPEM}
			return nil
		})
	}
	return spokes, g.Wait()
}

// apiWrites reads the API server's apiserver_request_total and sums the
// write requests by verb and resource.
func apiWrites(ctx context.Context, cfg *rest.Config) (map[string]float64, error) {
	families, err := harness.APIServerMetrics(ctx, cfg)
	if err != nil {
		return nil, err
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
