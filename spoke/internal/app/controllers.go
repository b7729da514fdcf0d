package app

import (
	"context"
	"errors"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	"github.com/imperator-federation/imperator/internal/leader"
	"github.com/imperator-federation/imperator/spoke/internal/admissionpolicy"
	"github.com/imperator-federation/imperator/spoke/internal/config"
	"github.com/imperator-federation/imperator/spoke/internal/controller/capacityhold"
	"github.com/imperator-federation/imperator/spoke/internal/controller/machine"
	"github.com/imperator-federation/imperator/spoke/internal/controller/nodepool"
	"github.com/imperator-federation/imperator/spoke/internal/controller/provisioningrequest"
	"github.com/imperator-federation/imperator/spoke/internal/hosted"
	"github.com/imperator-federation/imperator/spoke/internal/migrate"
	"github.com/imperator-federation/imperator/spoke/internal/reporter"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/machinevalidator"
)

// The leader-only work: the controllers (in hosted mode, every member's),
// the campaign for the Lease that runs them, and the hub reporter.

// Leader election keeps its Lease in the agent's namespace. It records no
// events (the campaign's Lease lock has no recorder, as the hub's): the
// Lease's holderIdentity and the agent's log say which replica leads.
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=imperator-system,resources=leases,verbs=get;create;update

// controllers returns the setup of the controllers, run in every leader term
// on the term's manager (a runnable starts once), with a cache of their own:
// a new term starts from what the API server holds. In hosted mode the
// controllers serve every member through a hosted.Provider, which also runs
// each member's reporter and webhooks (memberWebhooks); in-cluster they serve
// the local cluster.
func controllers(ctx context.Context, cfg config.Config, scheme *runtime.Scheme, management client.Client, memberWebhooks *hosted.Webhooks, version string) func(manager.Manager) error {
	return func(mgr manager.Manager) error {
		provider, err := memberClusters(cfg, scheme, management, memberWebhooks, version)
		if err != nil {
			return err
		}
		// A nil *hosted.Provider is not a nil interface: pass nil itself
		// for the in-cluster agent.
		var mc mcmanager.Manager
		if provider != nil {
			mc, err = mcmanager.WithMultiCluster(mgr, provider)
		} else {
			mc, err = mcmanager.WithMultiCluster(mgr, nil)
		}
		if err != nil {
			return fmt.Errorf("setting up the controllers: %w", err)
		}
		if provider != nil {
			if err := errors.Join(provider.SetupWithManager(mc), machinevalidator.SetupIndexer(ctx, provider)); err != nil {
				return err
			}
		}
		if err := setupProvisioningRequests(mc, provisioningrequest.Options{Clock: cfg.Clock(), AgentNamespace: cfg.Namespace,
			MaxUnitsPerNamespace: int32(cfg.ProvisioningMaxUnitsPerNamespace)}); err != nil {
			return err
		}
		if provider == nil {
			if err := setupInjectionPolicies(mgr, cfg.Injection, cfg.Namespace); err != nil {
				return err
			}
			// Adoption from the original Imperator, Machine by Machine (docs/migration.md).
			if err := mgr.Add(&migrate.Adopter{Client: management, Namespace: cfg.Namespace}); err != nil {
				return err
			}
		}
		return errors.Join(
			nodepool.SetupWithManager(mc),
			capacityhold.SetupWithManager(mc, capacityhold.WithRetention(cfg.HoldRetention), capacityhold.WithClock(cfg.Clock())),
			machine.SetupWithManager(mc, machine.Options{
				Namespace:         cfg.Namespace,
				Image:             cfg.Reservation.Image,
				PriorityClassName: cfg.Reservation.PriorityClassName,
				Clock:             cfg.Clock(),
			}),
		)
	}
}

// setupInjectionPolicies resolves --injection (auto asks the API server's
// discovery at the start of each leader term) and, on the policy path, runs
// the controller that writes the injection policies' bindings and the
// stamper of the guests' arrival (CEL has no clock).
func setupInjectionPolicies(mgr manager.Manager, mode, namespace string) error {
	disc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("creating the discovery client: %w", err)
	}
	usePolicy, err := admissionpolicy.UsePolicy(mode, disc)
	if err != nil {
		return err
	}
	ctrl.Log.WithName("spoke").Info("Guest injection", "injection", mode, "policy", usePolicy)
	if !usePolicy {
		// The webhook path reads and writes no policy binding (and needs no
		// RBAC for them); bindings left by an earlier policy run are
		// deleted by hand (docs/contract.md).
		return nil
	}
	clientset, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("creating the clientset of the first-sight stamper: %w", err)
	}
	return errors.Join(
		(&admissionpolicy.Reconciler{Client: mgr.GetClient(), Enabled: true, Namespace: namespace}).SetupWithManager(mgr),
		mgr.Add(&admissionpolicy.FirstSight{Clientset: clientset, Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}))
}

// setupProvisioningRequests sets up the ProvisioningRequest provider, which
// serves the class on the local cluster, or in hosted mode on every member,
// while its API server serves the ProvisioningRequest CRD (discovery asked
// regularly: a CRD installed or removed later needs no restart), and logs
// when it does not.
func setupProvisioningRequests(mc mcmanager.Manager, opts provisioningrequest.Options) error {
	return provisioningrequest.SetupWithManager(mc, opts)
}

// memberClusters returns, in hosted mode, the provider of the member
// clusters found in the management cluster's kubeconfig Secrets; nil for the
// in-cluster agent.
func memberClusters(cfg config.Config, scheme *runtime.Scheme, management client.Client, memberWebhooks *hosted.Webhooks, version string) (*hosted.Provider, error) {
	if !cfg.IsHosted() {
		return nil, nil
	}
	agent := &hosted.Agent{
		AgentNamespace: cfg.Namespace,
		Management:     management,
		Hub:            cfg.Hub,
		AgentVersion:   version,
		Webhooks:       memberWebhooks,
		Log:            ctrl.Log.WithName("hosted"),
	}
	return hosted.New(hosted.Options{
		Namespace:         cfg.Hosted.KubeconfigNamespace,
		Scheme:            scheme,
		Cache:             func() cache.Options { return memberCacheOptions(cfg) },
		RequestTimeout:    cfg.Hosted.RequestTimeout,
		DefaultWebhookURL: cfg.Webhook.URL,
		Serve:             agent.Serve,
		Removed:           agent.Removed,
		Log:               ctrl.Log.WithName("member-clusters"),
	})
}

// leaderCampaign returns the campaign for the Lease that runs setup in each
// leader term, or nil without --leader-elect: then the controllers run on
// the main manager for the life of the process.
func leaderCampaign(cfg config.Config, restConfig *rest.Config, scheme *runtime.Scheme, setup func(manager.Manager) error) (*leader.Campaign, error) {
	if !cfg.LeaderElection {
		return nil, nil
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("reading the host name: %w", err)
	}
	return &leader.Campaign{
		Config:         restConfig,
		ManagerOptions: termManagerOptions(cfg, scheme),
		Namespace:      cfg.Namespace,
		Name:           cfg.LeaderElectionID,
		// The host (the pod name in a cluster) and a suffix, so that a
		// restarted agent is not mistaken for its previous run.
		Identity: host + "_" + string(uuid.NewUUID()),
		Setup:    setup,
		Log:      ctrl.Log.WithName("leader"),
	}, nil
}

// runControllers runs the controllers under campaign, or on local itself
// when there is no campaign (no leader election).
func runControllers(local manager.Manager, campaign *leader.Campaign, setup func(manager.Manager) error) error {
	if campaign != nil {
		return local.Add(campaign)
	}
	return setup(local)
}

// addHubReporter adds the in-cluster agent's reporter to the hub, when
// --hub-address is given; in hosted mode every member reports on its own
// (package hosted).
func addHubReporter(local manager.Manager, cfg config.Config, direct client.Client, campaign *leader.Campaign, version string) error {
	opts, ok := reporterOptions(cfg, local.GetCache(), direct, campaign, version)
	if !ok {
		return nil
	}
	hubReporter, err := reporter.New(opts)
	if err != nil {
		return err
	}
	if err := local.Add(hubReporter); err != nil {
		return fmt.Errorf("setting up the hub reporter: %w", err)
	}
	return nil
}

// reporterOptions are the hub reporter's options, and whether the agent
// reports itself: not without a hub address, nor in hosted mode.
func reporterOptions(cfg config.Config, c cache.Cache, direct client.Client, campaign *leader.Campaign, version string) (reporter.Options, bool) {
	if cfg.Hub.Address == "" || cfg.IsHosted() {
		return reporter.Options{}, false
	}
	opts := reporter.Options{
		Cache:        c,
		Client:       direct,
		Namespace:    cfg.Namespace,
		Hub:          cfg.Hub,
		Token:        cfg.JoinToken,
		AgentVersion: version,
		// Heartbeats say when the agent's figures are stale.
		APIServerStaleAfter: cfg.Hub.APIServerStaleAfter,
		Clock:               cfg.Clock(),
		Log:                 ctrl.Log.WithName("reporter"),
	}
	if campaign != nil {
		// The replica that leads reports, and the last leader reports on
		// while nobody can hold the Lease.
		opts.Leader = campaign
	}
	return opts, true
}
