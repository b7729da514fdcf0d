package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/internal/identity"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// Join delegates to the Joiner.
func (s *Server) Join(ctx context.Context, req *federationv1.JoinRequest) (*federationv1.JoinResponse, error) {
	return s.opts.Joiner.Join(ctx, req)
}

// Renew re-issues the caller's certificate while its cluster is accepted
// and the certificate is of its current registration.
func (s *Server) Renew(ctx context.Context, req *federationv1.RenewRequest) (*federationv1.RenewResponse, error) {
	spoke, ok := identity.SpokeFrom(ctx)
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "Renew requires a spoke client certificate")
	}
	// A certificate a Renew replaced goes on to Joiner.Renew even past its
	// overlap: there it gets a certificate only for the key of the
	// registration's current certificate (registry.RecordRenewal), so that
	// an agent that lost its renewed certificate but holds its key recovers
	// without a new bootstrap token. Every other refusal ends here.
	if err := s.admitExcept(ctx, spoke, registry.RefusedReplacedCertificate); err != nil {
		return nil, err
	}
	return s.opts.Joiner.Renew(ctx, spoke, req)
}
