package soak

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/imperator-federation/imperator/test/e2e"
	"github.com/imperator-federation/imperator/test/util/fleet"
	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

const (
	// HubMatchBound is invariant 5's bound: how soon after the last fault
	// heals the hub's figures must equal the spokes'.
	HubMatchBound = 10 * time.Second
	// LeaseAllowance is added to HubMatchBound in a round in which an agent
	// lost its leader Lease (SIGKILLed, or frozen past its renew deadline,
	// or its API server frozen as long): its successor term starts only
	// once the old Lease has expired (15 s), and reports from then.
	LeaseAllowance = 15 * time.Second
	// HoldsBound is invariant 4's bound: within this long of quiet nothing
	// is held without an owner and every hold is really held.
	HoldsBound = 60 * time.Second
	// CalmReserve is how long each round's calm lasts at least (longer
	// when invariant 4 or 5 takes longer to hold).
	CalmReserve = 25 * time.Second
	// FaultEvery is about how often a storm starts a fault.
	FaultEvery = 6 * time.Second
	// startupSettle bounds the wait for a freshly started fleet to agree.
	startupSettle = 2 * time.Minute
	// Growth bounds (invariant 6): at the end of a run, each of our
	// processes may have at most growthFactor times its start's goroutines
	// plus goroutineSlack, and its RSS at most growthFactor times plus
	// rssSlack.
	growthFactor   = 2
	goroutineSlack = 100
	rssSlack       = 64 << 20
)

// Options configure one run of the soak.
type Options struct {
	Seed     uint64
	Duration time.Duration
	// Keep, when set, keeps only the faults with these indexes (SOAK_FAULTS).
	Keep   map[int]bool
	BinDir string
	// Log receives progress lines.
	Log io.Writer
}

// Result is what one run measured.
type Result struct {
	Seed       uint64
	Schedule   Schedule
	Dir        string
	Violations []Violation
	Work       Work
	Applied    map[FaultKind]int
	Evaluated  map[string]int64
	// Failures are faults that could not be applied or healed.
	Failures []string
	// Recoveries are, per round, how long after the last fault healed the
	// hub matched the spokes.
	Recoveries []time.Duration
	// Resources are the samples at start and end, per process.
	Resources map[string][2]Sample
	// StormStarts are when each round's storm started.
	StormStarts []time.Time
	Wall        time.Duration
}

// Sample is one process's goroutines (from /metrics, -1 when not served)
// and RSS.
type Sample struct {
	Goroutines int
	RSS        int64
}

// Topology of the soak's fleet.
func soakTopology(f *fleet.Fleet, spokes []SpokeWork) Topology {
	t := Topology{Spokes: f.SpokeNames(), Replicas: []string{"hub"}, Clusters: append([]string{"hub"}, f.SpokeNames()...)}
	for _, r := range f.Replicas() {
		t.Replicas = append(t.Replicas, r.Name)
	}
	for _, s := range spokes {
		for _, n := range s.Nodes {
			t.Nodes = append(t.Nodes, s.Spoke+"/"+n)
		}
	}
	return t
}

// soakMachines are the Machines the generator works on: spoke-a's V100
// and RTX-3090 nodes, spoke-b's H100 nodes.
func soakMachines() []SpokeWork {
	a := wrappers.MakeMachine("soak-a", "soak-a").
		Type("medium", "6", "48Gi", 6).GPU("nvidia.com/gpu", 1, "", "").GPUMachine("DGX-1").
		Type("xlarge", "40", "128Gi", 1).GPU("nvidia.com/gpu", 2, "NVIDIA-GeForce-RTX-3090", "").
		Node("utaha", "medium").Node("eriri", "medium").Node("michiru", "xlarge").Tainted().Obj()
	b := wrappers.MakeMachine("soak-b", "soak-b").
		Type("h100", "16", "128Gi", 6).GPU("nvidia.com/gpu", 1, "NVIDIA-H100-80GB-HBM3", "hopper").
		Node("kasumi", "h100").Node("megumi", "h100").Tainted().Obj()
	return []SpokeWork{
		{Spoke: "spoke-a", Machine: a, Types: map[string]int32{"medium": 16, "xlarge": 2}, Nodes: []string{"utaha", "eriri", "michiru"}},
		{Spoke: "spoke-b", Machine: b, Types: map[string]int32{"h100": 16}, Nodes: []string{"kasumi", "megumi"}},
	}
}

// schedulePreview draws the schedule for the soak's fleet without starting
// it (the topology is known in advance).
func schedulePreview(seed uint64, d time.Duration) Schedule {
	spokes := soakMachines()
	t := Topology{Spokes: []string{"spoke-a", "spoke-b"}, Replicas: []string{"hub", "hub-2"}, Clusters: []string{"hub", "spoke-a", "spoke-b"}}
	for _, s := range spokes {
		for _, n := range s.Nodes {
			t.Nodes = append(t.Nodes, s.Spoke+"/"+n)
		}
	}
	return NewSchedule(seed, d, CalmReserve, FaultEvery, t)
}

// Run starts a fleet of its own, runs the schedule of opts.Seed with the
// generator's work, checks the invariants throughout and stops the fleet.
// The fleet's directory (logs) is in the result; the caller removes it.
func Run(ctx context.Context, opts Options) (res *Result, err error) {
	started := time.Now()
	logf := func(format string, args ...any) {
		_, _ = fmt.Fprintf(opts.Log, "%s soak: "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
	}
	res = &Result{Seed: opts.Seed, Resources: map[string][2]Sample{}}
	res.Schedule = schedulePreview(opts.Seed, opts.Duration)
	if opts.Keep != nil {
		res.Schedule = res.Schedule.Keep(func(i int) bool { return opts.Keep[i] })
	}
	dir, err := os.MkdirTemp("", "imperator-soak-")
	if err != nil {
		return res, err
	}
	res.Dir = dir
	logf("seed %d, %s, fleet and logs in %s\n%s", opts.Seed, opts.Duration, dir, res.Schedule)

	f, err := fleet.Start(ctx, fleet.Options{
		Dir: dir, BinDir: opts.BinDir, FaultProxies: true, HubReplicas: 2,
		// Certificates live minutes, so that a run renews them under faults.
		HubArgs:   []string{"--client-cert-validity=4m", "--serving-cert-validity=5m"},
		AgentArgs: []string{"--webhook-ca-validity=8m", "--webhook-cert-validity=5m"},
	})
	if err != nil {
		return res, fmt.Errorf("starting the fleet: %w", err)
	}
	defer func() {
		if stopErr := f.Stop(); stopErr != nil && err == nil {
			err = fmt.Errorf("stopping the fleet: %w", stopErr)
		}
		res.Wall = time.Since(started)
	}()
	env, err := e2e.NewEnvFromFleet(f, opts.BinDir, "")
	if err != nil {
		return res, err
	}
	spokes := soakMachines()
	if topo := soakTopology(f, spokes); !sameTopology(topo, res.Schedule) {
		return res, fmt.Errorf("the fleet's topology %+v is not the one the schedule was drawn for", topo)
	}
	for _, s := range spokes {
		c := env.Spokes[s.Spoke].Client
		if err := EnsureNamespaces(ctx, c); err != nil {
			return res, err
		}
		if err := e2e.ApplyMachine(ctx, c, s.Machine.DeepCopy()); err != nil {
			return res, fmt.Errorf("applying Machine %s on %s: %w", s.Machine.Name, s.Spoke, err)
		}
	}
	watchCtx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	checker := NewChecker()
	for _, s := range spokes {
		if err := checker.WatchSpoke(watchCtx, s.Spoke, env.Spokes[s.Spoke]); err != nil {
			return res, err
		}
	}
	if err := waitFor(ctx, startupSettle, func() error { return HubProblem(ctx, env) }); err != nil {
		return res, fmt.Errorf("the fresh fleet did not agree within %s: %w", startupSettle, err)
	}
	in := NewInjector(f, env)
	startSamples := sample(f)

	var monitor sync.WaitGroup
	monitor.Go(func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-watchCtx.Done():
				return
			case <-t.C:
				in.CheckProcesses(checker)
			}
		}
	})
	gen := NewGenerator(opts.Seed, env, spokes, checker)
	for i, round := range res.Schedule.Rounds {
		if ctx.Err() != nil {
			break
		}
		logf("round %d: storm of %s with %d faults", i, round.Storm, len(round.Faults))
		in.StartRound()
		stormStart := time.Now()
		res.StormStarts = append(res.StormStarts, stormStart)
		stormCtx, endStorm := context.WithDeadline(ctx, stormStart.Add(round.Storm))
		var work sync.WaitGroup
		work.Go(func() { gen.Run(stormCtx) })
		in.Run(ctx, round, stormStart)
		<-stormCtx.Done()
		endStorm()
		work.Wait()
		recovery := calm(ctx, env, in, checker, logf)
		res.Recoveries = append(res.Recoveries, recovery)
		logf("round %d: calm; hub matched %s after the last fault healed; %s", i, recovery.Round(10*time.Millisecond), gen.Work())
	}
	stopWatches()
	monitor.Wait()
	checker.Drain()
	endSamples := sample(f)
	checkGrowth(checker, startSamples, endSamples, res)

	res.Violations = checker.Violations()
	res.Work = gen.Work()
	res.Applied = in.Applied()
	res.Evaluated = checker.Evaluated()
	res.Failures = in.Failures()
	return res, ctx.Err()
}

func sameTopology(t Topology, s Schedule) bool {
	known := map[string]bool{}
	for _, l := range [][]string{t.Spokes, t.Replicas, t.Clusters, t.Nodes} {
		for _, n := range l {
			known[n] = true
		}
	}
	for _, f := range s.Faults() {
		if !known[f.Target] {
			return false
		}
	}
	return true
}

// calm waits for invariants 5 and 4 once every fault of the round has
// healed and the work has stopped, reports what did not hold in time, and
// returns how long after the last heal the hub matched.
func calm(ctx context.Context, env *e2e.Env, in *Injector, c *Checker, logf func(string, ...any)) time.Duration {
	healed, leaseLost := in.Settled()
	quiet := time.Now()
	// Counted from the later of the last heal and the end of the work: the
	// figures of the last writes must arrive too.
	if healed.Before(quiet) {
		healed = quiet
	}
	bound := HubMatchBound
	if leaseLost {
		bound += LeaseAllowance
	}
	var hubErr error
	matched := time.Duration(-1)
	for deadline := healed.Add(bound); ; {
		c.Count(InvariantHubMatch, 1)
		if hubErr = HubProblem(ctx, env); hubErr == nil {
			matched = time.Since(healed)
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			c.Report(Violation{InvariantHubMatch, "hub", time.Now(), fmt.Sprintf("%s after the last fault healed (bound %s): %v", time.Since(healed).Round(100*time.Millisecond), bound, hubErr)})
			break
		}
		sleep(ctx, 250*time.Millisecond)
	}
	var problems []string
	for deadline := quiet.Add(HoldsBound); ; {
		c.Count(InvariantHolds, 1)
		var err error
		problems, err = HoldsProblems(ctx, env)
		if err == nil && len(problems) == 0 {
			break
		}
		if err != nil {
			problems = []string{err.Error()}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			c.Report(Violation{InvariantHolds, "fleet", time.Now(), fmt.Sprintf("%s of quiet: %s", HoldsBound, strings.Join(problems, "; "))})
			break
		}
		sleep(ctx, time.Second)
	}
	if matched < 0 {
		logf("hub did not match: %v", hubErr)
	}
	// The calm lasts its planned length, so that a run lasts its duration.
	sleep(ctx, time.Until(quiet.Add(CalmReserve)))
	return matched
}

func waitFor(ctx context.Context, d time.Duration, check func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		sleep(ctx, 500*time.Millisecond)
	}
}

// sample reads every process's goroutines and RSS.
func sample(f *fleet.Fleet) map[string]Sample {
	out := map[string]Sample{}
	add := func(name string, pid int, metrics string) {
		if pid <= 0 {
			return
		}
		s := Sample{Goroutines: goroutines(metrics)}
		s.RSS, _, _ = harness.ProcessMemory(pid)
		out[name] = s
	}
	add("hub", f.HubPid(), f.HubMetricsURL())
	for _, r := range f.Replicas() {
		add(r.Name, r.Pid(), r.MetricsURL())
	}
	for _, s := range f.SpokeNames() {
		add("agent/"+s, f.AgentPid(s), f.AgentMetricsURL(s))
	}
	return out
}

// goroutines reads go_goroutines from a Prometheus endpoint; -1 without one.
func goroutines(url string) int {
	if url == "" {
		return -1
	}
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return -1
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return int(n)
			}
		}
	}
	return -1
}

// checkGrowth is invariant 6's second half.
func checkGrowth(c *Checker, start, end map[string]Sample, res *Result) {
	names := make([]string, 0, len(start))
	for n := range start {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s, e := start[n], end[n]
		res.Resources[n] = [2]Sample{s, e}
		if _, ok := end[n]; !ok {
			continue
		}
		c.Count(InvariantGrowth, 1)
		if s.Goroutines > 0 && e.Goroutines < 0 {
			// Every fault healed before the end: a process that served
			// /metrics at the start serves it now, or its growth is unknown.
			c.Report(Violation{InvariantGrowth, n, time.Now(), fmt.Sprintf("no goroutine count at the end (its /metrics did not answer), %d at the start", s.Goroutines)})
		}
		if s.Goroutines > 0 && e.Goroutines > growthFactor*s.Goroutines+goroutineSlack {
			c.Report(Violation{InvariantGrowth, n, time.Now(), fmt.Sprintf("goroutines %d at the end, %d at the start", e.Goroutines, s.Goroutines)})
		}
		if s.RSS > 0 && e.RSS > growthFactor*s.RSS+rssSlack {
			c.Report(Violation{InvariantGrowth, n, time.Now(), fmt.Sprintf("RSS %d MiB at the end, %d MiB at the start", e.RSS>>20, s.RSS>>20)})
		}
	}
}
