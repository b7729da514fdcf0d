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

	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/internal/identity"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// federationMethod reports whether the method belongs to the Federation
// service (Join, Renew, Report).
func federationMethod(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/"+federationv1.Federation_ServiceDesc.ServiceName+"/")
}

// infrastructureMethod reports whether the method belongs to a service any
// holder of a verified certificate may call: health and reflection.
func infrastructureMethod(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/grpc.health.v1.Health/") || strings.HasPrefix(fullMethod, "/grpc.reflection.")
}

// authenticate decides every call, in one place, before its handler runs:
//   - without a verified client certificate (the anonymous server) only Join,
//     the health check and registered services' calls with a bearer token
//     get here (anonymousTap refused the rest); AuthorizeToken decides the
//     latter;
//   - a revoked certificate is refused everything (PermissionDenied);
//   - Join is open to every caller (a spoke may join again holding its old
//     certificate); Renew and Report need a spoke certificate, whose
//     admission their handlers check;
//   - a registered service's call (the Query API) needs Authorize's yes and,
//     from a spoke certificate, the spoke's admission: a deregistered,
//     paused or retired spoke reads nothing;
//   - health and reflection need a verified certificate and, from a spoke
//     certificate, its admission as the cache shows it (registry.CacheOnly:
//     a call anyone may repeat must not reach the hub cluster's API).
//
// It returns ctx with the spoke of a spoke certificate.
func (s *Server) authenticate(ctx context.Context, fullMethod string) (context.Context, error) {
	cert, err := identity.VerifiedCertificate(ctx)
	if err != nil {
		if fullMethod == federationv1.Federation_Join_FullMethodName || fullMethod == healthCheckMethod {
			return ctx, nil
		}
		if s.opts.AuthorizeToken != nil && !federationMethod(fullMethod) && !infrastructureMethod(fullMethod) && s.opts.HasToken(ctx) {
			return s.opts.AuthorizeToken(ctx, fullMethod)
		}
		// Unreachable through the router; kept so that no route around it
		// (a server built without it) serves an anonymous caller.
		s.metrics.rejectedConnections.WithLabelValues(rejectNoCertificate).Inc()
		return nil, status.Errorf(codes.Unauthenticated, "%s requires a client certificate signed by the hub CA", fullMethod)
	}
	if s.opts.Revoked != nil && s.opts.Revoked(cert) {
		s.metrics.rejectedConnections.WithLabelValues(rejectRevoked).Inc()
		s.log.Info("Refused revoked certificate", "method", fullMethod, "subject", cert.Subject.CommonName, "serial", identity.SerialOf(cert))
		return nil, status.Errorf(codes.PermissionDenied, "client certificate %q (serial %s) was revoked", cert.Subject.CommonName, identity.SerialOf(cert))
	}
	spoke, spokeErr := identity.SpokeFromCertificate(cert)
	if spokeErr == nil {
		ctx = identity.WithSpoke(ctx, spoke)
	}
	switch {
	case fullMethod == federationv1.Federation_Join_FullMethodName:
		return ctx, nil
	case infrastructureMethod(fullMethod):
		if spokeErr == nil {
			if err := s.admit(registry.CacheOnly(ctx), spoke); err != nil {
				return nil, err
			}
		}
		return ctx, nil
	case federationMethod(fullMethod):
		if spokeErr != nil {
			s.metrics.rejectedConnections.WithLabelValues(rejectBadCertificate).Inc()
			s.log.Info("Refused call without a spoke certificate", "method", fullMethod, "reason", spokeErr.Error())
			return nil, status.Errorf(codes.Unauthenticated, "%s requires a spoke client certificate signed by the hub CA: %v", fullMethod, spokeErr)
		}
		return ctx, nil
	}
	if s.opts.Authorize == nil {
		return nil, status.Errorf(codes.PermissionDenied, "%s is not served to anyone", fullMethod)
	}
	if err := s.opts.Authorize(ctx, fullMethod); err != nil {
		return nil, err
	}
	if spokeErr == nil {
		if err := s.admit(ctx, spoke); err != nil {
			return nil, err
		}
	}
	return ctx, nil
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
		s.metrics.observeCall(info.FullMethod, start, err)
		return nil, err
	}
	log := s.loggerFor(ctx, info.FullMethod)
	if info.FullMethod == federationv1.Federation_Join_FullMethodName {
		// Join reads and writes the hub cluster's API for anyone: bounded
		// in time and in how many run at once.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, JoinTimeout)
		defer cancel()
		if err := s.joins.acquire(ctx); err != nil {
			s.metrics.observeCall(info.FullMethod, start, err)
			return nil, err
		}
		defer s.joins.release()
	}
	resp, err := handler(ctrl.LoggerInto(ctx, log), req)
	code := status.Code(err)
	s.metrics.observeCall(info.FullMethod, start, err)
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
		s.metrics.requests.WithLabelValues(info.FullMethod, status.Code(err).String()).Inc()
		return err
	}
	log := s.loggerFor(ctx, info.FullMethod)
	log.V(2).Info("Stream opened")
	streamClosed := s.metrics.streamOpened(info.FullMethod, start)
	ctx, stop := s.endOnRevocation(ctx, info.FullMethod)
	err = handler(srv, authenticatedStream{ServerStream: ss, ctx: ctrl.LoggerInto(ctx, log)})
	if revokedErr := stop(); revokedErr != nil {
		err = revokedErr
	}
	code := status.Code(err)
	streamClosed(err)
	log.V(1).Info("Stream closed", "code", code.String(), "duration", time.Since(start))
	return err
}

// revocationCheckInterval is how often an open query stream (Watch) checks
// whether its certificate was revoked, or its spoke certificate's
// registration ended (deregistered or joined again), since it opened.
const revocationCheckInterval = 250 * time.Millisecond

// errRevokedDuring is the cause with which endOnRevocation ends a stream.
var errRevokedDuring = errors.New("client certificate revoked during the stream")

// endOnRevocation returns ctx for a stream of fullMethod that is cancelled
// once the stream's certificate is revoked or, for a spoke certificate,
// once the hub no longer admits it (its cluster deregistered or joined
// again: the certificate's registration is retired), and stop, which ends
// the watch and returns the refusal when it cancelled the stream. Report
// streams check between messages themselves (revokedDuring) and are ended
// on deregistration (EndSession); a Watch may send nothing for hours, so
// its certificate is checked every revocationCheckInterval: a map lookup
// and, for a spoke, an admission from the informer cache.
func (s *Server) endOnRevocation(ctx context.Context, fullMethod string) (context.Context, func() error) {
	cert, err := identity.VerifiedCertificate(ctx)
	spoke, isSpoke := identity.SpokeFrom(ctx)
	if err != nil || federationMethod(fullMethod) || (s.opts.Revoked == nil && !isSpoke) {
		return ctx, func() error { return nil }
	}
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		ticker := time.NewTicker(revocationCheckInterval)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-ticker.C:
				if s.opts.Revoked != nil && s.opts.Revoked(cert) {
					cancel(errRevokedDuring)
					return
				}
				if !isSpoke {
					continue
				}
				var refused *registry.RefusedError
				if err := s.opts.Admit(registry.CacheOnly(ctx), spoke); errors.As(err, &refused) {
					cancel(refused)
					return
				}
			}
		}
	}()
	return ctx, func() error {
		close(done)
		<-finished
		defer cancel(nil)
		var refused *registry.RefusedError
		if errors.As(context.Cause(ctx), &refused) {
			s.metrics.rejectedConnections.WithLabelValues(rejectNotAccepted).Inc()
			s.log.Info("Ended the stream of a spoke certificate the hub no longer admits", "method", fullMethod, "cluster", spoke.Cluster, "reason", refused.Reason)
			return refusal(refused.Reason, spoke.Cluster, refused.Error())
		}
		if !errors.Is(context.Cause(ctx), errRevokedDuring) {
			return nil
		}
		s.metrics.rejectedConnections.WithLabelValues(rejectRevoked).Inc()
		s.log.Info("Ended the stream of a revoked certificate", "method", fullMethod, "subject", cert.Subject.CommonName, "serial", identity.SerialOf(cert))
		return status.Errorf(codes.PermissionDenied, "client certificate %q (serial %s) was revoked", cert.Subject.CommonName, identity.SerialOf(cert))
	}
}
