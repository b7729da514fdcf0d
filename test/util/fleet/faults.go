package fleet

import (
	"errors"
	"fmt"
	"time"

	"github.com/imperator-federation/imperator/test/util/faultproxy"
)

// agentHubAddressLocked is the address the agent of spoke dials: the hub's,
// or that of the spoke's fault proxy (started on first use) when the fleet
// has fault proxies. f.mu is held.
func (f *Fleet) agentHubAddressLocked(spoke string) (string, error) {
	hub := f.hubAddressLocked()
	if a, ok := f.dial[spoke]; ok {
		return a, nil
	}
	if !f.opts.FaultProxies {
		return hub, nil
	}
	if p, ok := f.proxies[spoke]; ok {
		return p.Addr(), nil
	}
	p, err := faultproxy.Start(hub)
	if err != nil {
		return "", fmt.Errorf("fleet: fault proxy of %s: %w", spoke, err)
	}
	f.proxies[spoke] = p
	return p.Addr(), nil
}

// Proxy returns the fault proxy between spoke's agent and the hub; nil
// unless the fleet was started with Options.FaultProxies.
func (f *Fleet) Proxy(spoke string) *faultproxy.Proxy {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.proxies[spoke]
}

// KillHub kills the hub process with SIGKILL (no graceful stop) and returns
// once it is gone; StartHub starts it again.
func (f *Fleet) KillHub() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hub == nil {
		return errors.New("fleet: the hub was never started")
	}
	return f.hub.proc.Kill()
}

// KillAgent kills the agent of spoke with SIGKILL and returns once it is
// gone; StartAgent starts it again.
func (f *Fleet) KillAgent(spoke string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.agents[spoke]
	if a == nil {
		return fmt.Errorf("fleet: the agent of %s was never started", spoke)
	}
	return a.proc.Kill()
}

// HubRunning reports whether the hub process is running (it has not exited).
func (f *Fleet) HubRunning() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hub != nil && f.hub.proc.Running()
}

// closeProxies closes every fault proxy. f.mu is held.
func (f *Fleet) closeProxies() error {
	var errs []error
	for name, p := range f.proxies {
		errs = append(errs, p.Close())
		delete(f.proxies, name)
	}
	return errors.Join(errs...)
}

// AgentRunning reports whether the agent of spoke is running (it has not
// exited).
func (f *Fleet) AgentRunning(spoke string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.agents[spoke]
	return a != nil && a.proc.Running()
}

// SetAgentClockOffset makes the agent of the in-cluster spoke run its clock
// offset off the system clock (the agent's --clock-offset, tests only) from
// its next StartAgent on; zero puts it back on the system clock. The
// spoke's control plane keeps the system clock: only what the agent reads
// as instants (holds, reports, admission stamps) moves.
func (f *Fleet) SetAgentClockOffset(spoke string, offset time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.clockOffsets == nil {
		f.clockOffsets = map[string]time.Duration{}
	}
	if offset == 0 {
		delete(f.clockOffsets, spoke)
		return
	}
	f.clockOffsets[spoke] = offset
}

// clockOffsetArgsLocked are the flags of spoke's agent for its clock
// offset. f.mu is held.
func (f *Fleet) clockOffsetArgsLocked(spoke string) []string {
	if d, ok := f.clockOffsets[spoke]; ok {
		return []string{"--clock-offset=" + d.String()}
	}
	return nil
}
