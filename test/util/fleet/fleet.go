// Package fleet runs a whole Imperator fleet on one machine: a hub cluster and
// spoke clusters from the harness, each spoke with simulated GPU nodes, the
// hub and one spoke agent per spoke as local processes with real mTLS. The
// e2e suite and `make up`/`make demo` use it; Description (fleet.json) tells
// people and tools how to reach every part.
package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/imperator-federation/imperator/test/util/faultproxy"
	"github.com/imperator-federation/imperator/test/util/harness"
)

// Options configure a fleet.
type Options struct {
	// Dir receives the clusters' working directories, process logs,
	// certificates and fleet.json. It is kept after Stop.
	Dir string
	// BinDir holds the hub, spoke and imperatorctl binaries (make build).
	// When empty, only the clusters are started.
	BinDir string
	// Spokes default to NumberedSpokes(SpokeCount): DefaultSpokes() when
	// SpokeCount is zero.
	Spokes []SpokeSpec
	// SpokeCount is how many spokes a fleet without Spokes has (at least
	// the two of DefaultSpokes), each a control plane of its own.
	SpokeCount int
	// GracePeriod is how long the hub waits for a silent spoke before it
	// marks it Unknown; default DefaultGracePeriod.
	GracePeriod time.Duration
	// FaultProxies puts a fault proxy (test/util/faultproxy) between each
	// agent and the hub, reached with Fleet.Proxy, for the fault suite.
	FaultProxies bool
	// Hosted names the spokes that have no agent inside: one hosted agent
	// (--clusters-from=kubeconfig-secrets) serves them all from the hub
	// cluster, which is their management cluster (see HostedNamespace).
	Hosted []string
	// HubArgs and AgentArgs are extra flags of the hub and of every agent
	// (short certificate lifetimes in the fault suite, for instance).
	HubArgs, AgentArgs []string
	// HubReplicas is how many hub replicas serve the fleet (at least one):
	// the spokes' agents are spread over them in turn (`make up
	// HUB_REPLICAS=2`, as the chart ships).
	HubReplicas int
}

// DefaultGracePeriod is the hub's grace period for silent spokes in a fleet:
// shorter than the hub's own default, so that a stopped agent shows soon.
const DefaultGracePeriod = 15 * time.Second

// Fleet is a running hub cluster and its spoke clusters.
type Fleet struct {
	opts   Options
	Hub    *harness.Cluster
	Spokes map[string]*harness.Cluster
	// names keeps the spokes in the order they were given.
	names []string

	mu     sync.Mutex
	hub    *hubProcess
	agents map[string]*agentProcess
	// proxies stand between each agent and the hub when
	// Options.FaultProxies is set.
	proxies map[string]*faultproxy.Proxy
	// replicas are further hub processes (StartReplica); dial overrides
	// the hub address an agent dials (DialHub).
	replicas []*Replica
	dial     map[string]string
	// clockOffsets are the --clock-offset of an agent's next start
	// (SetAgentClockOffset).
	clockOffsets map[string]time.Duration
	// injection is the --injection of an agent's next start
	// (SetAgentInjection).
	injection map[string]string
	// hostedWebhookPort is the hosted agent's webhook port, chosen before
	// the hosted spokes start: their API servers name it in the credentials
	// of its webhooks (memberAdmission).
	hostedWebhookPort int
	memberAdmission   map[string]*MemberAdmission
}

// Start starts the hub cluster and every spoke cluster side by side and adds
// each spoke's nodes. On error nothing is left running.
func Start(ctx context.Context, opts Options) (_ *Fleet, err error) {
	if opts.Dir == "" {
		return nil, errors.New("fleet: Options.Dir is required")
	}
	if len(opts.Spokes) == 0 {
		opts.Spokes = NumberedSpokes(opts.SpokeCount)
	}
	if opts.GracePeriod == 0 {
		opts.GracePeriod = DefaultGracePeriod
	}
	if err := checkHosted(opts); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	f := &Fleet{opts: opts, Spokes: map[string]*harness.Cluster{}, agents: map[string]*agentProcess{}, proxies: map[string]*faultproxy.Proxy{}}
	defer func() {
		if err != nil {
			_ = f.Stop()
		}
	}()
	apiServerFlags, err := f.prepareHostedMembers()
	if err != nil {
		return nil, err
	}

	names := append([]string{"hub"}, spokeNames(opts.Spokes)...)
	clusters := make([]*harness.Cluster, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			clusters[i], errs[i] = harness.Start(ctx, harness.Options{Name: name, Dir: filepath.Join(opts.Dir, name), APIServerFlags: apiServerFlags[name]})
		})
	}
	wg.Wait()
	f.Hub = clusters[0]
	for i, spoke := range opts.Spokes {
		if clusters[i+1] != nil {
			f.Spokes[spoke.Name] = clusters[i+1]
			f.names = append(f.names, spoke.Name)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	for _, spoke := range opts.Spokes {
		for _, node := range spoke.Nodes {
			if err := f.Spokes[spoke.Name].AddNode(ctx, node); err != nil {
				return nil, fmt.Errorf("fleet: %w", err)
			}
		}
	}
	if opts.BinDir != "" {
		if err := f.installImperator(ctx); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// SpokeNames returns the spokes in the order they were configured.
func (f *Fleet) SpokeNames() []string { return append([]string(nil), f.names...) }

// Stop stops the agents, the hub and every cluster of the fleet.
func (f *Fleet) Stop() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	errs := []error{f.stopImperator()}
	for _, name := range f.names {
		errs = append(errs, f.Spokes[name].Stop())
	}
	if f.Hub != nil {
		errs = append(errs, f.Hub.Stop())
	}
	return errors.Join(errs...)
}

// Logs returns the end of every log of the fleet, for failure reports.
func (f *Fleet) Logs(lines int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := ""
	if f.Hub != nil {
		out += f.Hub.Logs(lines)
	}
	if f.hub != nil {
		out += fmt.Sprintf("==> %s <==\n%s\n", f.hub.proc.LogPath(), f.hub.proc.Tail(lines))
	}
	out += f.replicaLogs(lines)
	logged := map[*agentProcess]bool{}
	for _, name := range f.names {
		out += f.Spokes[name].Logs(lines)
		// The hosted agent serves several spokes: its log once.
		if a := f.agents[name]; a != nil && !logged[a] {
			logged[a] = true
			out += fmt.Sprintf("==> %s <==\n%s\n", a.proc.LogPath(), a.proc.Tail(lines))
		}
	}
	return out
}

// Description is fleet.json: how to reach each part of a running fleet.
type Description struct {
	Hub    ClusterDescription   `json:"hub"`
	Spokes []ClusterDescription `json:"spokes"`
	// HubAddress is host:port of the hub's gRPC endpoint and HubCAFile the
	// PEM bundle that verifies it; empty when only clusters run.
	HubAddress string `json:"hubAddress,omitempty"`
	HubCAFile  string `json:"hubCAFile,omitempty"`
	// ImperatorctlConfig is an imperatorctl configuration with an admin
	// certificate for the hub.
	ImperatorctlConfig string `json:"imperatorctlConfig,omitempty"`
}

// ClusterDescription locates one cluster of the fleet.
type ClusterDescription struct {
	Name       string `json:"name"`
	Kubeconfig string `json:"kubeconfig"`
	APIServer  string `json:"apiServer"`
	// MetricsURL is the Prometheus endpoint of the cluster's hub or agent.
	MetricsURL string `json:"metricsURL,omitempty"`
	// Mode is how a spoke's agent runs: ModeInCluster or ModeHosted (the
	// hosted agent in the hub cluster serves it); empty for the hub.
	Mode string `json:"mode,omitempty"`
}

// Describe returns the fleet's Description.
func (f *Fleet) Describe() Description {
	d := Description{Hub: describe(f.Hub)}
	d.Hub.MetricsURL = f.HubMetricsURL()
	if addr := f.HubAddress(); addr != "" {
		d.HubAddress, d.HubCAFile, d.ImperatorctlConfig = addr, f.HubCAFile(), f.ImperatorctlConfig()
	}
	for _, name := range f.names {
		d.Spokes = append(d.Spokes, describe(f.Spokes[name]))
		d.Spokes[len(d.Spokes)-1].MetricsURL = f.AgentMetricsURL(name)
		d.Spokes[len(d.Spokes)-1].Mode = f.Mode(name)
	}
	return d
}

// WriteDescription writes the Description to path as indented JSON.
func (f *Fleet) WriteDescription(path string) error {
	data, err := json.MarshalIndent(f.Describe(), "", "  ")
	if err != nil {
		return fmt.Errorf("encoding fleet description: %w", err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing fleet description: %w", err)
	}
	return nil
}

// ReadDescription reads a fleet.json written by WriteDescription.
func ReadDescription(path string) (*Description, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading fleet description: %w", err)
	}
	d := &Description{}
	if err := json.Unmarshal(data, d); err != nil {
		return nil, fmt.Errorf("reading fleet description %s: %w", path, err)
	}
	return d, nil
}

func describe(c *harness.Cluster) ClusterDescription {
	return ClusterDescription{Name: c.Name, Kubeconfig: c.KubeconfigPath, APIServer: c.Config.Host}
}

func spokeNames(spokes []SpokeSpec) []string {
	names := make([]string, len(spokes))
	for i, s := range spokes {
		names[i] = s.Name
	}
	return names
}
