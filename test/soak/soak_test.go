package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/imperator-federation/imperator/test/e2e"
	"github.com/imperator-federation/imperator/test/util/repo"
)

// Environment of `make soak`.
const (
	secondsEnv = "SOAK_SECONDS"
	seedEnv    = "SOAK_SEED"
	faultsEnv  = "SOAK_FAULTS"
	shrinkEnv  = "SOAK_SHRINK"
	// shrinkBudgetEnv bounds the shrinking, in minutes (default 60).
	shrinkBudgetEnv = "SOAK_SHRINK_MINUTES"
	binDirEnv       = "E2E_BIN_DIR"
)

// TestSoak is `make soak`: one run of SOAK_SECONDS with the schedule of
// SOAK_SEED (random when unset), printed at the start and on failure.
func TestSoak(t *testing.T) {
	seconds := os.Getenv(secondsEnv)
	if seconds == "" {
		t.Skipf("the soak runs with %s set (make soak)", secondsEnv)
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	opts, err := optionsFromEnv(seconds)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("SOAK_SEED=%d SOAK_SECONDS=%d (replay: make soak SOAK_SEED=%d SOAK_SECONDS=%d)\n", opts.Seed, int(opts.Duration.Seconds()), opts.Seed, int(opts.Duration.Seconds()))
	ctx := context.Background()
	res, err := Run(ctx, opts)
	report(res)
	if err != nil {
		t.Fatalf("seed %d: %v; the fleet's logs are kept in %s", opts.Seed, err, res.Dir)
	}
	// An invariant never checked proves nothing: the soak's watches may no
	// longer recognise what they look at (a guest's record renamed, say).
	// Holds are the exception: a run may place none that fit.
	for _, name := range []string{InvariantCap, InvariantNoEvict, InvariantFIFO, InvariantHubMatch, InvariantProcesses, InvariantGrowth} {
		if res.Evaluated[name] == 0 {
			t.Errorf("seed %d: invariant %s was never evaluated in the run: it checked nothing; the fleet's logs are kept in %s", opts.Seed, name, res.Dir)
		}
	}
	if len(res.Violations) == 0 && len(res.Failures) == 0 && !t.Failed() {
		_ = os.RemoveAll(res.Dir)
		return
	}
	for _, v := range res.Violations {
		t.Errorf("seed %d: %s", opts.Seed, v)
	}
	for _, f := range res.Failures {
		t.Errorf("seed %d: a fault could not be applied or healed: %s", opts.Seed, f)
	}
	suspects := faultsBefore(res)
	t.Logf("seed %d failed; the fleet's logs are kept in %s", opts.Seed, res.Dir)
	t.Logf("the faults applied up to the first violation (replay them alone: SOAK_SEED=%d %s=%s):\n%s",
		opts.Seed, faultsEnv, Indexes(suspects), faultLines(suspects))
	if len(res.Violations) == 0 {
		return // nothing to shrink towards
	}
	if os.Getenv(shrinkEnv) != "1" {
		t.Logf("set %s=1 to shrink the schedule by replaying it with faults dropped", shrinkEnv)
		return
	}
	minimal := shrink(ctx, t, opts, suspects, res.Violations[0].Invariant)
	t.Logf("minimal schedule for seed %d that still breaks %s: %s=%q\n%s", opts.Seed, res.Violations[0].Invariant, faultsEnv, Indexes(minimal), faultLines(minimal))
}

func optionsFromEnv(seconds string) (Options, error) {
	n, err := strconv.Atoi(seconds)
	if err != nil || n < 60 {
		return Options{}, fmt.Errorf("%s=%q: must be a whole number of seconds, at least 60", secondsEnv, seconds)
	}
	opts := Options{Duration: time.Duration(n) * time.Second, Log: os.Stdout, Seed: rand.Uint64() % 1_000_000}
	if s := os.Getenv(seedEnv); s != "" {
		if opts.Seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			return Options{}, fmt.Errorf("%s=%q: must be a non-negative whole number", seedEnv, s)
		}
	}
	if s := os.Getenv(faultsEnv); s != "" {
		if opts.Keep, err = ParseIndexes(s); err != nil {
			return Options{}, err
		}
	}
	root, err := repo.Root()
	if err != nil {
		return Options{}, err
	}
	opts.BinDir = os.Getenv(binDirEnv)
	if opts.BinDir == "" {
		opts.BinDir = filepath.Join(root, "bin")
	}
	if err := e2e.CheckBinaries(opts.BinDir); err != nil {
		return Options{}, err
	}
	return opts, nil
}

// faultsBefore are the faults of the run that started before its first
// violation: the schedule a replay needs at most.
func faultsBefore(res *Result) []Fault {
	faults := res.Schedule.Faults()
	if len(res.Violations) == 0 {
		return faults
	}
	first := slices.MinFunc(res.Violations, func(a, b Violation) int { return a.At.Compare(b.At) })
	var out []Fault
	for _, f := range faults {
		if f.Round < len(res.StormStarts) && !res.StormStarts[f.Round].Add(f.At).After(first.At) {
			out = append(out, f)
		}
	}
	return out
}

// shrink replays the run with faults dropped, half at a time and then one
// at a time, keeping a smaller set whenever the replay still breaks the
// invariant, until the budget (SOAK_SHRINK_MINUTES) runs out.
func shrink(ctx context.Context, t *testing.T, opts Options, faults []Fault, invariant string) []Fault {
	budget := 60 * time.Minute
	if s := os.Getenv(shrinkBudgetEnv); s != "" {
		if m, err := strconv.Atoi(s); err == nil && m > 0 {
			budget = time.Duration(m) * time.Minute
		}
	}
	deadline := time.Now().Add(budget)
	fails := func(candidate []Fault) bool {
		o := opts
		o.Keep = map[int]bool{}
		for _, f := range candidate {
			o.Keep[f.Index] = true
		}
		t.Logf("shrink: replaying seed %d with %s=%q", opts.Seed, faultsEnv, Indexes(candidate))
		res, err := Run(ctx, o)
		if res != nil {
			defer func() { _ = os.RemoveAll(res.Dir) }()
		}
		if err != nil {
			return false
		}
		return slices.ContainsFunc(res.Violations, func(v Violation) bool { return v.Invariant == invariant })
	}
	current := faults
	for chunk := len(current) / 2; chunk >= 1 && time.Now().Before(deadline); {
		dropped := false
		for start := 0; start < len(current) && time.Now().Before(deadline); start += chunk {
			candidate := slices.Concat(current[:start], current[min(start+chunk, len(current)):])
			if fails(candidate) {
				current, dropped = candidate, true
				break
			}
		}
		if !dropped {
			chunk /= 2
		}
	}
	return current
}

func faultLines(faults []Fault) string {
	var b strings.Builder
	for _, f := range faults {
		fmt.Fprintf(&b, "  %s\n", f)
	}
	if len(faults) == 0 {
		b.WriteString("  (no fault: the work alone)\n")
	}
	return b.String()
}

// report prints the figures of a run as the row of docs/soak.md's table.
func report(res *Result) {
	if res == nil {
		return
	}
	applied, total := []string{}, 0
	for _, k := range kindWeights {
		if n := res.Applied[k.kind]; n > 0 {
			applied = append(applied, fmt.Sprintf("%s %d", k.kind, n))
			total += n
		}
	}
	evaluated, checks := []string{}, int64(0)
	for _, name := range []string{InvariantCap, InvariantNoEvict, InvariantFIFO, InvariantHolds, InvariantHubMatch, InvariantProcesses, InvariantGrowth} {
		evaluated = append(evaluated, fmt.Sprintf("%s %d", name, res.Evaluated[name]))
		checks += res.Evaluated[name]
	}
	recoveries := []string{}
	for _, r := range res.Recoveries {
		recoveries = append(recoveries, r.Round(100*time.Millisecond).String())
	}
	resources := []string{}
	for name, s := range res.Resources {
		resources = append(resources, fmt.Sprintf("%s goroutines %d→%d RSS %dMiB→%dMiB", name, s[0].Goroutines, s[1].Goroutines, s[0].RSS>>20, s[1].RSS>>20))
	}
	slices.Sort(resources)
	fmt.Printf("\nSoak figures (seed %d, wall %s):\n  faults applied: %d (%s)\n  work: %s\n  invariant checks: %d (%s)\n  violations: %d\n  hub matched after the last heal, per round: %s\n  resources start→end: %s\n",
		res.Seed, res.Wall.Round(time.Second), total, strings.Join(applied, ", "), res.Work, checks, strings.Join(evaluated, ", "),
		len(res.Violations), strings.Join(recoveries, ", "), strings.Join(resources, "; "))
	for _, e := range res.Work.FirstErrors {
		fmt.Printf("  work error or refusal: %s\n", e)
	}
}
