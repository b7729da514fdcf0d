package app

import (
	"crypto/tls"
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/imperator-federation/imperator/internal/schemes"
	"github.com/imperator-federation/imperator/spoke/internal/config"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/certs"
)

func spokeScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme, err := schemes.Spoke()
	if err != nil {
		t.Fatal(err)
	}
	return scheme
}

// completed returns the default configuration changed by edit, completed as
// the binary completes it after parsing the flags.
func completed(t *testing.T, edit func(*config.Config)) config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Namespace = "imperator-system"
	edit(&cfg)
	cfg.Complete()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the test's configuration is invalid: %v", err)
	}
	return cfg
}

// certRotatorOf returns the agent's own certificate manager for cfg, nil in
// cert-manager mode.
func certRotatorOf(t *testing.T, cfg config.Config) *certs.Rotator {
	t.Helper()
	certRotator, err := newCertRotator(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return certRotator
}

func hostedMode(c *config.Config) {
	c.Hosted.ClustersFrom = config.ClustersFromKubeconfigSecrets
	c.Hosted.KubeconfigNamespace = "members"
}

func withHub(c *config.Config) {
	c.Hub.Address = "hub.example.com:443"
	c.Hub.CAFile = "/etc/imperator/hub-ca.crt"
	if !c.IsHosted() {
		c.Hub.ClusterName = "gpu-east"
	}
}

// TestWebhookCertificateComesFromTheAgentOrFromCertManager: with
// --webhook-cert-manager-certificate the webhook server must read the mounted
// Secret (and the agent issue nothing), else it serves the agent's own
// certificate; either way it refuses TLS below 1.2. The hosted agent asks its
// callers for the client certificates of the members' API servers.
func TestWebhookCertificateComesFromTheAgentOrFromCertManager(t *testing.T) {
	tests := map[string]struct {
		edit            func(*config.Config)
		wantCertManager bool
		wantCertDir     string
	}{
		"agent issues the certificate":        {edit: func(*config.Config) {}, wantCertManager: true},
		"hosted agent issues the certificate": {edit: hostedMode, wantCertManager: true},
		"cert-manager issues the certificate": {
			edit: func(c *config.Config) {
				c.Webhook.CertManagerCertificate = "imperator-webhook"
				c.Webhook.CertDir = "/certs"
			},
			wantCertDir: "/certs",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := completed(t, tc.edit)
			certRotator := certRotatorOf(t, cfg)
			if got := certRotator != nil; got != tc.wantCertManager {
				t.Fatalf("the agent issues its certificate: %v, want %v", got, tc.wantCertManager)
			}
			memberWebhooks, err := newMemberWebhooks(cfg, spokeScheme(t), certRotator, nil)
			if err != nil {
				t.Fatal(err)
			}
			opts := webhookServerOptions(cfg, certRotator, memberWebhooks)
			if opts.CertDir != tc.wantCertDir {
				t.Errorf("CertDir = %q, want %q", opts.CertDir, tc.wantCertDir)
			}
			if opts.Port != cfg.Webhook.Port {
				t.Errorf("Port = %d, want --webhook-port %d", opts.Port, cfg.Webhook.Port)
			}
			var tlsConfig tls.Config
			for _, o := range opts.TLSOpts {
				o(&tlsConfig)
			}
			if tlsConfig.MinVersion != tls.VersionTLS12 {
				t.Errorf("MinVersion = %x, want TLS 1.2", tlsConfig.MinVersion)
			}
			if got := tlsConfig.GetCertificate != nil; got != tc.wantCertManager {
				t.Errorf("the server takes its certificate from the agent: %v, want %v", got, tc.wantCertManager)
			}
			wantClientAuth := tls.NoClientCert
			if cfg.IsHosted() {
				wantClientAuth = tls.VerifyClientCertIfGiven
			}
			if tlsConfig.ClientAuth != wantClientAuth || (cfg.IsHosted() && (tlsConfig.ClientCAs == nil || tlsConfig.GetConfigForClient == nil)) {
				t.Errorf("client certificates: %v (CAs %v), want %v", tlsConfig.ClientAuth, tlsConfig.ClientCAs, wantClientAuth)
			}
		})
	}
}

// TestCachesAndWorkersFollowTheMode: in-cluster the agent caches only
// grouped pods and its namespace's workloads, not every pod of the cluster;
// in hosted mode the management cluster's cache holds only the members'
// kubeconfig Secrets and each controller runs several reconciles at once, so
// that one slow member does not hold up the others.
func TestCachesAndWorkersFollowTheMode(t *testing.T) {
	scheme := spokeScheme(t)
	tests := map[string]struct {
		edit        func(*config.Config)
		wantCached  []client.Object
		wantWorkers int
	}{
		"in-cluster": {edit: func(*config.Config) {}, wantCached: []client.Object{&corev1.Pod{}, &appsv1.StatefulSet{}, &corev1.Service{}}, wantWorkers: ControllerWorkers},
		"hosted":     {edit: hostedMode, wantCached: []client.Object{&corev1.Secret{}}, wantWorkers: ControllerWorkers},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := completed(t, tc.edit)
			local := localManagerOptions(cfg, scheme, nil, nil)
			term := termManagerOptions(cfg, scheme)
			for what, opts := range map[string]cache.Options{"main manager": local.Cache, "leader term": term.Cache} {
				if len(opts.ByObject) != len(tc.wantCached) {
					t.Errorf("%s caches %d restricted kinds, want %d", what, len(opts.ByObject), len(tc.wantCached))
				}
				for _, want := range tc.wantCached {
					if _, ok := restriction(opts, want); !ok {
						t.Errorf("%s: no restriction for %T", what, want)
					}
				}
			}
			if cfg.IsHosted() {
				if by, _ := restriction(local.Cache, &corev1.Secret{}); len(by.Namespaces) != 1 || !hasKey(by.Namespaces, "members") {
					t.Errorf("the hosted agent caches Secrets of %v, want only --kubeconfig-namespace members", by.Namespaces)
				}
			}
			if local.Controller.MaxConcurrentReconciles != tc.wantWorkers || term.Controller.MaxConcurrentReconciles != tc.wantWorkers {
				t.Errorf("workers: main %d, term %d, want %d", local.Controller.MaxConcurrentReconciles, term.Controller.MaxConcurrentReconciles, tc.wantWorkers)
			}
			if local.WebhookServer == nil || local.Metrics.BindAddress != cfg.MetricsAddr || local.HealthProbeBindAddress != cfg.HealthAddr {
				t.Errorf("the main manager serves no webhooks, or metrics/probes elsewhere than the flags say: %+v", local)
			}
			if term.WebhookServer != nil || term.HealthProbeBindAddress != "" {
				t.Errorf("a leader term's manager serves webhooks or probes: the main manager does")
			}
		})
	}
}

// restriction returns how opts cut the cache of obj's kind.
func restriction(opts cache.Options, obj client.Object) (cache.ByObject, bool) {
	for o, by := range opts.ByObject {
		if reflect.TypeOf(o) == reflect.TypeOf(obj) {
			return by, true
		}
	}
	return cache.ByObject{}, false
}

// TestHostedModeServesTheMembersInsteadOfTheLocalCluster: in hosted mode the
// webhooks, the controllers and the hub reporters serve the members; the
// in-cluster agent serves its own cluster and reports itself when given a hub.
func TestHostedModeServesTheMembersInsteadOfTheLocalCluster(t *testing.T) {
	scheme := spokeScheme(t)
	tests := map[string]struct {
		edit               func(*config.Config)
		wantMemberWebhooks bool
		wantMembers        bool
		wantReporter       bool
	}{
		"in-cluster, stand-alone": {edit: func(*config.Config) {}},
		"in-cluster with a hub":   {edit: withHub, wantReporter: true},
		"hosted, stand-alone":     {edit: hostedMode, wantMemberWebhooks: true, wantMembers: true},
		"hosted with a hub": {
			edit:               func(c *config.Config) { hostedMode(c); withHub(c) },
			wantMemberWebhooks: true, wantMembers: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := completed(t, tc.edit)
			certRotator := certRotatorOf(t, cfg)
			memberWebhooks, err := newMemberWebhooks(cfg, scheme, certRotator, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := memberWebhooks != nil; got != tc.wantMemberWebhooks {
				t.Fatalf("serves the members' webhooks: %v, want %v", got, tc.wantMemberWebhooks)
			}
			if memberWebhooks != nil && (memberWebhooks.MutatingConfiguration != cfg.Webhook.MutatingConfiguration ||
				memberWebhooks.ValidatingConfiguration != cfg.Webhook.ValidatingConfiguration ||
				memberWebhooks.ProbeInterval != cfg.Hosted.WebhookProbeInterval || memberWebhooks.AgentNamespace != cfg.Namespace) {
				t.Errorf("the members' webhooks do not follow the flags: %+v", memberWebhooks)
			}
			provider, err := memberClusters(cfg, scheme, nil, memberWebhooks, "v1.2.3")
			if err != nil {
				t.Fatal(err)
			}
			if got := provider != nil; got != tc.wantMembers {
				t.Errorf("the controllers serve member clusters: %v, want %v", got, tc.wantMembers)
			}
			opts, reports := reporterOptions(cfg, nil, nil, nil, "v1.2.3")
			if reports != tc.wantReporter {
				t.Fatalf("the agent reports itself to the hub: %v, want %v", reports, tc.wantReporter)
			}
			if reports && (opts.Hub.Address != cfg.Hub.Address || opts.AgentVersion != "v1.2.3" || opts.Namespace != cfg.Namespace || opts.Leader != nil) {
				t.Errorf("reporter options do not follow the flags: %+v", opts)
			}
		})
	}
}

// TestTheLeaderReportsAndRunsTheControllers: with --leader-elect the
// controllers run in the terms of a campaign for the --leader-election-id
// Lease in the agent's namespace, under an identity no other run shares,
// and only the leader reports to the hub; without it there is no campaign.
func TestTheLeaderReportsAndRunsTheControllers(t *testing.T) {
	scheme := spokeScheme(t)
	setup := func(manager.Manager) error { return nil }
	cfg := completed(t, func(c *config.Config) { withHub(c); c.LeaderElection = false })
	if campaign, err := leaderCampaign(cfg, &rest.Config{}, scheme, setup); err != nil || campaign != nil {
		t.Fatalf("without --leader-elect: campaign %v, error %v; want none", campaign, err)
	}
	cfg = completed(t, func(c *config.Config) { withHub(c); c.LeaderElectionID = "agent-lease" })
	first, err := leaderCampaign(cfg, &rest.Config{}, scheme, setup)
	if err != nil {
		t.Fatal(err)
	}
	second, err := leaderCampaign(cfg, &rest.Config{}, scheme, setup)
	if err != nil {
		t.Fatal(err)
	}
	if first.Name != "agent-lease" || first.Namespace != cfg.Namespace || first.Setup == nil {
		t.Errorf("campaign for Lease %s/%s (setup given: %v), want %s/agent-lease", first.Namespace, first.Name, first.Setup != nil, cfg.Namespace)
	}
	if first.Identity == second.Identity {
		t.Errorf("two runs campaign as the same identity %q: a restarted agent would be mistaken for its previous run", first.Identity)
	}
	opts, reports := reporterOptions(cfg, nil, nil, first, "v1.2.3")
	if !reports || opts.Leader != first {
		t.Errorf("the reporter does not follow the campaign: reports %v, leader %v", reports, opts.Leader)
	}
}

func hasKey(m map[string]cache.Config, key string) bool {
	_, ok := m[key]
	return ok
}
