package server

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/imperator-federation/imperator/internal/identity"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// Methods callable without a client certificate: Join (that is how a spoke
// gets one) and the health service (probes).
func anonymousAllowed(fullMethod string) bool {
	return fullMethod == federationv1.Federation_Join_FullMethodName ||
		strings.HasPrefix(fullMethod, "/grpc.health.v1.Health/")
}

// selfAuthenticated reports whether the method belongs to a service that
// authorizes its callers itself: the Query API admits people and automation
// (viewer and admin certificates), not only spokes.
func selfAuthenticated(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/imperator.query.v1.Query/")
}

// authenticate puts the spoke of the verified client certificate into ctx,
// or refuses the call with Unauthenticated.
func (s *Server) authenticate(ctx context.Context, fullMethod string) (context.Context, error) {
	spoke, err := identity.SpokeFromPeer(ctx)
	if err == nil {
		return identity.WithSpoke(ctx, spoke), nil
	}
	if anonymousAllowed(fullMethod) || selfAuthenticated(fullMethod) {
		return ctx, nil
	}
	reason := rejectBadCertificate
	if errors.Is(err, identity.ErrNoClientCertificate) {
		reason = rejectNoCertificate
	}
	s.metrics.rejectedConnections.WithLabelValues(reason).Inc()
	s.log.Info("Refused call without a spoke certificate", "method", fullMethod, "reason", err.Error())
	return nil, status.Errorf(codes.Unauthenticated, "%s requires a spoke client certificate signed by the hub CA: %v", fullMethod, err)
}

func (s *Server) loggerFor(ctx context.Context, fullMethod string) logr.Logger {
	log := s.log.WithValues("method", fullMethod)
	if spoke, ok := identity.SpokeFrom(ctx); ok {
		log = log.WithValues("cluster", spoke.Cluster)
	}
	return log
}

func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	ctx, err := s.authenticate(ctx, info.FullMethod)
	if err != nil {
		s.metrics.requests.WithLabelValues(info.FullMethod, codes.Unauthenticated.String()).Inc()
		return nil, err
	}
	log := s.loggerFor(ctx, info.FullMethod)
	resp, err := handler(ctrl.LoggerInto(ctx, log), req)
	code := status.Code(err)
	s.metrics.requests.WithLabelValues(info.FullMethod, code.String()).Inc()
	log.V(2).Info("Handled call", "code", code.String(), "duration", time.Since(start))
	return resp, err
}

// authenticatedStream carries the context with the authenticated cluster.
type authenticatedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (a authenticatedStream) Context() context.Context { return a.ctx }

func (s *Server) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	ctx, err := s.authenticate(ss.Context(), info.FullMethod)
	if err != nil {
		s.metrics.requests.WithLabelValues(info.FullMethod, codes.Unauthenticated.String()).Inc()
		return err
	}
	log := s.loggerFor(ctx, info.FullMethod)
	log.V(2).Info("Stream opened")
	err = handler(srv, authenticatedStream{ServerStream: ss, ctx: ctrl.LoggerInto(ctx, log)})
	code := status.Code(err)
	s.metrics.requests.WithLabelValues(info.FullMethod, code.String()).Inc()
	log.V(1).Info("Stream closed", "code", code.String(), "duration", time.Since(start))
	return err
}
