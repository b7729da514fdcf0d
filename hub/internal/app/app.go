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
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/capacity"
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
	"github.com/imperator-federation/imperator/internal/apiready"
	"github.com/imperator-federation/imperator/internal/leader"
	"github.com/imperator-federation/imperator/internal/schemes"
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

// Leader election: a Lease in the hub's namespace (leader.Campaign records
// no events; it logs each term).
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=imperator-system,resources=leases,verbs=get;create;update

// Run runs the hub until ctx is done.
func Run(ctx context.Context, cfg config.Config, restConfig *rest.Config, opts Options) error {
	log := ctrl.Log.WithName("hub")
	f, err := prepare(ctx, cfg, restConfig, log)
	if err != nil {
		return err
	}
	clk, scheme, direct, replica, authority := f.clock, f.scheme, f.direct, f.replica, f.authority
	started := clk.Now()
	mgr, err := ctrl.NewManager(restConfig, managerOptions(cfg, scheme, opts))
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	st := store.New(clk, cfg.GracePeriod)
	st.SetReplica(replica)
	campaign, leading := leaderCampaign(cfg, restConfig, replica, log)
	persister := persist.New(mgr.GetClient(), st, persist.Options{Interval: cfg.PersistInterval, Leading: leading, Reader: mgr.GetAPIReader(), Clock: clk, Log: log.WithName("persist"), Namespace: cfg.Namespace})
	if err := persister.Restore(ctx, direct); err != nil {
		return err
	}
	metrics, err := registerMetrics(registerer(opts), st, leading)
	if err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	publisher := scores.New(mgr.GetClient(), st, scores.Options{Clock: clk, Log: log.WithName("scores")})
	revocations := &registry.Revocations{Reader: direct, Namespace: cfg.Namespace, Refresh: cfg.RevocationsRefresh, Clock: clk, Log: log.WithName("revocations")}
	if err := revocations.Load(ctx); err != nil {
		return err
	}
	tokens := join.NewTokens(direct, cfg.Namespace, clk)
	queries := query.New(st, tokens, clk)
	queries.SetRegistry(direct)
	tokenAuth, err := newTokenAuthorizer(cfg, restConfig)
	if err != nil {
		return err
	}
	// Join and Renew tell the admitter of their writes: a certificate they
	// retire is not admitted here by a cache that does not show them yet.
	admitter := registry.NewAdmitter(mgr.GetClient(), mgr.GetAPIReader(), clk)
	srv, err := server.New(server.Options{
		Listener:        opts.Listener,
		ListenAddress:   cfg.ListenAddress,
		TLS:             authority.TLSConfig(),
		Store:           st,
		Clock:           clk,
		Joiner:          joiner(cfg, tokens, authority, direct, admitter, clk),
		Admit:           admitter.Admit,
		Metrics:         metrics,
		Log:             log.WithName("grpc"),
		MaxRecvMsgBytes: cfg.MaxRecvMsgBytes,
		Limits:          cfg.Limits,
		Services:        []func(grpc.ServiceRegistrar){queries.Register},
		Authorize:       query.Authorize,
		AuthorizeToken:  tokenAuth.Authorize,
		HasToken:        query.HasBearerToken,
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
		mgr.Add(authority),
		mgr.Add(revocations),
		persister.SetupWithManager(mgr),
		mgr.Add(queries),
		setupClusterWork(mgr, st, srv, coordinator, started, log),
		setupProbes(mgr),
	); err != nil {
		return fmt.Errorf("setting up the hub: %w", err)
	}
	if err := runLeaderWork(mgr, campaign, leaderWork(publisher, persister)); err != nil {
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

// foundation is what every part of the hub is built on.
type foundation struct {
	// clock is the one clock every part reads time from (offset only in
	// tests).
	clock  clock.WithTicker
	scheme *runtime.Scheme
	// direct reads Secrets (CA, tokens) and the restore: no cache of every
	// Secret in the hub cluster.
	direct    client.Client
	replica   string
	authority *hubca.Authority
}

// prepare waits for the hub cluster's API server (a start during its
// outage waits for it instead of exiting: apiready), then builds the
// foundation: the scheme, the direct client, this replica's ID and the hub
// CA.
func prepare(ctx context.Context, cfg config.Config, restConfig *rest.Config, log logr.Logger) (foundation, error) {
	if err := apiready.Wait(ctx, restConfig, apiready.DefaultTimeout, log); err != nil {
		return foundation{}, err
	}
	f := foundation{clock: cfg.Clock()}
	var err error
	if f.scheme, err = schemes.Hub(); err != nil {
		return foundation{}, err
	}
	if f.direct, err = client.New(restConfig, client.Options{Scheme: f.scheme}); err != nil {
		return foundation{}, fmt.Errorf("creating client: %w", err)
	}
	if f.replica, err = replicaID(); err != nil {
		return foundation{}, err
	}
	if f.authority, err = loadCA(ctx, cfg, f.direct, f.replica, f.clock, log); err != nil {
		return foundation{}, err
	}
	return f, nil
}

// newTokenAuthorizer authorizes people's Kubernetes identities of the hub
// cluster (bearer tokens) on the query API: TokenReview and
// SubjectAccessReview against the hub cluster.
func newTokenAuthorizer(cfg config.Config, restConfig *rest.Config) (*query.TokenAuthorizer, error) {
	kube, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("creating Kubernetes client: %w", err)
	}
	return query.NewTokenAuthorizer(kube, query.TokenAuthOptions{Audiences: cfg.TokenAudiences, TTL: cfg.TokenAuthTTL, DecisionTTL: cfg.TokenDecisionTTL})
}

// joiner serves spokes' Join and Renew: certificates of the hub CA for a
// bootstrap token or a current certificate.
func joiner(cfg config.Config, tokens *join.Tokens, authority *hubca.Authority, direct client.Client, admitter *registry.Admitter, clk clock.PassiveClock) *join.Service {
	return &join.Service{
		Tokens:         tokens,
		CA:             authority,
		Client:         direct,
		Validity:       cfg.ClientCertValidity,
		HubNamespace:   cfg.Namespace,
		RenewalOverlap: cfg.RenewalOverlap,
		Clock:          clk,
		RecordWritten:  admitter.Wrote,
	}
}

// loadCA makes the hub's namespace (started with nothing but a kubeconfig,
// the hub makes its own), loads the hub CA from it or creates it, and
// returns the hub's Authority: the CA that signs, the gRPC server's TLS
// configuration — a serving certificate re-issued from the current CA at
// 2/3 of its life or when a rotation is promoted, in the handshake that
// finds it due (no restart, and spokes trust the CA, not this leaf), and
// client certificates verified against every CA of the Secret — and the
// trust bundle joining spokes get. It follows `hub ca rotate` steps
// (hubca.Authority.Start).
func loadCA(ctx context.Context, cfg config.Config, direct client.Client, replica string, clk clock.PassiveClock, log logr.Logger) (*hubca.Authority, error) {
	if err := registry.EnsureNamespace(ctx, direct, cfg.Namespace); err != nil {
		return nil, err
	}
	if _, err := hubca.LoadOrCreate(ctx, direct, cfg.Namespace, cfg.CASecret); err != nil {
		return nil, err
	}
	trust, err := hubca.LoadTrust(ctx, direct, cfg.Namespace, cfg.CASecret)
	if err != nil {
		return nil, err
	}
	servingLog := log.WithName("serving-certificate")
	serving, err := hubca.NewServingRotator(trust.Current, "imperator-hub", cfg.ServingHosts, cfg.ServingCertValidity, clk, func(err error) {
		servingLog.Error(err, "Renewing the serving certificate failed; serving the current one while it is valid")
	})
	if err != nil {
		return nil, err
	}
	return hubca.NewAuthority(trust, hubca.AuthorityOptions{
		Client:  direct,
		Secret:  types.NamespacedName{Namespace: cfg.Namespace, Name: cfg.CASecret},
		Replica: replica,
		Serving: serving,
		Clock:   clk,
		Log:     log.WithName("ca"),
	}), nil
}

// managerOptions configure the hub's manager. It runs on every replica
// without leader election: losing the lead would end the manager, and with
// it every spoke stream and query; the leader's work runs under
// leader.Campaign instead (leaderCampaign). Its cache holds only the
// clusters' and the hub replicas' Leases (persist.LeaseCache), not every
// Lease of the cluster, and the fleet holds of
// the hub's namespace, where its Role reads them.
func managerOptions(cfg config.Config, scheme *runtime.Scheme, opts Options) ctrl.Options {
	return ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: cfg.MetricsAddr},
		HealthProbeBindAddress: cfg.HealthAddr,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}:        persist.LeaseCache(cfg.Namespace),
			&imperatorv1alpha1.FleetHold{}: {Namespaces: map[string]cache.Config{cfg.Namespace: {}}},
		}},
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(opts.SharedProcess)},
	}
}

// leaderCampaign returns the campaign for the hub's Lease, which this replica
// runs under --leader-elect, and what says whether it leads now. Without
// --leader-elect both are nil: the only replica always leads.
func leaderCampaign(cfg config.Config, restConfig *rest.Config, replica string, log logr.Logger) (*leader.Campaign, func() bool) {
	if !cfg.LeaderElect {
		return nil, nil
	}
	campaign := &leader.Campaign{
		Config: restConfig, Namespace: cfg.Namespace, Name: config.LeaderElectionID, Identity: replica,
		Log: log.WithName("leader"),
	}
	return campaign, campaign.Leading
}

// registerer is where the hub's metrics go: opts.Registerer, else
// controller-runtime's registry, which the manager serves.
// registerMetrics registers the hub's metrics on reg: the servers' (calls,
// streams, joins, leadership) and the clusters' figures in st.
func registerMetrics(reg prometheus.Registerer, st *store.Store, leading func() bool) (*server.Metrics, error) {
	metrics, err := server.NewMetrics(reg, leading)
	if err != nil {
		return nil, err
	}
	if err := reg.Register(capacity.NewCollector(st)); err != nil {
		return nil, err
	}
	return metrics, nil
}

func registerer(opts Options) prometheus.Registerer {
	if opts.Registerer != nil {
		return opts.Registerer
	}
	return ctrlmetrics.Registry
}

// setupClusterWork adds what every replica does for the clusters: marks
// silent ones (liveness), expires, delivers and reconciles fleet holds, forgets deregistered clusters
// (ending their streams here) and follows what other replicas persist.
func setupClusterWork(mgr manager.Manager, st *store.Store, srv *server.Server, coordinator *holds.Coordinator, started time.Time, log logr.Logger) error {
	return errors.Join(
		(&liveness.Reconciler{Store: st}).SetupWithManager(mgr),
		(&holds.Expiry{Coordinator: coordinator}).SetupWithManager(mgr),
		(&holds.Deliverer{Coordinator: coordinator}).SetupWithManager(mgr),
		mgr.Add(&holds.Reconciler{Coordinator: coordinator, Reports: srv}),
		(&registry.Deregistrations{Reader: mgr.GetClient(), Forget: func(cluster string) {
			log.Info("Cluster deregistered", "cluster", cluster)
			srv.EndSession(cluster)
			st.Remove(cluster)
		}}).SetupWithManager(mgr),
		(&persist.Follower{Client: mgr.GetClient(), Store: st, Started: started, EndStream: srv.EndStaleSession}).SetupWithManager(mgr),
	)
}

// setupProbes adds the liveness and readiness checks.
func setupProbes(mgr manager.Manager) error {
	return errors.Join(
		mgr.AddHealthzCheck("ping", healthz.Ping),
		mgr.AddReadyzCheck("ping", healthz.Ping),
	)
}

// leaderWork is the leader's work, started afresh in every term: publishing
// placement scores, and a first look at every cluster (some may have gone
// silent while nobody led).
func leaderWork(publisher *scores.Publisher, persister *persist.Persister) func(manager.Manager) error {
	return func(m manager.Manager) error {
		return errors.Join(
			publisher.SetupWithManager(m),
			m.Add(manager.RunnableFunc(func(ctx context.Context) error {
				persister.LookAtEveryCluster()
				<-ctx.Done()
				return nil
			})),
		)
	}
}

// runLeaderWork runs work in each of campaign's terms, or on mgr for the life
// of the process without a campaign (the only replica).
func runLeaderWork(mgr manager.Manager, campaign *leader.Campaign, work func(manager.Manager) error) error {
	if campaign == nil {
		return work(mgr)
	}
	campaign.Setup = work
	return mgr.Add(campaign)
}
