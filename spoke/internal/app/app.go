// Package app assembles the spoke agent from its parts — webhook
// certificate, manager, webhooks, controllers, hub reporter, hosted mode —
// as a list of named setup steps, each a function of the configuration that
// can be tested alone. The spoke binary parses the flags and runs Run.
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
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	"github.com/imperator-federation/imperator/internal/apiready"
	"github.com/imperator-federation/imperator/internal/leader"
	"github.com/imperator-federation/imperator/internal/schemes"
	"github.com/imperator-federation/imperator/spoke/internal/admissionpolicy"
	"github.com/imperator-federation/imperator/spoke/internal/config"
	"github.com/imperator-federation/imperator/spoke/internal/controller/capacityhold"
	"github.com/imperator-federation/imperator/spoke/internal/controller/machine"
	"github.com/imperator-federation/imperator/spoke/internal/controller/nodepool"
	"github.com/imperator-federation/imperator/spoke/internal/controller/provisioningrequest"
	"github.com/imperator-federation/imperator/spoke/internal/hosted"
	"github.com/imperator-federation/imperator/spoke/internal/migrate"
	"github.com/imperator-federation/imperator/spoke/internal/reporter"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/certs"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/install"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/machinevalidator"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/podinjector"
)

// Leader election keeps its Lease in the agent's namespace. It records no
// events (the campaign's Lease lock has no recorder, as the hub's): the
// Lease's holderIdentity and the agent's log say which replica leads.
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=imperator-system,resources=leases,verbs=get;create;update

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

// certificateWait bounds how long the agent waits for its webhook
// certificate at start: the API server may still be coming up.
const certificateWait = 2 * time.Minute

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

// newCertRotator returns the manager of the webhook serving certificate the
// agent issues and rotates itself, or nil with
// --webhook-cert-manager-certificate, where cert-manager issues it. In hosted
// mode the webhook configurations live in the members, which package hosted
// keeps current: the management cluster has none to patch.
func newCertRotator(cfg config.Config, c client.Client) (*certs.Rotator, error) {
	if cfg.Webhook.CertManagerCertificate != "" {
		return nil, nil
	}
	var bundles certs.Bundles
	if !cfg.IsHosted() {
		bundles = &install.CABundles{
			Client:     c,
			Mutating:   []string{cfg.Webhook.MutatingConfiguration},
			Validating: []string{cfg.Webhook.ValidatingConfiguration},
		}
	}
	return certs.New(c, certs.Options{
		Namespace:    cfg.Namespace,
		SecretName:   cfg.Webhook.CertSecret,
		Hosts:        cfg.Webhook.Hosts,
		Bundles:      bundles,
		CAValidity:   cfg.Webhook.CAValidity,
		CertValidity: cfg.Webhook.CertValidity,
	})
}

// webhookServerOptions say where the webhook server listens and where its
// certificate comes from: with cert-manager (certRotator nil) it reads
// tls.crt and tls.key from the mounted Secret and reloads them on renewal
// (controller-runtime's certwatcher); otherwise it serves certRotator's from
// memory. Either way no TLS below 1.2. In hosted mode (memberWebhooks) it
// asks callers for the client certificates of the members' API servers.
func webhookServerOptions(cfg config.Config, certRotator *certs.Rotator, memberWebhooks *hosted.Webhooks) webhook.Options {
	opts := webhook.Options{Host: cfg.Webhook.BindAddress, Port: cfg.Webhook.Port}
	if certRotator == nil {
		opts.CertDir = cfg.Webhook.CertDir
	} else {
		opts.TLSOpts = append(opts.TLSOpts, certRotator.TLSOption)
	}
	opts.TLSOpts = append(opts.TLSOpts, func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 })
	if memberWebhooks != nil {
		opts.TLSOpts = append(opts.TLSOpts, memberWebhooks.ClientCA.TLSOption)
	}
	return opts
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

// prepareCertificate makes sure certRotator's certificate — and in hosted
// mode the members' client CA — exists before the webhook server starts,
// retrying for a while, as the API server may still be coming up; keeps them
// rotated on local, and returns the serving CA bundle; nil without
// certRotator (cert-manager mode).
func prepareCertificate(ctx context.Context, local manager.Manager, certRotator *certs.Rotator, memberWebhooks *hosted.Webhooks, log logr.Logger) ([]byte, error) {
	if certRotator == nil {
		return nil, nil
	}
	type ensurer interface {
		manager.Runnable
		Ensure(context.Context) error
	}
	ensurers := []ensurer{certRotator}
	if memberWebhooks != nil {
		ensurers = append(ensurers, memberWebhooks.ClientCA)
	}
	for _, e := range ensurers {
		err := wait.PollUntilContextTimeout(ctx, time.Second, certificateWait, true, func(ctx context.Context) (bool, error) {
			if err := e.Ensure(ctx); err != nil {
				log.Info("Webhook certificate not ready yet", "err", err.Error())
				return false, nil
			}
			return true, nil
		})
		if err != nil {
			return nil, fmt.Errorf("preparing webhook certificate: %w", err)
		}
		if err := local.Add(e); err != nil {
			return nil, fmt.Errorf("setting up the webhook certificate rotator: %w", err)
		}
	}
	return certRotator.CABundle(), nil
}

// newMemberWebhooks returns, in hosted mode, the members' webhooks: every
// member's webhook configurations point at this agent's server, and package
// hosted registers them in the members. They answer only the members' API
// servers, with the client certificates of a CA of their own, kept in
// <--webhook-cert-secret>-member-client-ca. Nil for the in-cluster agent.
func newMemberWebhooks(cfg config.Config, scheme *runtime.Scheme, certRotator *certs.Rotator, management client.Client) (*hosted.Webhooks, error) {
	if !cfg.IsHosted() {
		return nil, nil
	}
	clientCA, err := hosted.NewClientCA(management, hosted.ClientCAOptions{
		Namespace:  cfg.Namespace,
		SecretName: cfg.Webhook.CertSecret + memberClientCASuffix,
	})
	if err != nil {
		return nil, err
	}
	return &hosted.Webhooks{
		Scheme:                  scheme,
		AgentNamespace:          cfg.Namespace,
		MutatingConfiguration:   cfg.Webhook.MutatingConfiguration,
		ValidatingConfiguration: cfg.Webhook.ValidatingConfiguration,
		CABundle:                certRotator.CABundle,
		Hosts:                   cfg.Webhook.Hosts,
		ClientCA:                clientCA,
		Management:              management,
		ProbeInterval:           cfg.Hosted.WebhookProbeInterval,
		Log:                     ctrl.Log.WithName("member-webhooks"),
	}, nil
}

// memberClientCASuffix names the Secret of the members' client CA after the
// webhook certificate's.
const memberClientCASuffix = "-member-client-ca"

// registerWebhooks applies the injector's and the validator's webhook
// configurations when the agent runs outside its cluster (--webhook-url, as
// in the local fleet): only then is the address the API server must call
// known at run time, and the agent runs with its operator's credentials, not
// the ServiceAccount of deploy/spoke. In a cluster, deploy/spoke ships both
// configurations pointing at the imperator-webhook Service, and the agent
// only sets their CA bundle (package certs), which is all its RBAC allows.
//
// With --webhook-cert-manager-certificate caBundle is nil and never sent:
// instead the configurations carry the cert-manager.io/inject-ca-from
// annotation and cert-manager's cainjector writes the bundle (in a cluster the
// spoke-cert-manager overlay adds that annotation). Server-side apply keeps
// that bundle across our re-applies because it removes only the fields our
// field manager owns and no longer sends; the cainjector's write changes the
// value and so moves the field's ownership to the cainjector. The one removal
// happens when an agent that ran in the default mode (whose applies owned
// caBundle) first applies in cert-manager mode: its old bundle is dropped —
// it is the agent's own CA, which cannot verify a certificate cert-manager
// issued anyway — until the cainjector injects the right one.
//
// When --injection resolves to the policy path, the injector's
// configuration is deleted instead of applied: the API server injects.
func registerWebhooks(ctx context.Context, c client.Client, restConfig *rest.Config, cfg config.Config, caBundle []byte) error {
	if cfg.Webhook.URL == "" {
		return nil
	}
	target := install.Target{URL: cfg.Webhook.URL}
	mutating, validating, err := target.Configurations(caBundle, cfg.Webhook.MutatingConfiguration, cfg.Webhook.ValidatingConfiguration, cfg.Namespace)
	if err != nil {
		return err
	}
	if cfg.Webhook.CertManagerCertificate != "" {
		from := cfg.Namespace + "/" + cfg.Webhook.CertManagerCertificate
		metav1.SetMetaDataAnnotation(&mutating.ObjectMeta, injectCAFromAnnotation, from)
		metav1.SetMetaDataAnnotation(&validating.ObjectMeta, injectCAFromAnnotation, from)
	}
	byPolicy, err := admissionpolicy.UsePolicyAt(restConfig, cfg.Injection)
	if err != nil {
		return err
	}
	if byPolicy {
		return errors.Join(admissionpolicy.WithoutInjectorWebhook(ctx, c, mutating.Name), install.Apply(ctx, c, validating))
	}
	return install.Apply(ctx, c, mutating, validating)
}

// injectCAFromAnnotation asks cert-manager's cainjector to write the CA of
// the Certificate it names (namespace/name) into every webhook's caBundle.
const injectCAFromAnnotation = "cert-manager.io/inject-ca-from"

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

// setupProbes adds the liveness check and the readiness check, which waits
// for the webhook server.
func setupProbes(local manager.Manager) error {
	return errors.Join(
		local.AddHealthzCheck("ping", healthz.Ping),
		local.AddReadyzCheck("webhook", local.GetWebhookServer().StartedChecker()),
	)
}

// serveWebhooks registers the webhooks on local's server: in hosted mode
// every member's under hosted.PathPrefix (memberWebhooks), else the
// injector and the validator of the local cluster.
func serveWebhooks(local manager.Manager, memberWebhooks *hosted.Webhooks, cfg config.Config) error {
	if memberWebhooks != nil {
		local.GetWebhookServer().Register(hosted.PathPrefix, memberWebhooks)
		return nil
	}
	return errors.Join(
		podinjector.SetupWebhookWithManager(local, cfg.Clock()),
		machinevalidator.SetupWebhookWithManager(local))
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
