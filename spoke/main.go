// Command spoke is the Imperator agent of one member cluster. It embeds every
// controller of the spoke — Machine (reservations, usage), node pool (node
// labels, annotation, taints), the Pod Resource Injector and the Machine
// validator — and, given a hub address, reports to the hub. It keeps working
// when the hub is unreachable.
//
// With --clusters-from=kubeconfig-secrets (hosted mode) the agent runs in a
// management cluster instead and serves every member cluster whose kubeconfig
// Secret it finds there (package hosted): the same controllers, a reporter
// and webhooks per member.
//
// Every replica serves the webhooks. The controllers and the hub reporter
// are leader-only work, run under a leader.Campaign: a replica that loses its
// Lease — its API server went away, say — stops its controllers and
// campaigns again instead of exiting, and as the last leader it keeps
// reporting to the hub, stale (reporter.Reporter's mandate), until the API
// server answers again.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/internal/leader"
	"github.com/imperator-federation/imperator/spoke/internal/config"
	"github.com/imperator-federation/imperator/spoke/internal/controller/capacityhold"
	"github.com/imperator-federation/imperator/spoke/internal/controller/machine"
	"github.com/imperator-federation/imperator/spoke/internal/controller/nodepool"
	"github.com/imperator-federation/imperator/spoke/internal/hosted"
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

// hostedWorkers is how many reconciles of each controller run at once in
// hosted mode, where one controller serves every member: a member whose API
// server is slow holds a worker for at most --member-request-timeout, and the
// other workers go on with the other members.
const hostedWorkers = 4

// version is the agent's version, reported to the hub; set at build time
// with -ldflags "-X main.version=...".
var version = "v0.1.0-dev"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "spoke:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg := config.Default()
	cfg.BindFlags(flag.CommandLine)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	cfg.Complete()
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("spoke")
	ctx := ctrl.SetupSignalHandler()

	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), imperatorv1alpha1.AddToScheme(scheme)); err != nil {
		return fmt.Errorf("building scheme: %w", err)
	}
	// The certificate manager reads one Secret and two webhook
	// configurations by name: a direct client, not a cache of every Secret.
	direct, err := client.New(restConfig, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	webhookOpts := webhook.Options{
		Host: cfg.Webhook.BindAddress,
		Port: cfg.Webhook.Port,
	}
	// With cert-manager the webhook server reads tls.crt and tls.key from
	// the mounted Secret and reloads them on renewal (controller-runtime's
	// certwatcher); otherwise the agent issues and rotates the certificate
	// itself and serves it from memory.
	var certManager *certs.Manager
	if cfg.Webhook.CertManagerCertificate != "" {
		webhookOpts.CertDir = cfg.Webhook.CertDir
	} else {
		// In hosted mode the configurations live in the members, which
		// package hosted keeps current; the management cluster has none.
		var mutating, validating []string
		if !cfg.IsHosted() {
			mutating, validating = []string{cfg.Webhook.MutatingConfiguration}, []string{cfg.Webhook.ValidatingConfiguration}
		}
		certManager, err = certs.New(direct, certs.Options{
			Namespace:          cfg.Namespace,
			SecretName:         cfg.Webhook.CertSecret,
			Hosts:              cfg.Webhook.Hosts,
			MutatingWebhooks:   mutating,
			ValidatingWebhooks: validating,
			CAValidity:         cfg.Webhook.CAValidity,
			CertValidity:       cfg.Webhook.CertValidity,
		})
		if err != nil {
			return err
		}
		webhookOpts.TLSOpts = append(webhookOpts.TLSOpts, certManager.TLSOption)
	}
	webhookOpts.TLSOpts = append(webhookOpts.TLSOpts, func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 })

	// Only the Machine controller reads pods, StatefulSets and Services:
	// cache grouped pods and the agent namespace's workloads, not every pod
	// of the cluster. In hosted mode that is each member's cache; the
	// management cluster's holds only the members' kubeconfig Secrets.
	cacheOpts := cache.Options{ByObject: machine.CacheOptions(cfg.Namespace)}
	memberCacheOpts := func() cache.Options { return cache.Options{ByObject: machine.CacheOptions(cfg.Namespace)} }
	if cfg.IsHosted() {
		cacheOpts = hosted.CacheOptions(cfg.Hosted.KubeconfigNamespace)
	}
	// The main manager runs on every replica without leader election: it
	// serves the webhooks, metrics and probes, and its cache feeds the
	// webhooks and the hub reporter.
	localOpts := ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: cfg.MetricsAddr},
		HealthProbeBindAddress: cfg.HealthAddr,
		WebhookServer:          webhook.NewServer(webhookOpts),
	}
	if cfg.IsHosted() {
		localOpts.Controller.MaxConcurrentReconciles = hostedWorkers
	}
	local, err := ctrl.NewManager(restConfig, localOpts)
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}

	var caBundle []byte
	if certManager != nil {
		// The webhook server needs its certificate before it starts; the API
		// server may still be coming up, so retry for a while.
		err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			if err := certManager.Ensure(ctx); err != nil {
				log.Info("Webhook certificate not ready yet", "err", err.Error())
				return false, nil
			}
			return true, nil
		})
		if err != nil {
			return fmt.Errorf("preparing webhook certificate: %w", err)
		}
		if err := local.Add(certManager); err != nil {
			return fmt.Errorf("setting up the webhook certificate manager: %w", err)
		}
		caBundle = certManager.CABundle()
	}
	var memberWebhooks *hosted.Webhooks
	if cfg.IsHosted() {
		// Every member's webhook configurations point at this server
		// (package hosted registers them in the members).
		memberWebhooks = &hosted.Webhooks{
			Scheme:                  scheme,
			AgentNamespace:          cfg.Namespace,
			MutatingConfiguration:   cfg.Webhook.MutatingConfiguration,
			ValidatingConfiguration: cfg.Webhook.ValidatingConfiguration,
			CABundle:                certManager.CABundle,
			Hosts:                   cfg.Webhook.Hosts,
			ProbeInterval:           cfg.Hosted.WebhookProbeInterval,
			Log:                     ctrl.Log.WithName("member-webhooks"),
		}
	} else if err := registerWebhooks(ctx, direct, cfg, caBundle); err != nil {
		return err
	}
	// The controllers run in every leader term, set up afresh on the term's
	// manager (a runnable starts once), with a cache of their own: a new
	// term starts from what the API server holds.
	setupControllers := func(mgr manager.Manager) error {
		var provider *hosted.Provider
		if cfg.IsHosted() {
			agent := &hosted.Agent{
				AgentNamespace: cfg.Namespace,
				Management:     direct,
				Hub:            cfg.Hub,
				AgentVersion:   version,
				Webhooks:       memberWebhooks,
				Log:            ctrl.Log.WithName("hosted"),
			}
			var err error
			provider, err = hosted.New(hosted.Options{
				Namespace:         cfg.Hosted.KubeconfigNamespace,
				Scheme:            scheme,
				Cache:             memberCacheOpts,
				RequestTimeout:    cfg.Hosted.RequestTimeout,
				DefaultWebhookURL: cfg.Webhook.URL,
				Serve:             agent.Serve,
				Removed:           agent.Removed,
				Log:               ctrl.Log.WithName("member-clusters"),
			})
			if err != nil {
				return err
			}
		}
		// A nil *hosted.Provider is not a nil interface: pass nil itself
		// for the in-cluster agent.
		var mc mcmanager.Manager
		var err error
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
		return errors.Join(
			nodepool.SetupWithManager(mc),
			capacityhold.SetupWithManager(mc),
			machine.SetupWithManager(mc, machine.Options{
				Namespace:         cfg.Namespace,
				Image:             cfg.Reservation.Image,
				PriorityClassName: cfg.Reservation.PriorityClassName,
			}),
		)
	}
	var campaign *leader.Campaign
	if cfg.LeaderElection {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("reading the host name: %w", err)
		}
		termOpts := ctrl.Options{Scheme: scheme, Cache: cacheOpts}
		if cfg.IsHosted() {
			termOpts.Controller.MaxConcurrentReconciles = hostedWorkers
		}
		campaign = &leader.Campaign{
			Config:         restConfig,
			ManagerOptions: termOpts,
			Namespace:      cfg.Namespace,
			Name:           cfg.LeaderElectionID,
			// The host (the pod name in a cluster) and a suffix, so that a
			// restarted agent is not mistaken for its previous run.
			Identity: host + "_" + string(uuid.NewUUID()),
			Setup:    setupControllers,
			Log:      ctrl.Log.WithName("leader"),
		}
	}
	setup := []error{
		local.AddHealthzCheck("ping", healthz.Ping),
		local.AddReadyzCheck("webhook", local.GetWebhookServer().StartedChecker()),
	}
	if cfg.IsHosted() {
		local.GetWebhookServer().Register(hosted.PathPrefix, memberWebhooks)
	} else {
		setup = append(setup,
			podinjector.SetupWebhookWithManager(local),
			machinevalidator.SetupWebhookWithManager(local))
	}
	if campaign != nil {
		setup = append(setup, local.Add(campaign))
	} else {
		setup = append(setup, setupControllers(local))
	}
	if err := errors.Join(setup...); err != nil {
		return fmt.Errorf("setting up the agent: %w", err)
	}
	// In hosted mode every member reports on its own (package hosted).
	if cfg.Hub.Address != "" && !cfg.IsHosted() {
		opts := reporter.Options{
			Cache:        local.GetCache(),
			Client:       direct,
			Namespace:    cfg.Namespace,
			Hub:          cfg.Hub,
			Token:        cfg.JoinToken,
			AgentVersion: version,
			// Heartbeats say when the agent's figures are stale.
			APIServerStaleAfter: cfg.Hub.APIServerStaleAfter,
			Log:                 ctrl.Log.WithName("reporter"),
		}
		if campaign != nil {
			// The replica that leads reports, and the last leader reports
			// on while nobody can hold the Lease.
			opts.Leader = campaign
		}
		hubReporter, err := reporter.New(opts)
		if err != nil {
			return err
		}
		if err := local.Add(hubReporter); err != nil {
			return fmt.Errorf("setting up the hub reporter: %w", err)
		}
	}

	log.Info("Starting agent", "namespace", cfg.Namespace, "hub", cfg.Hub.Address, "clustersFrom", cfg.Hosted.ClustersFrom)
	if err := local.Start(ctx); err != nil {
		return fmt.Errorf("running manager: %w", err)
	}
	return nil
}

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
func registerWebhooks(ctx context.Context, c client.Client, cfg config.Config, caBundle []byte) error {
	if cfg.Webhook.URL == "" {
		return nil
	}
	target := install.Target{URL: cfg.Webhook.URL}
	injector, err := target.ClientConfig(podinjector.WebhookPath, caBundle)
	if err != nil {
		return err
	}
	validator, err := target.ClientConfig(machinevalidator.WebhookPath, caBundle)
	if err != nil {
		return err
	}
	mutating := podinjector.MutatingWebhookConfiguration(cfg.Webhook.MutatingConfiguration, cfg.Namespace, injector)
	validating := machinevalidator.ValidatingWebhookConfiguration(cfg.Webhook.ValidatingConfiguration, validator)
	if cfg.Webhook.CertManagerCertificate != "" {
		from := cfg.Namespace + "/" + cfg.Webhook.CertManagerCertificate
		metav1.SetMetaDataAnnotation(&mutating.ObjectMeta, injectCAFromAnnotation, from)
		metav1.SetMetaDataAnnotation(&validating.ObjectMeta, injectCAFromAnnotation, from)
	}
	return install.Apply(ctx, c, mutating, validating)
}

// injectCAFromAnnotation asks cert-manager's cainjector to write the CA of
// the Certificate it names (namespace/name) into every webhook's caBundle.
const injectCAFromAnnotation = "cert-manager.io/inject-ca-from"
