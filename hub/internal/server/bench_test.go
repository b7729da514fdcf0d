package server

import (
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/imperator-federation/imperator/internal/identity"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	"github.com/imperator-federation/imperator/test/util/benchstat"
	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/loadgen"
)

// BenchmarkFleet connects N simulated spokes (each its own TLS connection and
// Report stream, one Machine with 10 machine types) to one hub on loopback,
// then measures rounds in which every spoke sends a Delta at once. ns/op is
// one round of the whole fleet; the extra metrics are the connect time of
// the fleet, the per-update propagation (send → applied in the index → Ack
// received, an upper bound of ingest-to-queryable) and the hub's CPU and
// RSS. The spokes run in load-generator processes (test/util/loadgen), so the
// hub's figures are its own; the processes share the machine's cores.
//
//	go test -run '^$' -bench BenchmarkFleet -benchtime 20x ./hub/internal/server/
//
// IMPERATOR_BENCH_SPOKES chooses the fleet sizes (default 100,1000,5000);
// make bench runs 100,1000 and, with BENCH_FULL=1, 1000,5000,10000.
func BenchmarkFleet(b *testing.B) {
	sizes, err := loadgen.FleetSizes(100, 1000, 5000)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range sizes {
		b.Run("spokes="+strconv.Itoa(n), func(b *testing.B) { benchmarkFleet(b, n) })
	}
}

func benchMachine(available int32) *federationv1.Machine {
	m := &federationv1.Machine{Name: "gpu", Group: "gpu", Ready: federationv1.ConditionStatus_CONDITION_STATUS_TRUE}
	for i := range 10 {
		m.Types = append(m.Types, &federationv1.MachineType{
			Name: "type-" + strconv.Itoa(i), Cpu: "40", Memory: "128Gi", Available: available,
			Gpu:   &federationv1.GPU{Type: "nvidia.com/gpu", Num: 2, Product: "NVIDIA-GeForce-RTX-3090"},
			Usage: &federationv1.Usage{Maximum: available, Reserved: available - 1, Used: 1},
			Nodes: &federationv1.NodeCounts{Ready: 2},
		})
	}
	return m
}

func benchmarkFleet(b *testing.B, n int) {
	h := startTestHubWith(b, func(o *Options) {
		// Every simulated spoke dials from 127.0.0.1, where a real fleet
		// has a source per cluster: the per-source caps are lifted to the
		// fleet's size, the global ones to hold it. The handshake bound
		// (the thundering-herd guard) stays the default.
		o.Limits = DefaultLimits()
		o.Limits.MaxConnections = max(o.Limits.MaxConnections, n+256)
		o.Limits.MaxAuthenticatedConnectionsPerSource = n + 256
		o.Limits.MaxAnonymousConnectionsPerSource = o.Limits.MaxHandshakes
	})
	job := loadgen.Job{Addr: h.addr, CAPEM: h.ca.CertPEM, AgentVersion: "test", Snapshot: []*federationv1.Machine{benchMachine(4)}}
	for available := range int32(5) {
		job.Rounds = append(job.Rounds, benchMachine(3+available))
	}
	for i := range n {
		cluster := "spoke-" + strconv.Itoa(i)
		certPEM, keyPEM := h.certificatePEM(b, cluster, []string{identity.SpokeOrganization}, identity.RegistrationURI(cluster, testUID(cluster)))
		job.Spokes = append(job.Spokes, loadgen.Spoke{Cluster: cluster, CertPEM: certPEM, KeyPEM: keyPEM})
	}
	gens, err := loadgen.Start(b, job)
	if err != nil {
		b.Fatal(err)
	}

	cpuStart := cpuTime()
	start := time.Now()
	connectTimes, err := gens.Connect()
	if err != nil {
		b.Fatal(err)
	}
	connectTotal := time.Since(start)
	connectCPU := cpuTime() - cpuStart

	var latencies []time.Duration
	b.ResetTimer()
	roundCPUStart := cpuTime()
	for round := range b.N {
		got, err := gens.Round(round)
		if err != nil {
			b.Fatal(err)
		}
		latencies = append(latencies, got...)
	}
	b.StopTimer()
	roundCPU := cpuTime() - roundCPUStart

	if got := len(h.store.List()); got != n {
		b.Fatalf("hub index holds %d clusters, want %d", got, n)
	}
	if len(connectTimes) != n || len(latencies) != n*b.N {
		b.Fatalf("load generators answered for %d connects and %d updates, want %d and %d", len(connectTimes), len(latencies), n, n*b.N)
	}
	slices.Sort(connectTimes)
	slices.Sort(latencies)
	b.ReportMetric(connectTotal.Seconds(), "connect-all-s")
	b.ReportMetric(benchstat.Milliseconds(benchstat.Percentile(connectTimes, 0.99)), "connect-p99-ms")
	b.ReportMetric(connectCPU.Seconds(), "connect-cpu-s")
	b.ReportMetric(benchstat.Milliseconds(benchstat.Percentile(latencies, 0.50)), "propagation-p50-ms")
	b.ReportMetric(benchstat.Milliseconds(benchstat.Percentile(latencies, 0.99)), "propagation-p99-ms")
	b.ReportMetric(roundCPU.Seconds()/float64(b.N), "cpu-s/round")
	b.ReportMetric(float64(rssBytes())/(1<<20), "rss-MiB")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rssBytes is the process's resident set size from /proc (0 elsewhere).
func rssBytes() int64 {
	rss, _, err := harness.ProcessMemory(os.Getpid())
	if err != nil {
		return 0
	}
	return rss
}
