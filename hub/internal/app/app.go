// Package app assembles the hub from its parts — CA, store, persister,
// liveness checker, gRPC server — on a controller-runtime manager of the hub
// cluster. The hub binary and the integration suites both run it.
//
// The background work is controller-runtime controllers: the persister,
// liveness and deregistration on every replica, the placement scores in each
// leader term (leader.Campaign). They read time from one clock
// (config.Clock), as do the store, Admit, Join and the server.
package app

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/config"
	"github.com/imperator-federation/imperator/hub/internal/holds"
	"github.com/imperator-federation/imperator/hub/internal/hubca"
	"github.com/imperator-federation/imperator/hub/internal/join"
	"github.com/imperator-federation/imperator/hub/internal/liveness"
	"github.com/imperator-federation/imperator/hub/internal/persist"
	"github.com/imperator-federation/imperator/hub/internal/query"
	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/hub/internal/scores"
	"github.com/imperator-federation/imperator/hub/internal/server"
	"github.com/imperator-federation/imperator/hub/internal/store"
	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/leader"
)

// Options are what the binary and tests set beyond the configuration.
type Options struct {
	// Listener, when set, is served instead of cfg.ListenAddress.
	Listener net.Listener
	// Registerer receives the hub's metrics (controller-runtime's registry
	// when nil).
	Registerer prometheus.Registerer
	// SharedProcess is set when several hubs run in one process (tests):
	// their controllers then share names, which are otherwise unique.
	SharedProcess bool
	// Ready, when set, is called with the store once the hub is assembled
	// (and restored), just before it starts serving.
	Ready func(*store.Store)
}

// replicaID names this run of the hub among its replicas: the host (the pod
// name in a cluster) and a random suffix, so that a restarted replica is not
// mistaken for its previous run.
func replicaID() (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("reading the host name: %w", err)
	}
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		return "", fmt.Errorf("generating the replica name: %w", err)
	}
	return host + "_" + hex.EncodeToString(suffix), nil
}

// Scheme returns the hub's scheme: core, Imperator and OCM cluster kinds
// (ManagedCluster, AddOnPlacementScore).
func Scheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), imperatorv1alpha1.AddToScheme(scheme), clusterv1.Install(scheme), clusterv1alpha1.Install(scheme)); err != nil {
		return nil, fmt.Errorf("building scheme: %w", err)
	}
	return scheme, nil
}

// Leader election: a Lease in the hub's namespace (leader.Campaign records
// no events; it logs each term).
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=imperator-system,resources=leases,verbs=get;create;update

// Run runs the hub until ctx is done.
func Run(ctx context.Context, cfg config.Config, restConfig *rest.Config, opts Options) error {
	log := ctrl.Log.WithName("hub")
	// The one clock every part reads time from (offset only in tests).
	clk := cfg.Clock()
	scheme, err := Scheme()
	if err != nil {
		return err
	}
	// Secrets (CA, tokens) and the restore are read directly: no cache of
	// every Secret in the hub cluster.
	direct, err := client.New(restConfig, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	// Started with nothing but a kubeconfig, the hub makes its own namespace.
	if err := registry.EnsureNamespace(ctx, direct, cfg.Namespace); err != nil {
		return err
	}
	ca, err := hubca.LoadOrCreate(ctx, direct, cfg.Namespace, cfg.CASecret)
	if err != nil {
		return err
	}
	// Re-issued from the CA at 2/3 of its life, in the handshake that finds
	// it due: no restart, and spokes trust the CA, not this leaf.
	servingLog := log.WithName("serving-certificate")
	serving, err := hubca.NewServingRotator(ca, "imperator-hub", cfg.ServingHosts, cfg.ServingCertValidity, clk, func(err error) {
		servingLog.Error(err, "Renewing the serving certificate failed; serving the current one while it is valid")
	})
	if err != nil {
		return err
	}
	clientCAs := x509.NewCertPool()
	clientCAs.AddCert(ca.Cert)

	started := clk.Now()
	replica, err := replicaID()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: cfg.MetricsAddr},
		HealthProbeBindAddress: cfg.HealthAddr,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			// Only the spokes' heartbeat Leases, not every Lease of the cluster.
			&coordinationv1.Lease{}: {Field: fields.OneTermEqualSelector("metadata.name", persist.LeaseName)},
			// Fleet holds live in the hub's namespace, where its Role reads them.
			&imperatorv1alpha1.FleetHold{}: {Namespaces: map[string]cache.Config{cfg.Namespace: {}}},
		}},
		// No leader election here: losing the lead would end the manager,
		// and with it every spoke stream and query. The leader's work runs
		// under leader.Campaign instead (see below).
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(opts.SharedProcess)},
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	st := store.New(clk, cfg.GracePeriod)
	st.SetReplica(replica)
	campaign := &leader.Campaign{
		Config: restConfig, Namespace: cfg.Namespace, Name: config.LeaderElectionID, Identity: replica,
		Log: log.WithName("leader"),
	}
	leading := campaign.Leading
	if !cfg.LeaderElect {
		leading = nil // the only replica: always leads
	}
	persister := persist.New(mgr.GetClient(), st, persist.Options{Interval: cfg.PersistInterval, Leading: leading, Reader: mgr.GetAPIReader(), Clock: clk, Log: log.WithName("persist")})
	if err := persister.Restore(ctx, direct); err != nil {
		return err
	}
	reg := opts.Registerer
	if reg == nil {
		reg = ctrlmetrics.Registry
	}
	metrics, err := server.NewMetrics(reg, st, leading)
	if err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	cached, apiReader := mgr.GetClient(), mgr.GetAPIReader()
	tokens := join.NewTokens(direct, cfg.Namespace, clk)
	queries := query.New(st, tokens, clk)
	publisher := scores.New(mgr.GetClient(), st, scores.Options{Clock: clk, Log: log.WithName("scores")})
	revocations := &registry.Revocations{Reader: direct, Namespace: cfg.Namespace, Refresh: cfg.RevocationsRefresh, Clock: clk, Log: log.WithName("revocations")}
	if err := revocations.Load(ctx); err != nil {
		return err
	}
	srv, err := server.New(server.Options{
		Listener:      opts.Listener,
		ListenAddress: cfg.ListenAddress,
		TLS:           identity.ServerTLS(serving.GetCertificate, clientCAs),
		Store:         st,
		Clock:         clk,
		Joiner: &join.Service{
			Tokens:         tokens,
			CA:             ca,
			Client:         direct,
			Validity:       cfg.ClientCertValidity,
			HubNamespace:   cfg.Namespace,
			RenewalOverlap: cfg.RenewalOverlap,
			Clock:          clk,
		},
		Admit:           registry.Admitter(cached, apiReader, clk),
		Metrics:         metrics,
		Log:             log.WithName("grpc"),
		MaxRecvMsgBytes: cfg.MaxRecvMsgBytes,
		Limits:          cfg.Limits,
		Services:        []func(grpc.ServiceRegistrar){queries.Register},
		Authorize:       query.Authorize,
		Revoked:         revocations.Revoked,
	})
	if err != nil {
		return err
	}
	// Fleet holds go out on the spokes' streams held by this replica.
	coordinator := holds.New(holds.Options{Client: direct, Namespace: cfg.Namespace, Store: st, Spokes: srv, Deadline: cfg.HoldDeadline, Clock: clk})
	queries.SetHolds(coordinator)
	if err := errors.Join(
		mgr.Add(srv),
		mgr.Add(revocations),
		persister.SetupWithManager(mgr),
		mgr.Add(queries),
		(&liveness.Reconciler{Store: st}).SetupWithManager(mgr),
		(&holds.Expiry{Coordinator: coordinator}).SetupWithManager(mgr),
		(&registry.Deregistrations{Reader: mgr.GetClient(), Forget: func(cluster string) {
			log.Info("Cluster deregistered", "cluster", cluster)
			srv.EndSession(cluster)
			st.Remove(cluster)
		}}).SetupWithManager(mgr),
		(&persist.Follower{Client: mgr.GetClient(), Store: st, Started: started, EndStream: srv.EndStaleSession}).SetupWithManager(mgr),
		mgr.AddHealthzCheck("ping", healthz.Ping),
		mgr.AddReadyzCheck("ping", healthz.Ping),
	); err != nil {
		return fmt.Errorf("setting up the hub: %w", err)
	}
	// The leader's work, started afresh in every term: publishing placement
	// scores, and a first look at every cluster (some may have gone silent
	// while nobody led).
	leaderWork := func(m manager.Manager) error {
		return errors.Join(
			publisher.SetupWithManager(m),
			m.Add(manager.RunnableFunc(func(ctx context.Context) error {
				persister.LookAtEveryCluster()
				<-ctx.Done()
				return nil
			})),
		)
	}
	if cfg.LeaderElect {
		campaign.Setup = leaderWork
		err = mgr.Add(campaign)
	} else {
		err = leaderWork(mgr)
	}
	if err != nil {
		return fmt.Errorf("setting up the leader's work: %w", err)
	}
	if opts.Ready != nil {
		opts.Ready(st)
	}
	log.Info("Starting hub", "replica", replica, "clockOffset", cfg.ClockOffset, "namespace", cfg.Namespace, "listen", cfg.ListenAddress, "gracePeriod", cfg.GracePeriod, "leaderElect", cfg.LeaderElect)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running manager: %w", err)
	}
	return nil
}
