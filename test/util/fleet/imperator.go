package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/repo"
)

// Namespace is where the hub and the spoke agents keep their objects (CA,
// tokens, webhook certificate, reservation workloads) in their clusters.
const Namespace = "imperator-system"

// startTimeout bounds the start of the hub or an agent until it is ready.
const startTimeout = 2 * time.Minute

// hubProcess is the running hub and where it listens.
type hubProcess struct {
	proc        *harness.Process
	grpcPort    int
	healthPort  int
	metricsPort int
}

// agentProcess is a running spoke agent and where it listens.
type agentProcess struct {
	proc        *harness.Process
	webhookPort int
	healthPort  int
	metricsPort int
}

// installImperator installs the CRDs of each side, the agents' namespace,
// the spokes' reservation PriorityClass and admission policies, then starts
// the hub and one agent per spoke, each joining with its own one-time token.
func (f *Fleet) installImperator(ctx context.Context) error {
	root, err := repo.Root()
	if err != nil {
		return err
	}
	hubCRDs := []string{filepath.Join(root, "deploy", "hub", "crd"), filepath.Join(root, "deploy", "hub", "crd", "ocm")}
	if err := f.Hub.InstallCRDs(ctx, hubCRDs...); err != nil {
		return err
	}
	if err := ensureNamespace(ctx, f.Hub); err != nil {
		return err
	}
	for _, name := range f.names {
		spoke := f.Spokes[name]
		if err := spoke.InstallCRDs(ctx, filepath.Join(root, "deploy", "spoke", "crd")); err != nil {
			return err
		}
		if err := ensureNamespace(ctx, spoke); err != nil {
			return err
		}
		// deploy/spoke ships it; the agent only reads it.
		if err := InstallReservationPriorityClass(ctx, spoke); err != nil {
			return err
		}
		// The tenant boundary, as deploy/spoke installs it; the agents act
		// as the identity the policies know (AgentKubeconfig).
		if err := InstallAdmissionPolicies(ctx, spoke); err != nil {
			return err
		}
		if _, err := AgentKubeconfig(spoke); err != nil {
			return err
		}
	}
	if err := f.StartHub(ctx); err != nil {
		return err
	}
	caPath := f.hubCAPath()
	ca, err := f.hubCommand(ctx, "ca")
	if err != nil {
		return err
	}
	if err := os.WriteFile(caPath, []byte(ca), 0o644); err != nil {
		return fmt.Errorf("fleet: writing the hub CA: %w", err)
	}
	ctlConfig, err := f.hubCommand(ctx, "client-cert", "--name", "fleet-admin", "--role", "admin", "--hub-address", f.HubAddress())
	if err != nil {
		return err
	}
	if err := os.WriteFile(f.ImperatorctlConfig(), []byte(ctlConfig), 0o600); err != nil {
		return fmt.Errorf("fleet: writing the imperatorctl configuration: %w", err)
	}
	if err := f.startHubReplicas(ctx); err != nil {
		return err
	}
	if len(f.opts.Hosted) > 0 {
		if err := ensureNamespaceNamed(ctx, f.Hub, HostedNamespace); err != nil {
			return err
		}
	}
	for _, name := range f.names {
		token, err := f.hubCommand(ctx, "token", "create", "--cluster", name, "--ttl", "1h", "--description", "local fleet")
		if err != nil {
			return err
		}
		token = strings.TrimSpace(token)
		if f.IsHosted(name) {
			if err := f.addMember(ctx, name, token); err != nil {
				return err
			}
			continue
		}
		if err := os.WriteFile(f.tokenPath(name), []byte(token+"\n"), 0o600); err != nil {
			return fmt.Errorf("fleet: writing the join token of %s: %w", name, err)
		}
		if err := f.StartAgent(ctx, name); err != nil {
			return err
		}
	}
	if len(f.opts.Hosted) > 0 {
		// One agent for every hosted spoke, started once their Secrets are in.
		return f.StartAgent(ctx, f.opts.Hosted[0])
	}
	return nil
}

func ensureNamespace(ctx context.Context, c *harness.Cluster) error {
	return ensureNamespaceNamed(ctx, c, Namespace)
}

func ensureNamespaceNamed(ctx context.Context, c *harness.Cluster, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.Kubernetes().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("fleet: creating namespace %s in %s: %w", name, c.Name, err)
	}
	return nil
}

func (f *Fleet) hubCAPath() string             { return filepath.Join(f.opts.Dir, "hub-ca.crt") }
func (f *Fleet) tokenPath(spoke string) string { return filepath.Join(f.opts.Dir, spoke, "join-token") }

// HubAddress is host:port of the hub's gRPC endpoint.
func (f *Fleet) HubAddress() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hubAddressLocked()
}

func (f *Fleet) hubAddressLocked() string {
	if f.hub == nil {
		return ""
	}
	return "127.0.0.1:" + strconv.Itoa(f.hub.grpcPort)
}

// ImperatorctlConfig is an imperatorctl configuration file with an admin
// certificate for the fleet's hub.
func (f *Fleet) ImperatorctlConfig() string { return filepath.Join(f.opts.Dir, "imperatorctl.yaml") }

// HubCAFile is the PEM bundle of the hub's CA.
func (f *Fleet) HubCAFile() string { return f.hubCAPath() }

// GracePeriod is how long the fleet's hub waits for a silent spoke before it
// marks it Unknown.
func (f *Fleet) GracePeriod() time.Duration { return f.opts.GracePeriod }

// hubCommand runs an admin subcommand of the hub binary against the hub
// cluster and returns its standard output.
func (f *Fleet) hubCommand(ctx context.Context, args ...string) (string, error) {
	full := append(append([]string{}, args...), "--kubeconfig", f.Hub.KubeconfigPath, "--namespace", Namespace)
	cmd := exec.CommandContext(ctx, filepath.Join(f.opts.BinDir, "hub"), full...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("fleet: hub %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// StartHub starts the hub process (again, after StopHub) on the same gRPC
// port, and waits until it is ready.
func (f *Fleet) StartHub(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hub != nil && f.hub.proc.Running() {
		return nil
	}
	h := &hubProcess{}
	if f.hub != nil {
		h.grpcPort = f.hub.grpcPort
	}
	ports, err := harness.FreePorts(3)
	if err != nil {
		return err
	}
	h.healthPort = ports[0]
	h.metricsPort = ports[1]
	if h.grpcPort == 0 {
		// A restarted hub keeps its address: the agents dial it.
		h.grpcPort = ports[2]
	}
	args := []string{
		"--kubeconfig", f.Hub.KubeconfigPath,
		"--namespace", Namespace,
		"--listen-address", "127.0.0.1:" + strconv.Itoa(h.grpcPort),
		"--serving-hosts", "127.0.0.1,localhost",
		"--health-probe-bind-address", "127.0.0.1:" + strconv.Itoa(h.healthPort),
		"--metrics-bind-address", "127.0.0.1:" + strconv.Itoa(h.metricsPort),
		"--grace-period", f.opts.GracePeriod.String(),
	}
	args = append(args, f.opts.HubArgs...)
	h.proc, err = harness.StartProcess("imperator-hub", filepath.Join(f.opts.BinDir, "hub"), args, f.Hub.Dir)
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	if err := waitReady(ctx, h.proc, h.healthPort); err != nil {
		_ = h.proc.Stop()
		return fmt.Errorf("fleet: hub: %w\n%s", err, h.proc.Tail(30))
	}
	f.hub = h
	return nil
}

// HubMetricsURL is the hub's Prometheus endpoint; empty before it started.
func (f *Fleet) HubMetricsURL() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hub == nil {
		return ""
	}
	return metricsURL(f.hub.metricsPort)
}

// AgentMetricsURL is the Prometheus endpoint of spoke's agent; empty before
// it started.
func (f *Fleet) AgentMetricsURL(spoke string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a := f.agents[spoke]; a != nil {
		return metricsURL(a.metricsPort)
	}
	return ""
}

func metricsURL(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) + "/metrics" }

// StopHub stops the hub process; the clusters keep running.
func (f *Fleet) StopHub() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hub == nil {
		return nil
	}
	return f.hub.proc.Stop()
}

// StartAgent starts the spoke agent of spoke (again, after StopAgent) and
// waits until it is ready. Its webhooks are registered at a URL on
// 127.0.0.1, so the spoke's API server reaches the agent directly. For a
// hosted spoke it starts the hosted agent, which serves every hosted spoke.
func (f *Fleet) StartAgent(ctx context.Context, spoke string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	cluster, ok := f.Spokes[spoke]
	if !ok {
		return fmt.Errorf("fleet: no spoke %q", spoke)
	}
	if f.IsHosted(spoke) {
		return f.startHostedLocked(ctx)
	}
	if a := f.agents[spoke]; a != nil && a.proc.Running() {
		return nil
	}
	hubAddress, err := f.agentHubAddressLocked(spoke)
	if err != nil {
		return err
	}
	a, err := f.startAgentProcess(ctx, agentStart{
		name: "imperator-agent", what: "agent of " + spoke, dir: cluster.Dir, kubeconfig: agentKubeconfigPath(cluster),
		hubAddress: hubAddress, previous: f.agents[spoke],
		args: append(append([]string{"--cluster-name", spoke, "--join-token-file", f.tokenPath(spoke)}, f.clockOffsetArgsLocked(spoke)...),
			f.injectionArgsLocked(spoke)...),
	})
	if err != nil {
		return err
	}
	f.agents[spoke] = a
	return nil
}

// agentStart is what differs between the agents the fleet starts: one per
// in-cluster spoke, or the hosted agent serving every hosted spoke.
type agentStart struct {
	// name is the process's name in logs; what names it in errors.
	name, what string
	// dir is the working directory (the process's log goes there).
	dir string
	// kubeconfig reaches the cluster the agent runs in (KUBECONFIG).
	kubeconfig string
	// hubAddress is where the agent dials the hub (maybe a fault proxy).
	hubAddress string
	// previous is the agent this one replaces, if any: the webhook
	// configurations point at its webhook port, which is kept.
	previous *agentProcess
	// webhookPort, when set, is the webhook port (chosen before the agent
	// starts); else a free one.
	webhookPort int
	// args are the flags of this kind of agent, before Options.AgentArgs.
	args []string
}

// startAgentProcess starts the spoke binary as an agent on free loopback
// ports (webhooks registered at a URL on 127.0.0.1, health, metrics), with
// the flags every agent takes, then s.args and Options.AgentArgs, and waits
// until it is ready. On error nothing of it keeps running.
func (f *Fleet) startAgentProcess(ctx context.Context, s agentStart) (*agentProcess, error) {
	ports, err := harness.FreePorts(3)
	if err != nil {
		return nil, err
	}
	a := &agentProcess{webhookPort: ports[0], healthPort: ports[1], metricsPort: ports[2]}
	if s.previous != nil {
		a.webhookPort = s.previous.webhookPort
	}
	if s.webhookPort != 0 {
		a.webhookPort = s.webhookPort
	}
	args := []string{
		"--namespace", Namespace,
		"--webhook-bind-address", "127.0.0.1",
		"--webhook-port", strconv.Itoa(a.webhookPort),
		// The spokes' API servers run on this machine: they reach the
		// agent on loopback.
		"--webhook-url", "https://127.0.0.1:" + strconv.Itoa(a.webhookPort),
		"--health-probe-bind-address", "127.0.0.1:" + strconv.Itoa(a.healthPort),
		"--metrics-bind-address", "127.0.0.1:" + strconv.Itoa(a.metricsPort),
		"--hub-address", s.hubAddress,
		"--hub-ca-file", f.hubCAPath(),
	}
	args = append(append(args, s.args...), f.opts.AgentArgs...)
	a.proc, err = harness.StartProcess(s.name, filepath.Join(f.opts.BinDir, "spoke"), args, s.dir, "KUBECONFIG="+s.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	if err := waitReady(ctx, a.proc, a.healthPort); err != nil {
		_ = a.proc.Stop()
		return nil, fmt.Errorf("fleet: %s: %w\n%s", s.what, err, a.proc.Tail(30))
	}
	return a, nil
}

// StopAgent stops the spoke agent of spoke; its cluster keeps running. For
// a hosted spoke that is the hosted agent: every hosted spoke loses it.
func (f *Fleet) StopAgent(spoke string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.agents[spoke]
	if a == nil {
		return nil
	}
	return a.proc.Stop()
}

// stopImperator stops every agent, then the hub.
func (f *Fleet) stopImperator() error {
	var errs []error
	for _, name := range f.names {
		if a := f.agents[name]; a != nil {
			errs = append(errs, a.proc.Stop())
		}
	}
	errs = append(errs, f.stopReplicas())
	if f.hub != nil {
		errs = append(errs, f.hub.proc.Stop())
	}
	errs = append(errs, f.closeProxies())
	return errors.Join(errs...)
}

// waitReady polls the process's /readyz until it answers 200.
func waitReady(ctx context.Context, p *harness.Process, healthPort int) error {
	return p.WaitReady(ctx, "http://127.0.0.1:"+strconv.Itoa(healthPort)+"/readyz", startTimeout)
}
