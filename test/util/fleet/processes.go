package fleet

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/imperator-federation/imperator/test/util/harness"
)

// HubPid is the process id of the fleet's hub (0 when it never started):
// for a fault that freezes it (SIGSTOP) or a sample of its memory.
func (f *Fleet) HubPid() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hub == nil || !f.hub.proc.Running() {
		return 0
	}
	return f.hub.proc.Pid()
}

// AgentPid is the process id of spoke's agent (0 when it is not running).
func (f *Fleet) AgentPid(spoke string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.agents[spoke]
	if a == nil || !a.proc.Running() {
		return 0
	}
	return a.proc.Pid()
}

// Pid is the replica's process id.
func (r *Replica) Pid() int { return r.proc.Pid() }

// Kill ends the replica with SIGKILL (no graceful stop) and returns once it
// is gone; RestartReplica starts it again.
func (r *Replica) Kill() error { return r.proc.Kill() }

// RestartReplica starts the replica r again after Kill or Stop, on the same
// gRPC address (agents and their fault proxies dial it), and waits until it
// is ready. A running replica is left alone.
func (f *Fleet) RestartReplica(ctx context.Context, r *Replica) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.proc.Running() {
		return nil
	}
	if f.hub == nil {
		return errors.New("fleet: the hub was never started")
	}
	ports, err := harness.FreePorts(2)
	if err != nil {
		return err
	}
	args := []string{
		"--kubeconfig", f.Hub.KubeconfigPath,
		"--namespace", Namespace,
		"--listen-address", r.Address(),
		"--serving-hosts", "127.0.0.1,localhost",
		"--health-probe-bind-address", "127.0.0.1:" + strconv.Itoa(ports[0]),
		"--metrics-bind-address", "127.0.0.1:" + strconv.Itoa(ports[1]),
		"--grace-period", f.opts.GracePeriod.String(),
	}
	args = append(args, f.opts.HubArgs...)
	proc, err := harness.StartProcess("imperator-"+r.Name, filepath.Join(f.opts.BinDir, "hub"), args, filepath.Join(f.opts.Dir, r.Name))
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	if err := waitReady(ctx, proc, ports[0]); err != nil {
		_ = proc.Stop()
		return fmt.Errorf("fleet: replica %s: %w\n%s", r.Name, err, proc.Tail(30))
	}
	r.proc = proc
	return nil
}
