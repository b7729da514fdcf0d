// Package server is the hub's gRPC server: TLS 1.3 with client certificates,
// connections routed by whether they carry a verified one (only Join and the
// health check are served without), bounds on connections, anonymous calls
// and message sizes, keepalive enforcement and connection ageing,
// interceptors for authentication, authorization, logging and metrics,
// health and reflection, and the Federation service (Join, Renew, and the
// Report stream that feeds the store).
package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"k8s.io/utils/clock"

	"github.com/imperator-federation/imperator/hub/internal/store"
	"github.com/imperator-federation/imperator/internal/identity"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// Defaults of Options.
const (
	DefaultMaxRecvMsgBytes = 16 << 20
	DefaultMaxSendMsgBytes = 4 << 20
	DefaultShutdownTimeout = 10 * time.Second
	// keepaliveMinTime is the shortest client keepalive interval allowed;
	// clients pinging more often are disconnected.
	keepaliveMinTime = 10 * time.Second
	// maxConcurrentStreams bounds the streams of one client connection.
	maxConcurrentStreams = 64
)

// Joiner answers Join and Renew calls.
type Joiner interface {
	Join(ctx context.Context, req *federationv1.JoinRequest) (*federationv1.JoinResponse, error)
	// Renew issues a new certificate for spoke, the caller's verified and
	// admitted identity.
	Renew(ctx context.Context, spoke identity.Spoke, req *federationv1.RenewRequest) (*federationv1.RenewResponse, error)
}

// AdmitFunc decides whether spoke, the identity of a verified client
// certificate, may report and renew (registry.Admit: its ManagedCluster
// exists, has spec.hubAcceptsClient=true and is the registration the
// certificate was issued for). It returns nil, a *registry.RefusedError
// saying why not, or the error that kept it from deciding.
type AdmitFunc func(ctx context.Context, spoke identity.Spoke) error

// Options configure a Server.
type Options struct {
	// Listener to serve on; when nil the server listens on ListenAddress.
	Listener      net.Listener
	ListenAddress string
	// TLS is the server's TLS configuration (identity.ServerTLS).
	TLS   *tls.Config
	Store *store.Store
	// Clock is the hub's clock (the real one when nil): the store's, so
	// that every time the hub reads comes from one source.
	Clock   clock.PassiveClock
	Joiner  Joiner
	Admit   AdmitFunc
	Metrics *Metrics
	Log     logr.Logger
	// MaxRecvMsgBytes bounds a spoke message (a Snapshot of every Machine).
	// Anonymous calls get anonymousMaxRecvMsgBytes whatever this says.
	MaxRecvMsgBytes int
	// ShutdownTimeout bounds the graceful stop.
	ShutdownTimeout time.Duration
	// Limits bound connections and anonymous calls (DefaultLimits when zero).
	Limits Limits
	// Services register further services (the Query API) on the
	// authenticated server; Authorize decides each of their calls.
	Services []func(grpc.ServiceRegistrar)
	// Authorize decides a call of a registered Service (the Query API) by a
	// verified client certificate: nil lets it through, else a status
	// error (PermissionDenied). Required when Services are given.
	Authorize func(ctx context.Context, fullMethod string) error
	// AuthorizeToken, when set, decides a registered Service's call that
	// carries a bearer token and no client certificate (a Kubernetes
	// identity of the hub cluster, query.TokenAuthorizer): it returns the
	// call's context with its caller, else a status error. Such calls are
	// served by the anonymous server, within its limits.
	AuthorizeToken func(ctx context.Context, fullMethod string) (context.Context, error)
	// HasToken reports whether a call's metadata carries a bearer token;
	// required with AuthorizeToken.
	HasToken func(ctx context.Context) bool
	// Revoked reports whether a verified client certificate was revoked
	// (by serial); revoked certificates are refused on every call. Nil
	// revokes nothing.
	Revoked func(cert *x509.Certificate) bool
}

// Server is the hub's gRPC server, a controller-runtime Runnable.
type Server struct {
	federationv1.UnimplementedFederationServer

	opts    Options
	store   *store.Store
	metrics *Metrics
	log     logr.Logger
	// grpc serves connections with a verified client certificate,
	// anonymous the others (see listener.go).
	grpc      *grpc.Server
	anonymous *grpc.Server
	health    *health.Server
	joins     *joinLimiter

	// stopping is closed when shutdown begins; open streams end at once.
	stopping chan struct{}
	mu       sync.Mutex
	sessions map[string]*session
	// budgets are the message budgets of the clusters that reported (see
	// budgetOf).
	budgets map[string]*messageBudget
	nextID  uint64
	// holdWaiters are the RequestHold calls waiting for an answer.
	holdWaiters holdWaiters
}

// New builds the server; Start serves it.
func New(opts Options) (*Server, error) {
	opts, err := withDefaults(opts)
	if err != nil {
		return nil, err
	}
	s := &Server{
		opts:     opts,
		store:    opts.Store,
		metrics:  opts.Metrics,
		log:      opts.Log,
		health:   health.NewServer(),
		joins:    newJoinLimiter(opts.Limits),
		stopping: make(chan struct{}),
		sessions: map[string]*session{},
		budgets:  map[string]*messageBudget{},
	}
	s.grpc = s.newAuthenticatedServer()
	s.anonymous = s.newAnonymousServer()
	return s, nil
}

// withDefaults checks opts and fills in the defaults of what it leaves out.
func withDefaults(opts Options) (Options, error) {
	if opts.TLS == nil || opts.Store == nil || opts.Joiner == nil || opts.Admit == nil || opts.Metrics == nil {
		return opts, errors.New("creating hub server: TLS, Store, Joiner, Admit and Metrics are required")
	}
	if opts.MaxRecvMsgBytes <= 0 {
		opts.MaxRecvMsgBytes = DefaultMaxRecvMsgBytes
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Limits == (Limits{}) {
		opts.Limits = DefaultLimits()
	}
	if err := opts.Limits.Validate(); err != nil {
		return opts, fmt.Errorf("creating hub server: limits: %w", err)
	}
	if len(opts.Services) > 0 && opts.Authorize == nil {
		return opts, errors.New("creating hub server: Authorize is required with Services")
	}
	if opts.AuthorizeToken != nil && opts.HasToken == nil {
		return opts, errors.New("creating hub server: HasToken is required with AuthorizeToken")
	}
	return opts, nil
}

// keepaliveEnforcement is both servers' floor on clients' pings.
var keepaliveEnforcement = grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true})

// newAuthenticatedServer is the server of connections with a client
// certificate (spokes, people, automation): the Federation service, the
// query services, health and reflection.
func (s *Server) newAuthenticatedServer() *grpc.Server {
	limits := s.opts.Limits
	srv := grpc.NewServer(
		grpc.Creds(handshakenTLS{}),
		keepaliveEnforcement,
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:                  30 * time.Second,
			Timeout:               10 * time.Second,
			MaxConnectionIdle:     limits.MaxConnectionIdle,
			MaxConnectionAge:      limits.MaxConnectionAge,
			MaxConnectionAgeGrace: limits.MaxConnectionAgeGrace,
		}),
		grpc.MaxRecvMsgSize(s.opts.MaxRecvMsgBytes),
		grpc.MaxSendMsgSize(DefaultMaxSendMsgBytes),
		grpc.MaxHeaderListSize(maxHeaderListBytes),
		grpc.ConnectionTimeout(limits.HandshakeTimeout),
		// A spoke needs one stream; people and automation a few more.
		grpc.MaxConcurrentStreams(maxConcurrentStreams),
		grpc.InTapHandle(s.joinTap),
		grpc.ChainUnaryInterceptor(s.unaryInterceptor),
		grpc.ChainStreamInterceptor(s.streamInterceptor),
	)
	federationv1.RegisterFederationServer(srv, s)
	for _, register := range s.opts.Services {
		register(srv)
	}
	healthpb.RegisterHealthServer(srv, s.health)
	reflection.Register(srv)
	return srv
}

// newAnonymousServer is the server of connections without a client
// certificate: Join and the health check only (anonymousTap), small
// messages and headers, few streams, short-lived connections; and the query
// services for callers with a bearer token when tokens are authorized.
func (s *Server) newAnonymousServer() *grpc.Server {
	limits := s.opts.Limits
	srv := grpc.NewServer(
		grpc.Creds(handshakenTLS{}),
		keepaliveEnforcement,
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:                  30 * time.Second,
			Timeout:               10 * time.Second,
			MaxConnectionIdle:     limits.AnonymousIdleTimeout,
			MaxConnectionAge:      anonymousMaxConnectionAge,
			MaxConnectionAgeGrace: JoinTimeout,
		}),
		grpc.MaxRecvMsgSize(anonymousMaxRecvMsgBytes),
		grpc.MaxSendMsgSize(DefaultMaxSendMsgBytes),
		grpc.MaxHeaderListSize(anonymousMaxHeaderListBytes),
		grpc.ConnectionTimeout(limits.HandshakeTimeout),
		grpc.MaxConcurrentStreams(anonymousMaxConcurrentStreams),
		grpc.InTapHandle(s.anonymousTap),
		grpc.ChainUnaryInterceptor(s.unaryInterceptor),
		grpc.ChainStreamInterceptor(s.streamInterceptor),
	)
	federationv1.RegisterFederationServer(srv, s)
	healthpb.RegisterHealthServer(srv, s.health)
	if s.opts.AuthorizeToken != nil {
		// Callers with a bearer token and no certificate (anonymousTap
		// lets only those through to the services).
		for _, register := range s.opts.Services {
			register(srv)
		}
	}
	return srv
}

// NeedLeaderElection is false: every hub replica serves.
func (s *Server) NeedLeaderElection() bool { return false }

// Start serves until ctx is done, then ends open streams and stops
// gracefully (forcefully after the shutdown timeout).
func (s *Server) Start(ctx context.Context) error {
	lis := s.opts.Listener
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", s.opts.ListenAddress); err != nil {
			return fmt.Errorf("listening on %s: %w", s.opts.ListenAddress, err)
		}
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(federationv1.Federation_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	rt := newRouter(lis, s.opts.TLS, s.opts.Limits, s.opts.Revoked, s.metrics, s.log)
	serveErr := make(chan error, 3)
	go func() { serveErr <- rt.serve() }()
	go func() { serveErr <- s.grpc.Serve(rt.authenticated) }()
	go func() { serveErr <- s.anonymous.Serve(rt.anonymous) }()
	s.log.Info("Serving gRPC", "address", lis.Addr().String())

	var err error
	select {
	case err = <-serveErr:
		err = fmt.Errorf("serving gRPC: %w", err)
	case <-ctx.Done():
	}
	s.log.Info("Stopping gRPC server")
	s.health.Shutdown()
	close(s.stopping)
	// No new connections; those open end gracefully.
	_ = rt.close()
	stopped := make(chan struct{})
	go func() {
		s.anonymous.GracefulStop()
		s.grpc.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(s.opts.ShutdownTimeout):
		s.anonymous.Stop()
		s.grpc.Stop()
	}
	return err
}
