// Package app assembles the spoke agent from its parts — webhook
// certificate, manager, webhooks, controllers, hub reporter, hosted mode —
// as a list of named setup steps, each a function of the configuration that
// can be tested alone. The spoke binary parses the flags and runs Run.
// Run and the managers' options are in app.go; the steps of the webhooks
// every replica serves in webhooks.go, those of the leader-only work in
// controllers.go.
//
// Every replica serves the webhooks. The controllers and the hub reporter
// are leader-only work, run under a leader.Campaign: a replica that loses its
// Lease — its API server went away, say — stops its controllers and
// campaigns again instead of exiting, and as the last leader it keeps
// reporting to the hub, stale (reporter.Reporter's mandate), until the API
// server answers again.
package app

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/imperator-federation/imperator/internal/apiready"
	"github.com/imperator-federation/imperator/internal/schemes"
	"github.com/imperator-federation/imperator/spoke/internal/config"
	"github.com/imperator-federation/imperator/spoke/internal/controller/machine"
	"github.com/imperator-federation/imperator/spoke/internal/controller/provisioningrequest"
	"github.com/imperator-federation/imperator/spoke/internal/hosted"
	"github.com/imperator-federation/imperator/spoke/internal/migrate"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/certs"
)

// ControllerWorkers is how many reconciles of each controller run at once.
// The keys of every controller are independent (one Machine, one pool, one
// hold; a node listed by two pools belongs to the oldest, and node writes
// carry the resourceVersion), and what they share in memory is locked. A reconcile mostly waits on the API server: with one
// worker, the 50 pools of a 1,000-node cluster were configured one after
// the other (BenchmarkSpokeAtScale). In hosted mode, where one controller
// serves every member, a member whose API server is slow holds a worker for
// at most --member-request-timeout while the others go on with the other
// members.
const ControllerWorkers = 4

// Options are what the binary sets beyond the configuration.
type Options struct {
	// Version is the agent's version, reported to the hub.
	Version string
}

// Run runs the agent of cfg until ctx is done.
func Run(ctx context.Context, cfg config.Config, restConfig *rest.Config, opts Options) error {
	log := ctrl.Log.WithName("spoke")
	// Everything below asks the API server something first: a start
	// during its outage waits for it instead of exiting (apiready).
	if err := apiready.Wait(ctx, restConfig, apiready.DefaultTimeout, log); err != nil {
		return err
	}
	scheme, err := schemes.Spoke()
	if err != nil {
		return err
	}
	if err := provisioningrequest.AddToScheme(scheme); err != nil {
		return err
	}
	// The certificate rotator reads one Secret and two webhook
	// configurations by name: a direct client, not a cache of every Secret.
	direct, err := client.New(restConfig, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	if !cfg.IsHosted() {
		if err := migrate.Startup(ctx, direct, cfg.Namespace, log.WithName("migrate")); err != nil {
			return err
		}
	}
	certRotator, err := newCertRotator(cfg, direct)
	if err != nil {
		return err
	}
	memberWebhooks, err := newMemberWebhooks(cfg, scheme, certRotator, direct)
	if err != nil {
		return err
	}
	local, err := ctrl.NewManager(restConfig, localManagerOptions(cfg, scheme, certRotator, memberWebhooks))
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	caBundle, err := prepareCertificate(ctx, local, certRotator, memberWebhooks, log)
	if err != nil {
		return err
	}
	if memberWebhooks == nil {
		if err := registerWebhooks(ctx, direct, restConfig, cfg, caBundle); err != nil {
			return err
		}
	}
	setupControllers := controllers(ctx, cfg, scheme, direct, memberWebhooks, opts.Version)
	campaign, err := leaderCampaign(cfg, restConfig, scheme, setupControllers)
	if err != nil {
		return err
	}
	if err := errors.Join(
		setupProbes(local),
		serveWebhooks(local, memberWebhooks, cfg),
		runControllers(local, campaign, setupControllers),
		addHubReporter(local, cfg, direct, campaign, opts.Version),
	); err != nil {
		return fmt.Errorf("setting up the agent: %w", err)
	}
	log.Info("Starting agent", "clockOffset", cfg.ClockOffset, "namespace", cfg.Namespace, "hub", cfg.Hub.Address, "clustersFrom", cfg.Hosted.ClustersFrom)
	if err := local.Start(ctx); err != nil {
		return fmt.Errorf("running manager: %w", err)
	}
	return nil
}

// cacheOptions cut the agent's caches. Only the Machine controller reads
// pods, StatefulSets and Services: cache grouped pods and the agent
// namespace's workloads, not every pod of the cluster. In hosted mode that
// is each member's cache (memberCacheOptions); the management cluster's
// holds only the members' kubeconfig Secrets.
func cacheOptions(cfg config.Config) cache.Options {
	if cfg.IsHosted() {
		return hosted.CacheOptions(cfg.Hosted.KubeconfigNamespace)
	}
	return memberCacheOptions(cfg)
}

// memberCacheOptions cut the cache of the cluster the controllers serve:
// the in-cluster agent's own, or each member's in hosted mode.
func memberCacheOptions(cfg config.Config) cache.Options {
	return cache.Options{ByObject: machine.CacheOptions(cfg.Namespace)}
}

// localManagerOptions configure the main manager. It runs on every replica
// without leader election: it serves the webhooks, metrics and probes, and
// its cache feeds the webhooks and the hub reporter.
func localManagerOptions(cfg config.Config, scheme *runtime.Scheme, certRotator *certs.Rotator, memberWebhooks *hosted.Webhooks) ctrl.Options {
	opts := termManagerOptions(cfg, scheme)
	opts.Metrics = metricsserver.Options{BindAddress: cfg.MetricsAddr}
	opts.HealthProbeBindAddress = cfg.HealthAddr
	opts.WebhookServer = webhook.NewServer(webhookServerOptions(cfg, certRotator, memberWebhooks))
	return opts
}

// termManagerOptions configure the manager of a leader term (and the base
// of the main manager's): the agent's scheme and caches, and
// ControllerWorkers reconciles at once.
func termManagerOptions(cfg config.Config, scheme *runtime.Scheme) ctrl.Options {
	opts := ctrl.Options{Scheme: scheme, Cache: cacheOptions(cfg)}
	opts.Controller.MaxConcurrentReconciles = ControllerWorkers
	return opts
}

// setupProbes adds the liveness check and the readiness check, which waits
// for the webhook server.
func setupProbes(local manager.Manager) error {
	return errors.Join(
		local.AddHealthzCheck("ping", healthz.Ping),
		local.AddReadyzCheck("webhook", local.GetWebhookServer().StartedChecker()),
	)
}
