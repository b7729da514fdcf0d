package soak

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/test/e2e"
	"github.com/imperator-federation/imperator/test/util/faultproxy"
	"github.com/imperator-federation/imperator/test/util/fleet"
	"github.com/imperator-federation/imperator/test/util/harness"
)

// healTimeout bounds how long healing one fault may take (a restart waits
// until the process is ready, maybe behind a frozen API server).
const healTimeout = 3 * time.Minute

// Injector applies faults to a fleet and keeps track of which processes the
// schedule has taken down, for invariant 6.
type Injector struct {
	Fleet *fleet.Fleet
	Env   *e2e.Env

	// replicaMu serialises a replica's kill and restart with the process
	// monitor's look at it.
	replicaMu sync.Mutex
	mu        sync.Mutex
	// down counts, by process name, the faults that have taken the process
	// down and not yet brought it back: two faults of one round may overlap
	// on one process (a hub-kill while the last one's restart still waits
	// for a frozen API server), and the first one's heal must not say that
	// the process should run while the second one holds it down.
	down map[string]int
	// applied counts the faults applied per kind.
	applied map[FaultKind]int
	// lastHealed is when the last fault was healed.
	lastHealed time.Time
	// lease is set when an agent lost its leader Lease in the round
	// (killed, or frozen past its renew deadline): its successor waits up to
	// the Lease's duration before it reports.
	lease bool
	// failures are faults that could not be applied or healed.
	failures []string
}

// NewInjector returns an injector for f.
func NewInjector(f *fleet.Fleet, env *e2e.Env) *Injector {
	return &Injector{Fleet: f, Env: env, down: map[string]int{}, applied: map[FaultKind]int{}}
}

// Run applies every fault of round at its time from start and returns once
// all are healed.
func (in *Injector) Run(ctx context.Context, round Round, start time.Time) {
	var wg sync.WaitGroup
	for _, f := range round.Faults {
		wg.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(start.Add(f.At))):
			}
			if err := in.apply(ctx, f); err != nil {
				in.mu.Lock()
				in.failures = append(in.failures, fmt.Sprintf("%s: %v", f, err))
				in.mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// apply does the fault, waits its length and heals it.
func (in *Injector) apply(ctx context.Context, f Fault) error {
	in.mu.Lock()
	in.applied[f.Kind]++
	in.mu.Unlock()
	hold := func() { sleep(ctx, f.For) }
	healCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), healTimeout)
	defer cancel()
	defer in.healed(f)
	switch f.Kind {
	case AgentKill:
		in.setDown("agent/"+f.Target, true)
		if err := in.Fleet.KillAgent(f.Target); err != nil {
			return err
		}
		in.leaseLost()
		hold()
		err := in.Fleet.StartAgent(healCtx, f.Target)
		in.setDown("agent/"+f.Target, false)
		return err
	case AgentFreeze:
		pid := in.Fleet.AgentPid(f.Target)
		if f.For > 10*time.Second {
			in.leaseLost() // past the renew deadline
		}
		return freeze(ctx, pid, f.For)
	case HubKill:
		return in.killHub(ctx, healCtx, f)
	case APIServerFreeze:
		c := in.Fleet.Hub
		if f.Target != "hub" {
			c = in.Fleet.Spokes[f.Target]
		}
		if c == nil {
			return fmt.Errorf("no cluster %s", f.Target)
		}
		pid, err := apiServerPid(c)
		if err != nil {
			return err
		}
		if f.Target != "hub" && f.For > 10*time.Second {
			in.leaseLost()
		}
		return freeze(ctx, pid, f.For)
	case LinkCut, LinkBlackhole, LinkSlow:
		p := in.Fleet.Proxy(f.Target)
		if p == nil {
			return fmt.Errorf("no fault proxy for %s", f.Target)
		}
		switch f.Kind {
		case LinkCut:
			p.SetMode(faultproxy.Cut)
		case LinkBlackhole:
			p.SetMode(faultproxy.Blackhole)
		default:
			p.SetLatency(f.Latency)
		}
		hold()
		p.SetLatency(0)
		p.SetMode(faultproxy.Pass)
		return nil
	case NodeFlap:
		spoke, node, _ := strings.Cut(f.Target, "/")
		c := in.Env.Spokes[spoke]
		if c == nil {
			return fmt.Errorf("no spoke %s", spoke)
		}
		if err := cordon(healCtx, c.Client, node, true); err != nil {
			return err
		}
		hold()
		return cordon(healCtx, c.Client, node, false)
	}
	return fmt.Errorf("unknown fault kind %q", f.Kind)
}

func (in *Injector) killHub(ctx, healCtx context.Context, f Fault) error {
	in.setDown(f.Target, true)
	defer in.setDown(f.Target, false)
	if f.Target == "hub" {
		if err := in.Fleet.KillHub(); err != nil {
			return err
		}
		sleep(ctx, f.For)
		return in.Fleet.StartHub(healCtx)
	}
	for _, r := range in.Fleet.Replicas() {
		if r.Name != f.Target {
			continue
		}
		in.replicaMu.Lock()
		err := r.Kill()
		in.replicaMu.Unlock()
		if err != nil {
			return err
		}
		sleep(ctx, f.For)
		in.replicaMu.Lock()
		defer in.replicaMu.Unlock()
		return in.Fleet.RestartReplica(healCtx, r)
	}
	return fmt.Errorf("no hub replica %s", f.Target)
}

// setDown records that a fault takes the process name down (true) or
// brought it back (false).
func (in *Injector) setDown(name string, down bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if down {
		in.down[name]++
		return
	}
	if in.down[name]--; in.down[name] <= 0 {
		delete(in.down, name)
	}
}

// isDown reports whether some fault holds the process name down.
func (in *Injector) isDown(name string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.down[name] > 0
}

func (in *Injector) leaseLost() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.lease = true
}

func (in *Injector) healed(Fault) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.lastHealed = time.Now()
}

// StartRound forgets what the last round's faults left to account for.
func (in *Injector) StartRound() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.lease = false
}

// Settled returns when the last fault healed and whether an agent lost its
// leader Lease in the round.
func (in *Injector) Settled() (time.Time, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.lastHealed, in.lease
}

// Applied returns the faults applied per kind.
func (in *Injector) Applied() map[FaultKind]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := map[FaultKind]int{}
	for k, v := range in.applied {
		out[k] = v
	}
	return out
}

// Failures are the faults that could not be applied or healed.
func (in *Injector) Failures() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]string(nil), in.failures...)
}

// CheckProcesses is invariant 6's first half: every process of ours the
// schedule has not taken down is running.
func (in *Injector) CheckProcesses(c *Checker) {
	now := time.Now()
	check := func(name string, running func() bool) { in.checkProcess(c, now, name, running) }
	check("hub", in.Fleet.HubRunning)
	in.replicaMu.Lock()
	for _, r := range in.Fleet.Replicas() {
		check(r.Name, r.Running)
	}
	in.replicaMu.Unlock()
	for _, name := range in.Fleet.SpokeNames() {
		check("agent/"+name, func() bool { return in.Fleet.AgentRunning(name) })
	}
}

// checkProcess counts one look at the process name and reports it when it
// does not run while no fault holds it down. A fault marks its process down
// before it kills it and up once its restart is ready, so a process the
// schedule took down is seen down on one side or the other of the look at
// whether it runs.
func (in *Injector) checkProcess(c *Checker, now time.Time, name string, running func() bool) {
	c.Count(InvariantProcesses, 1)
	downBefore := in.isDown(name)
	if !running() && !downBefore && !in.isDown(name) {
		c.Report(Violation{InvariantProcesses, name, now, "exited, and the schedule did not kill it"})
	}
}

// freeze stops the process with SIGSTOP for d and resumes it, also when
// ctx ends first.
func freeze(ctx context.Context, pid int, d time.Duration) error {
	if pid <= 0 {
		return errors.New("the process to freeze is not running")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("SIGSTOP %d: %w", pid, err)
	}
	sleep(ctx, d)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		return fmt.Errorf("SIGCONT %d: %w", pid, err)
	}
	return nil
}

// apiServerPid finds the cluster's kube-apiserver among this user's
// processes: the one whose working directory is the cluster's (the harness
// starts every process of a cluster there).
func apiServerPid(c *harness.Cluster) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	want, _ := filepath.Abs(c.Dir)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "kube-apiserver" {
			continue
		}
		if cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); err == nil && cwd == want {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no kube-apiserver runs in %s", want)
}

// cordon sets the node's spec.unschedulable, retrying while the spoke's API
// server is away (a freeze may overlap).
func cordon(ctx context.Context, c client.Client, node string, unschedulable bool) error {
	for {
		err := e2e.UpdateNode(ctx, c, node, func(n *corev1.Node) { n.Spec.Unschedulable = unschedulable })
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cordon %s=%t: %w", node, unschedulable, err)
		case <-time.After(time.Second):
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
