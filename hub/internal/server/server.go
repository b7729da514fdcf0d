// Package server is the hub's gRPC server: TLS 1.3 with spoke client
// certificates, keepalive enforcement, message-size limits, interceptors for
// authentication, logging and metrics, health and reflection, and the
// Federation service (Join, and the Report stream that feeds the store).
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

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
	TLS     *tls.Config
	Store   *store.Store
	Joiner  Joiner
	Admit   AdmitFunc
	Metrics *Metrics
	Log     logr.Logger
	// MaxRecvMsgBytes bounds a spoke message (a Snapshot of every Machine).
	MaxRecvMsgBytes int
	// ShutdownTimeout bounds the graceful stop.
	ShutdownTimeout time.Duration
	// Services register further services (the Query API) on the server.
	// They authenticate their callers themselves: see selfAuthenticated.
	Services []func(grpc.ServiceRegistrar)
}

// Server is the hub's gRPC server, a controller-runtime Runnable.
type Server struct {
	federationv1.UnimplementedFederationServer

	opts    Options
	store   *store.Store
	metrics *Metrics
	log     logr.Logger
	grpc    *grpc.Server
	health  *health.Server

	// stopping is closed when shutdown begins; open streams end at once.
	stopping chan struct{}
	mu       sync.Mutex
	sessions map[string]*session
	nextID   uint64
}

// New builds the server; Start serves it.
func New(opts Options) (*Server, error) {
	if opts.TLS == nil || opts.Store == nil || opts.Joiner == nil || opts.Admit == nil || opts.Metrics == nil {
		return nil, errors.New("creating hub server: TLS, Store, Joiner, Admit and Metrics are required")
	}
	if opts.MaxRecvMsgBytes <= 0 {
		opts.MaxRecvMsgBytes = DefaultMaxRecvMsgBytes
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	s := &Server{
		opts:     opts,
		store:    opts.Store,
		metrics:  opts.Metrics,
		log:      opts.Log,
		health:   health.NewServer(),
		stopping: make(chan struct{}),
		sessions: map[string]*session{},
	}
	s.grpc = grpc.NewServer(
		grpc.Creds(credentials.NewTLS(opts.TLS)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.MaxRecvMsgSize(opts.MaxRecvMsgBytes),
		grpc.MaxSendMsgSize(DefaultMaxSendMsgBytes),
		grpc.ConnectionTimeout(10*time.Second),
		// A spoke needs one stream; people and automation a few more.
		grpc.MaxConcurrentStreams(maxConcurrentStreams),
		grpc.ChainUnaryInterceptor(s.unaryInterceptor),
		grpc.ChainStreamInterceptor(s.streamInterceptor),
	)
	federationv1.RegisterFederationServer(s.grpc, s)
	for _, register := range opts.Services {
		register(s.grpc)
	}
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	return s, nil
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
	serveErr := make(chan error, 1)
	go func() { serveErr <- s.grpc.Serve(lis) }()
	s.log.Info("Serving gRPC", "address", lis.Addr().String())

	select {
	case err := <-serveErr:
		return fmt.Errorf("serving gRPC: %w", err)
	case <-ctx.Done():
	}
	s.log.Info("Stopping gRPC server")
	s.health.Shutdown()
	close(s.stopping)
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(s.opts.ShutdownTimeout):
		s.grpc.Stop()
	}
	return nil
}
