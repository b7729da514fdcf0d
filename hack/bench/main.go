// Command bench runs the project's benchmarks (make bench) and prints one
// table: each performance goal of the project, the figure measured, the
// goal, and whether it is met. It also writes every figure it read to
// bench/results.json for scripts.
//
// The benchmarks stay ordinary `go test -bench` functions in their packages,
// each reporting its figures with b.ReportMetric; this command only chooses
// which to run, with which -benchtime, and compares the figures to the goals
// below. A goal whose benchmark does not exist yet is printed as MISSING:
// the table is also the list of what remains to be measured.
//
//	go run ./hack/bench                  default run (< 15 minutes on 2 cores)
//	BENCH_FULL=1 go run ./hack/bench     adds the 10,000-spoke fleet
//	go run ./hack/bench -smoke           every benchmark once, smallest size (CI)
//	go run ./hack/bench -strict          exit 1 when a goal is missed
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// A run is one `go test -bench` invocation.
type run struct {
	pkg   string
	bench string // -bench pattern
	times string // -benchtime
	// smoke is the -bench pattern of the smoke run (the smallest size);
	// empty means bench.
	smoke string
	// env is added to the benchmark's environment; fullEnv replaces it
	// with BENCH_FULL=1.
	env, fullEnv []string
}

// runs are every benchmark of the project.
var runs = []run{
	{pkg: "./hub/internal/capacity/", bench: "^Benchmark", times: "200x", smoke: "^Benchmark.*/clusters=10/"},
	{pkg: "./hub/internal/ingest/", bench: "^Benchmark", times: "20x"},
	{pkg: "./hub/internal/server/", bench: "^BenchmarkQueriesWhileOneSpokeStreams$", times: "2000x"},
	{pkg: "./hub/internal/server/", bench: "^BenchmarkFleet$", times: "20x",
		env: []string{"IMPERATOR_BENCH_SPOKES=100,1000"}, fullEnv: []string{"IMPERATOR_BENCH_SPOKES=1000,5000,10000"}},
	{pkg: "./hub/internal/query/integration/", bench: "^BenchmarkReplicaPropagation$", times: "5x", smoke: "^BenchmarkReplicaPropagation$/spokes=10/"},
	{pkg: "./hub/internal/query/integration/", bench: "^BenchmarkFleetHold$", times: "50x"},
	{pkg: "./hub/internal/query/integration/", bench: "^BenchmarkFleetHoldTwoReplicas$", times: "50x"},
	{pkg: "./hub/internal/query/tokenauth/", bench: "^BenchmarkQueryAuth$", times: "200x"},
	{pkg: "./hub/internal/query/integration/", bench: "^BenchmarkHubAPIWrites$", times: "1x", smoke: "^BenchmarkHubAPIWrites$/spokes=200$",
		env: []string{"IMPERATOR_BENCH_SPOKES=200,1000"}, fullEnv: []string{"IMPERATOR_BENCH_SPOKES=10000"}},
	{pkg: "./spoke/internal/webhook/podinjector/", bench: "^BenchmarkHandle$", times: "2000x"},
	{pkg: "./spoke/internal/webhook/podinjector/integration/", bench: "^(BenchmarkPodCreate|BenchmarkHandleFromCache)$", times: "300x"},
	// The two injection paths side by side: a webhook API server
	// and a policy-only one, each iteration four pod creations.
	{pkg: "./spoke/internal/webhook/podinjector/integration/", bench: "^BenchmarkPodCreateByPath$", times: "500x"},
	{pkg: "./spoke/internal/webhook/machinevalidator/integration/", bench: "^Benchmark", times: "300x"},
	{pkg: "./spoke/internal/controller/nodepool/", bench: "^Benchmark", times: "2000x"},
	{pkg: "./spoke/internal/controller/nodepool/integration/", bench: "^BenchmarkConfigurePool$", times: "5x"},
	// BenchmarkSpokeAtScale: 100 nodes, 5 Machines, 1,000 pods; BENCH_FULL 1,000 nodes, 50 Machines, 10,000 pods.
	{pkg: "./spoke/internal/controller/machine/integration/", bench: "^Benchmark", times: "1x", fullEnv: []string{"IMPERATOR_BENCH_SPOKE_NODES=1000"}},
	{pkg: "./spoke/internal/reporter/integration/", bench: "^BenchmarkReportPropagation$", times: "50x"},
	// MultiKueue dispatch: a burst of pending Workloads → nominated.
	{pkg: "./dispatcher/internal/controller/integration/", bench: "^BenchmarkDispatchLatency$/workloads=200$", times: "1x", smoke: "^BenchmarkDispatchLatency$/workloads=20$"},
}

// A goal is one figure the project promises.
type goal struct {
	metric string // what the reader of the table looks for
	bench  string // the benchmark's full name, without the -GOMAXPROCS suffix
	unit   string // the figure's unit as the benchmark reports it
	max    float64
	// over, when set, makes the figure the ratio bench/unit ÷ over/unit.
	over string
	full bool // measured only with BENCH_FULL=1
	// issue says where the goal comes from.
	issue string
}

var goals = []goal{
	{metric: "hub: 1,000 spokes, propagation p99", bench: "BenchmarkFleet/spokes=1000", unit: "propagation-p99-ms", max: 1000, issue: "21"},
	{metric: "hub: 10,000 spokes connect", bench: "BenchmarkFleet/spokes=10000", unit: "connect-all-s", max: 60, full: true, issue: "21"},
	{metric: "hub: 10,000 spokes, RSS", bench: "BenchmarkFleet/spokes=10000", unit: "rss-MiB", max: 2048, full: true, issue: "21"},
	{metric: "hub: 10,000 spokes, propagation p99", bench: "BenchmarkFleet/spokes=10000", unit: "propagation-p99-ms", max: 2000, full: true, issue: "21"},
	{metric: "hub: FindCapacity p99, 10,000 clusters (type)", bench: "BenchmarkFindCapacity/clusters=10000/type-same-cluster", unit: "p99-ns", max: 50e6, issue: "21"},
	{metric: "hub: FindCapacity p99, 10,000 clusters (shape)", bench: "BenchmarkFindCapacity/clusters=10000/shape-gpu-product", unit: "p99-ns", max: 50e6, issue: "21"},
	{metric: "hub: API writes/s, 1,000 idle spokes on 2 replicas", bench: "BenchmarkHubAPIWrites/spokes=1000", unit: "writes/s", max: 20, issue: "21"},
	{metric: "hub: API writes/s, 10,000 idle spokes on 2 replicas", bench: "BenchmarkHubAPIWrites/spokes=10000", unit: "writes/s", max: 20, full: true, issue: "21"},
	// Liveness across replicas: a replica sees the spokes of the other
	// once that one's persister has written them.
	{metric: "hub: 10,000 new spokes live on both replicas, after connecting", bench: "BenchmarkHubAPIWrites/spokes=10000", unit: "live-s", max: 60, full: true, issue: "21"},
	{metric: "reporter: spoke Machine status → hub answer p99", bench: "BenchmarkReportPropagation", unit: "p99-ms", max: 200, issue: "21"},
	// The handler as the agent runs it, reading Machines from the informer
	// cache; BenchmarkHandle (fake client, whose List is a JSON round trip
	// of every Machine) stays in the results for comparison.
	{metric: "injector: handler time", bench: "BenchmarkHandleFromCache", unit: "ns/op", max: 50_000, issue: "21"},
	{metric: "injector: handler allocations", bench: "BenchmarkHandleFromCache", unit: "allocs/op", max: 100, issue: "21"},
	{metric: "injector: pod create p50, with ÷ without webhook", bench: "BenchmarkPodCreate/with-webhook", over: "BenchmarkPodCreate/without-webhook", unit: "p50-µs", max: 1.3, issue: "21"},
	{metric: "injector, policy path: guest ÷ plain pod create p50 (one run with the webhook path)", bench: "BenchmarkPodCreateByPath", unit: "policy-guest-p50-x-plain", max: 1.1, issue: "36"},
	{metric: "injector, webhook path: guest ÷ plain pod create p50 (same run)", bench: "BenchmarkPodCreateByPath", unit: "webhook-guest-p50-x-plain", max: 1.3, issue: "36"},
	{metric: "spoke: 100-node pool configured", bench: "BenchmarkConfigurePool", unit: "ms-configure/op", max: 300, issue: "21"},
	{metric: "spoke: 1,000 nodes, 50 Machines, 10,000 pods converge", bench: "BenchmarkSpokeAtScale/nodes=1000", unit: "converge-s", max: 30, full: true, issue: "21"},
	// The agent's own part of that convergence; the rest is the cluster's
	// controller-manager, scheduler and kwok creating, binding and starting
	// 5,000 reservation pods on the same 2 cores.
	{metric: "spoke: 1,000 nodes, every node labelled (the agent's part)", bench: "BenchmarkSpokeAtScale/nodes=1000", unit: "nodes-labelled-s", max: 30, full: true, issue: "21"},
	{metric: "spoke: 1,000 nodes, every reservation declared (the agent's part)", bench: "BenchmarkSpokeAtScale/nodes=1000", unit: "reservations-declared-s", max: 30, full: true, issue: "21"},
	{metric: "spoke: 1,000 nodes, steady-state reconcile p99", bench: "BenchmarkSpokeAtScale/nodes=1000", unit: "reconcile-p99-ms", max: 100, full: true, issue: "21"},
	{metric: "spoke: 1,000 nodes, writes at steady state (60 s)", bench: "BenchmarkSpokeAtScale/nodes=1000", unit: "steady-writes", max: 0.5, full: true, issue: "21"},
	{metric: "spoke: 1,000 nodes, agent RSS (its own process, after the steady window)", bench: "BenchmarkSpokeAtScale/nodes=1000", unit: "rss-MiB", max: 300, full: true, issue: "21"},
	{metric: "guest handover p50 (slot reserved)", bench: "BenchmarkGuestHandover", unit: "handover-p50-ms", max: 150, issue: "18"},
	{metric: "guest handover p99 (slot reserved)", bench: "BenchmarkGuestHandover", unit: "handover-p99-ms", max: 300, issue: "18"},
	{metric: "reservation back after a guest leaves (max)", bench: "BenchmarkGuestHandover", unit: "restore-max-ms", max: 500, issue: "18"},
	// The same to binding, without the harness's simulated container start
	// (kwok stages of 100–500 ms), which is most of the time to Running.
	{metric: "guest handover to bound p50 (slot reserved)", bench: "BenchmarkGuestHandover", unit: "handover-bound-p50-ms", max: 150, issue: "18"},
	{metric: "guest handover to bound p99 (slot reserved)", bench: "BenchmarkGuestHandover", unit: "handover-bound-p99-ms", max: 300, issue: "18"},
	{metric: "gated guests tried by the scheduler too early", bench: "BenchmarkGuestHandover", unit: "failedscheduling-events", max: 0.5, issue: "18"},
	{metric: "fleet hold creation p99 (two spokes)", bench: "BenchmarkFleetHold", unit: "p99-ms", max: 200, issue: "19"},
	{metric: "fleet hold creation p99 (two replicas, spokes spread over them)", bench: "BenchmarkFleetHoldTwoReplicas", unit: "p99-ms", max: 500, issue: "31"},
}

// A figure is one value a benchmark reported.
type figure struct {
	Bench string  `json:"benchmark"`
	Unit  string  `json:"unit"`
	Value float64 `json:"value"`
}

// A verdict is one row of the table.
type verdict struct {
	Metric string   `json:"metric"`
	Figure *float64 `json:"figure,omitempty"`
	Unit   string   `json:"unit"`
	Max    float64  `json:"max"`
	Status string   `json:"status"` // PASS, FAIL, MISSING, SKIPPED
	Issue  string   `json:"issue"`
}

func main() {
	if err := mainErr(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func mainErr() error {
	smoke := flag.Bool("smoke", false, "run every benchmark once at its smallest size (CI: benchmarks that cannot rot); no goals are judged")
	strict := flag.Bool("strict", false, "exit 1 when a goal is missed")
	out := flag.String("out", "bench/results.json", "where the figures and verdicts are written")
	flag.Parse()
	full := os.Getenv("BENCH_FULL") == "1"

	start := time.Now()
	var figures []figure
	var failed []string
	for _, r := range runs {
		got, err := r.run(*smoke, full)
		figures = append(figures, got...)
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s %s: %v", r.pkg, r.bench, err))
		}
	}
	if *smoke {
		fmt.Printf("bench: smoke run: %d figures from %d runs in %s\n", len(figures), len(runs), time.Since(start).Round(time.Second))
		if len(failed) > 0 {
			return fmt.Errorf("benchmarks failed:\n  %s", strings.Join(failed, "\n  "))
		}
		return nil
	}

	verdicts := judge(goals, figures, full)
	if err := printTable(os.Stdout, verdicts); err != nil {
		return fmt.Errorf("printing the goals table: %w", err)
	}
	fmt.Printf("\nbench: %d figures in %s; results in %s\n", len(figures), time.Since(start).Round(time.Second), *out)
	if err := writeResults(*out, figures, verdicts); err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("benchmarks failed:\n  %s", strings.Join(failed, "\n  "))
	}
	if *strict {
		for _, v := range verdicts {
			if v.Status == "FAIL" {
				return errors.New("a goal is missed (-strict)")
			}
		}
	}
	return nil
}

func (r run) run(smoke, full bool) ([]figure, error) {
	pattern, times, env := r.bench, r.times, r.env
	if smoke {
		times = "1x"
		env = append(slices.Clone(env), "IMPERATOR_BENCH_SMOKE=1")
		if r.smoke != "" {
			pattern = r.smoke
		}
	} else if full && r.fullEnv != nil {
		env = r.fullEnv
	}
	args := []string{"test", "-run", "^$", "-bench", pattern, "-benchtime", times, "-benchmem", "-count", "1", "-timeout", "60m", r.pkg}
	fmt.Fprintf(os.Stderr, "bench: go %s %s\n", strings.Join(env, " "), strings.Join(args, " "))
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), env...)
	var buf bytes.Buffer
	cmd.Stdout = io.MultiWriter(&buf, os.Stderr)
	cmd.Stderr = os.Stderr
	err := cmd.Run()
	return parse(&buf), err
}

// benchLine matches a result line of `go test -bench`:
// "BenchmarkFleet/spokes=100-2   20   123 ns/op   4.5 p99-ms".
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.+)$`)

// interruptedLine is a benchmark's name followed by something else than its
// iteration count (a log line), and figuresLine the iteration count and
// figures that come later on their own line.
var (
	interruptedLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\D`)
	figuresLine     = regexp.MustCompile(`^\d+\s+(\d.*/op.*|\d.*\s\S+-\S+.*)$`)
)

func parse(r io.Reader) []figure {
	var figures []figure
	// pending is the benchmark whose name was printed on a line that a log
	// line of the benchmark (on stderr, merged by go test) interrupted: its
	// figures follow on a line of their own.
	var pending string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			if name := interruptedLine.FindStringSubmatch(line); name != nil {
				pending = name[1]
			} else if rest := figuresLine.FindStringSubmatch(line); rest != nil && pending != "" {
				m = []string{line, pending, rest[1]}
				pending = ""
			}
		}
		if m == nil {
			continue
		}
		fields := strings.Fields(m[2])
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				break
			}
			figures = append(figures, figure{Bench: m[1], Unit: fields[i+1], Value: v})
		}
	}
	return figures
}

func lookup(figures []figure, bench, unit string) (float64, bool) {
	for _, f := range figures {
		if f.Bench == bench && f.Unit == unit {
			return f.Value, true
		}
	}
	return 0, false
}

func judge(goals []goal, figures []figure, full bool) []verdict {
	verdicts := make([]verdict, 0, len(goals))
	for _, g := range goals {
		v := verdict{Metric: g.metric, Unit: g.unit, Max: g.max, Issue: g.issue}
		value, ok := lookup(figures, g.bench, g.unit)
		if ok && g.over != "" {
			var base float64
			base, ok = lookup(figures, g.over, g.unit)
			ok = ok && base > 0
			if ok {
				value, v.Unit = value/base, "× "+g.unit
			}
		}
		switch {
		case !ok && g.full && !full:
			v.Status = "SKIPPED"
		case !ok:
			v.Status = "MISSING"
		case value <= g.max:
			v.Status, v.Figure = "PASS", &value
		default:
			v.Status, v.Figure = "FAIL", &value
		}
		verdicts = append(verdicts, v)
	}
	return verdicts
}

// printTable writes the goals table to w. The rows go to a tabwriter, which
// buffers them: a failed write surfaces at its Flush.
func printTable(w io.Writer, verdicts []verdict) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "METRIC\tFIGURE\tGOAL\tRESULT\tISSUE")
	counts := map[string]int{}
	for _, v := range verdicts {
		fig := "-"
		if v.Figure != nil {
			fig = readable(*v.Figure, v.Unit)
		}
		note := v.Status
		switch v.Status {
		case "MISSING":
			note = "MISSING (no benchmark reports it yet)"
		case "SKIPPED":
			note = "SKIPPED (BENCH_FULL=1)"
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t≤ %s\t%s\t#%s\n", v.Metric, fig, readable(v.Max, v.Unit), note, v.Issue)
		counts[v.Status]++
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d goals: %d met, %d missed, %d not measured yet, %d need BENCH_FULL=1\n",
		len(verdicts), counts["PASS"], counts["FAIL"], counts["MISSING"], counts["SKIPPED"])
	return err
}

// readable formats a figure for the table: nanoseconds as µs or ms when
// large, no exponents, three significant digits or the whole integer part.
func readable(v float64, unit string) string {
	if i := strings.Index(unit, "ns"); i >= 0 && (i == 0 || unit[i-1] == '-') {
		switch {
		case v >= 1e6:
			v, unit = v/1e6, unit[:i]+"ms"+unit[i+2:]
		case v >= 1e3:
			v, unit = v/1e3, unit[:i]+"µs"+unit[i+2:]
		}
	}
	format := "%.2f %s"
	switch {
	case v >= 100:
		format = "%.0f %s"
	case v >= 10:
		format = "%.1f %s"
	}
	return fmt.Sprintf(format, v, unit)
}

func writeResults(path string, figures []figure, verdicts []verdict) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(struct {
		Time     time.Time `json:"time"`
		Figures  []figure  `json:"figures"`
		Verdicts []verdict `json:"verdicts"`
	}{time.Now().UTC(), figures, verdicts}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
