package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/imperator-federation/imperator/test/util/faultproxy"
	"github.com/imperator-federation/imperator/test/util/harness"
)

// Replica is a further hub process of the fleet: another replica of the
// hub against the same hub cluster, with its own ports.
type Replica struct {
	Name     string
	proc     *harness.Process
	grpcPort int
	// metricsPort changes when the replica restarts; the soak's sampler
	// reads it meanwhile.
	metricsPort atomic.Int64
	// extra are the flags the replica was started with after the fleet's
	// hub flags (a clock offset, for instance); a restart passes them again.
	extra []string
	// ctlConfig is an imperatorctl configuration for this replica.
	ctlConfig string
}

// Address is host:port of the replica's gRPC endpoint.
func (r *Replica) Address() string { return "127.0.0.1:" + strconv.Itoa(r.grpcPort) }

// MetricsURL is the replica's Prometheus endpoint.
func (r *Replica) MetricsURL() string { return metricsURL(int(r.metricsPort.Load())) }

// ImperatorctlConfig is an imperatorctl configuration with the fleet's admin
// certificate for this replica.
func (r *Replica) ImperatorctlConfig() string { return r.ctlConfig }

// Running reports whether the replica's process is running.
func (r *Replica) Running() bool { return r.proc.Running() }

// Stop stops the replica's process.
func (r *Replica) Stop() error { return r.proc.Stop() }

// LogPath is the replica's log file.
func (r *Replica) LogPath() string { return r.proc.LogPath() }

// StartReplica starts another hub replica named name with the fleet's hub
// flags and then args (a clock offset, for instance), and waits until it is
// ready. The fleet stops it with the rest.
func (f *Fleet) StartReplica(ctx context.Context, name string, args ...string) (*Replica, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hub == nil {
		return nil, errors.New("fleet: start the hub before another replica")
	}
	ports, err := harness.FreePorts(3)
	if err != nil {
		return nil, err
	}
	r := &Replica{Name: name, grpcPort: ports[2], extra: slices.Clone(args)}
	r.metricsPort.Store(int64(ports[1]))
	full := f.replicaArgs(r, ports[0], ports[1])
	dir := filepath.Join(f.opts.Dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	if r.proc, err = f.startReplicaProcess(ctx, name, full, dir, ports[0]); err != nil {
		return nil, err
	}
	// The admin configuration, pointed at this replica.
	data, err := os.ReadFile(f.ImperatorctlConfig())
	if err != nil {
		_ = r.proc.Stop()
		return nil, fmt.Errorf("fleet: reading the imperatorctl configuration: %w", err)
	}
	cfg := strings.ReplaceAll(string(data), "hub: "+f.hubAddressLocked(), "hub: "+r.Address())
	r.ctlConfig = filepath.Join(dir, "imperatorctl.yaml")
	if err := os.WriteFile(r.ctlConfig, []byte(cfg), 0o600); err != nil {
		_ = r.proc.Stop()
		return nil, fmt.Errorf("fleet: writing the imperatorctl configuration of %s: %w", name, err)
	}
	f.replicas = append(f.replicas, r)
	return r, nil
}

// DialHub makes the agent of spoke dial address (a replica's, or "" for the
// fleet's hub again) from its next start; StopAgent and StartAgent move it.
// Without a fault proxy in between.
func (f *Fleet) DialHub(spoke, address string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dial == nil {
		f.dial = map[string]string{}
	}
	if address == "" {
		delete(f.dial, spoke)
		return
	}
	f.dial[spoke] = address
}

// stopReplicas stops every further replica. f.mu is held.
func (f *Fleet) stopReplicas() error {
	var errs []error
	for _, r := range f.replicas {
		errs = append(errs, r.proc.Stop())
	}
	return errors.Join(errs...)
}

// replicaLogs is the end of every further replica's log. f.mu is held.
func (f *Fleet) replicaLogs(lines int) string {
	out := ""
	for _, r := range f.replicas {
		out += fmt.Sprintf("==> %s <==\n%s\n", r.proc.LogPath(), r.proc.Tail(lines))
	}
	return out
}

// HubLogPath is the log file of the fleet's hub process.
func (f *Fleet) HubLogPath() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hub == nil {
		return ""
	}
	return f.hub.proc.LogPath()
}

// startHubReplicas starts the further replicas of Options.HubReplicas,
// hub-2 on, and spreads the spokes with an agent inside over every replica
// in turn (the first spoke on the fleet's hub, the second on hub-2, ...),
// as a load balancer in front of the shipped two replicas would. A hosted
// agent keeps dialing the fleet's hub.
func (f *Fleet) startHubReplicas(ctx context.Context) error {
	addresses := []string{""}
	for i := 2; i <= f.opts.HubReplicas; i++ {
		r, err := f.StartReplica(ctx, "hub-"+strconv.Itoa(i))
		if err != nil {
			return err
		}
		addresses = append(addresses, r.Address())
	}
	if len(addresses) == 1 {
		return nil
	}
	next := 0
	for _, name := range f.names {
		if f.IsHosted(name) {
			continue
		}
		address := addresses[next%len(addresses)]
		next++
		if address == "" {
			continue
		}
		if !f.opts.FaultProxies {
			f.DialHub(name, address)
			continue
		}
		// The fault suite cuts the spoke's way to its replica.
		p, err := faultproxy.Start(address)
		if err != nil {
			return fmt.Errorf("fleet: fault proxy of %s: %w", name, err)
		}
		f.mu.Lock()
		f.proxies[name] = p
		f.mu.Unlock()
	}
	return nil
}

// HubReplicaAddresses are the gRPC addresses of every hub replica, the
// fleet's hub first.
func (f *Fleet) HubReplicaAddresses() []string {
	out := []string{f.HubAddress()}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.replicas {
		out = append(out, r.Address())
	}
	return out
}

// Replicas are the further hub replicas, in the order they started.
func (f *Fleet) Replicas() []*Replica {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*Replica(nil), f.replicas...)
}

// replicaArgs are the flags of hub replica r: the fleet's hub cluster and
// namespace, r's gRPC address, health probes on healthPort and metrics on
// metricsPort, the fleet's grace period and hub flags, then the flags r was
// started with.
func (f *Fleet) replicaArgs(r *Replica, healthPort, metricsPort int) []string {
	args := []string{
		"--kubeconfig", f.Hub.KubeconfigPath,
		"--namespace", Namespace,
		"--listen-address", r.Address(),
		"--serving-hosts", "127.0.0.1,localhost",
		"--health-probe-bind-address", "127.0.0.1:" + strconv.Itoa(healthPort),
		"--metrics-bind-address", "127.0.0.1:" + strconv.Itoa(metricsPort),
		"--grace-period", f.opts.GracePeriod.String(),
	}
	return append(append(args, f.opts.HubArgs...), r.extra...)
}

// startReplicaProcess runs the hub binary as replica name in dir with args
// and waits until its health probes on healthPort answer; a replica that
// does not get there is stopped.
func (f *Fleet) startReplicaProcess(ctx context.Context, name string, args []string, dir string, healthPort int) (*harness.Process, error) {
	proc, err := harness.StartProcess("imperator-"+name, filepath.Join(f.opts.BinDir, "hub"), args, dir)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	if err := waitReady(ctx, proc, healthPort); err != nil {
		_ = proc.Stop()
		return nil, fmt.Errorf("fleet: replica %s: %w\n%s", name, err, proc.Tail(30))
	}
	return proc, nil
}
