package fleet

import (
	"context"
	"errors"
	"path/filepath"

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
// gRPC address (agents and their fault proxies dial it) and with the flags
// it was started with, and waits until it is ready. A running replica is left alone.
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
	args := f.replicaArgs(r, ports[0], ports[1])
	proc, err := f.startReplicaProcess(ctx, r.Name, args, filepath.Join(f.opts.Dir, r.Name), ports[0])
	if err != nil {
		return err
	}
	r.proc = proc
	r.metricsPort.Store(int64(ports[1]))
	return nil
}
