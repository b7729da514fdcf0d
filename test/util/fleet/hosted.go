package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/imperator-federation/imperator/test/util/harness"
)

// Hosted mode in the fleet (Options.Hosted): the hosted spokes have no agent
// inside; one agent started with --clusters-from=kubeconfig-secrets serves
// them all from a management cluster. The management cluster is the hub
// cluster, as with an OCM hosted klusterlet whose management cluster is the
// hub: the fleet has no cluster to spare, and spoke-a would not do (its own
// agent keeps its Lease and webhook certificate in imperator-system there,
// and a hosted member's reporting would stop with spoke-a's API server).
// The members' kubeconfig Secrets live in a namespace of their own,
// HostedNamespace, apart from the hub's Secrets; the agent's --namespace
// stays imperator-system, where it keeps its reservation workloads in every
// member (and, in the hub cluster, its Lease imperator-spoke-agent and
// Secret imperator-webhook-cert beside the hub's imperator-hub-*).
const (
	// HostedNamespace is the hosted agent's --kubeconfig-namespace in the
	// management (hub) cluster: its members' kubeconfig Secrets.
	HostedNamespace = "imperator-hosted"
	// hostedAgentDir is the hosted agent's working directory (its log)
	// under Options.Dir.
	hostedAgentDir = "hosted-agent"

	// The member Secret's keys, as spoke/internal/hosted reads them (the
	// package is internal to spoke/; docs/hosted.md documents them).
	memberLabel      = "imperator.tenzen-y.io/member-cluster"
	memberKubeconfig = "kubeconfig"
	memberJoinToken  = "join-token"
	// memberInjectorConfig is the pod injector's configuration the agent
	// registers in each member.
	memberInjectorConfig = "imperator-pod-injector"
)

// ModeHosted and ModeInCluster are a spoke's Mode in the fleet's
// Description, as the hub shows it in `imperatorctl clusters -o wide`.
const (
	ModeHosted    = "hosted"
	ModeInCluster = "in-cluster"
)

// IsHosted reports whether spoke is served by the fleet's hosted agent.
func (f *Fleet) IsHosted(spoke string) bool { return slices.Contains(f.opts.Hosted, spoke) }

// Mode is how spoke's agent runs: ModeHosted or ModeInCluster.
func (f *Fleet) Mode(spoke string) string {
	if f.IsHosted(spoke) {
		return ModeHosted
	}
	return ModeInCluster
}

// checkHosted fails when Options.Hosted names a spoke the fleet lacks.
func checkHosted(opts Options) error {
	names := spokeNames(opts.Spokes)
	for _, h := range opts.Hosted {
		if !slices.Contains(names, h) {
			return fmt.Errorf("fleet: Options.Hosted names %q, not a spoke of the fleet %v", h, names)
		}
	}
	return nil
}

// addMember writes spoke's kubeconfig Secret, with its join token, into the
// hosted agent's namespace of the hub cluster: the way a platform team adds
// a member (deploy/overlays/spoke-hosted/member-secret.example.yaml).
func (f *Fleet) addMember(ctx context.Context, spoke, token string) error {
	kubeconfig, err := inlineKubeconfig(agentKubeconfigPath(f.Spokes[spoke]))
	if err != nil {
		return fmt.Errorf("fleet: kubeconfig of member %s: %w", spoke, err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: HostedNamespace, Name: spoke, Labels: map[string]string{memberLabel: "true"}},
		Data:       map[string][]byte{memberKubeconfig: kubeconfig, memberJoinToken: []byte(token)},
	}
	if _, err := f.Hub.Kubernetes().CoreV1().Secrets(HostedNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("fleet: creating the member Secret of %s: %w", spoke, err)
	}
	return nil
}

// inlineKubeconfig is the kubeconfig at path with its certificates inline:
// the harness's names files, which a member kubeconfig in a Secret cannot.
func inlineKubeconfig(path string) ([]byte, error) {
	loaded, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, err
	}
	if err := clientcmdapi.FlattenConfig(loaded); err != nil {
		return nil, err
	}
	return clientcmd.Write(*loaded)
}

// prepareHostedMembers chooses the hosted agent's webhook port and writes
// each hosted spoke's admission configuration, which authenticates its API
// server to the agent's webhooks; it returns their kube-apiserver flags.
func (f *Fleet) prepareHostedMembers() (map[string][]string, error) {
	flags := map[string][]string{}
	if len(f.opts.Hosted) == 0 {
		return flags, nil
	}
	ports, err := harness.FreePorts(1)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	f.hostedWebhookPort = ports[0]
	f.memberAdmission = map[string]*MemberAdmission{}
	for _, spoke := range f.opts.Hosted {
		a, spokeFlags, err := NewMemberAdmission(filepath.Join(f.opts.Dir, spoke), "127.0.0.1:"+strconv.Itoa(f.hostedWebhookPort))
		if err != nil {
			return nil, err
		}
		f.memberAdmission[spoke], flags[spoke] = a, spokeFlags
	}
	return flags, nil
}

// startHostedLocked starts the hosted agent (again, after StopAgent of a
// hosted spoke), waits until it is ready, has written each member's client
// Secret (mounted then for the member's API server) and registered its
// webhooks in every member, and makes it the agent of every hosted spoke.
// f.mu is held.
func (f *Fleet) startHostedLocked(ctx context.Context) error {
	first := f.opts.Hosted[0]
	if a := f.agents[first]; a != nil && a.proc.Running() {
		return nil
	}
	// One process dials for all its members: through the first hosted
	// spoke's fault proxy when the fleet has them.
	hubAddress, err := f.agentHubAddressLocked(first)
	if err != nil {
		return err
	}
	dir := filepath.Join(f.opts.Dir, hostedAgentDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	// The members reach it each at <url>/members/<name>/....
	a, err := f.startAgentProcess(ctx, agentStart{
		name: "imperator-hosted-agent", what: "hosted agent", dir: dir, kubeconfig: f.Hub.KubeconfigPath,
		hubAddress: hubAddress, previous: f.agents[first], webhookPort: f.hostedWebhookPort,
		args: []string{
			"--clusters-from", "kubeconfig-secrets",
			"--kubeconfig-namespace", HostedNamespace,
			// Soon told at the hub when a member cannot reach the webhooks.
			"--member-webhook-probe-interval", "5s",
		},
	})
	if err != nil {
		return err
	}
	for _, spoke := range f.opts.Hosted {
		if err := f.memberAdmission[spoke].Mount(ctx, f.Hub.Kubernetes(), HostedNamespace, spoke, startTimeout); err != nil {
			_ = a.proc.Stop()
			return fmt.Errorf("fleet: hosted agent, member %s: %w\n%s", spoke, err, a.proc.Tail(30))
		}
		if err := waitWebhooksRegistered(ctx, a.proc, f.Spokes[spoke]); err != nil {
			_ = a.proc.Stop()
			return fmt.Errorf("fleet: hosted agent, member %s: %w\n%s", spoke, err, a.proc.Tail(30))
		}
	}
	for _, spoke := range f.opts.Hosted {
		f.agents[spoke] = a
	}
	return nil
}

// waitWebhooksRegistered waits until the hosted agent registered its pod
// injector, with a CA bundle, in member: guests created before would be
// admitted without injection (an in-cluster agent's configuration is
// installed with deploy/spoke before it starts).
func waitWebhooksRegistered(ctx context.Context, p *harness.Process, member *harness.Cluster) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	return wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if !p.Running() {
			return false, fmt.Errorf("%s exited", p.Name())
		}
		cfg, err := member.Kubernetes().AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, memberInjectorConfig, metav1.GetOptions{})
		if err != nil {
			// Not registered yet (NotFound), or the member's API server is
			// busy: ask again until the timeout.
			return false, nil
		}
		return len(cfg.Webhooks) > 0 && len(cfg.Webhooks[0].ClientConfig.CABundle) > 0, nil
	})
}
