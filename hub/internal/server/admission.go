package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/internal/identity"
)

// admit asks Admit whether spoke may talk to the hub: a refusal is
// PermissionDenied with Admit's message and reason (see refusal), failing
// to decide is Unavailable.
func (s *Server) admit(ctx context.Context, spoke identity.Spoke) error {
	return s.admitExcept(ctx, spoke, "")
}

// admitExcept is admit letting a refusal for reason pass (none when empty).
func (s *Server) admitExcept(ctx context.Context, spoke identity.Spoke, reason registry.RefusalReason) error {
	err := s.opts.Admit(ctx, spoke)
	if err == nil {
		return nil
	}
	var refused *registry.RefusedError
	if !errors.As(err, &refused) {
		return status.Errorf(codes.Unavailable, "checking whether the hub accepts cluster %q: %v", spoke.Cluster, err)
	}
	if reason != "" && refused.Reason == reason {
		return nil
	}
	s.metrics.rejectedConnections.WithLabelValues(rejectNotAccepted).Inc()
	ctrl.LoggerFrom(ctx).Info("Refused spoke certificate", "reason", refused.Reason, "registration", spoke.RegistrationUID)
	return refusal(refused.Reason, spoke.Cluster, refused.Error())
}

// revokedDuring is PermissionDenied when the certificate of the call in
// ctx was revoked since the call began (authenticate checked it then).
func (s *Server) revokedDuring(ctx context.Context) error {
	if s.opts.Revoked == nil {
		return nil
	}
	cert, err := identity.VerifiedCertificate(ctx)
	if err != nil || !s.opts.Revoked(cert) {
		return nil
	}
	s.metrics.rejectedConnections.WithLabelValues(rejectRevoked).Inc()
	ctrl.LoggerFrom(ctx).Info("Ended the stream of a revoked certificate", "serial", identity.SerialOf(cert))
	return status.Errorf(codes.PermissionDenied, "client certificate %q (serial %s) was revoked", cert.Subject.CommonName, identity.SerialOf(cert))
}
