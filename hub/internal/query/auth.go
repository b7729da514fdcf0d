package query

import (
	"context"
	"crypto/x509"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/imperator-federation/imperator/internal/identity"
)

// Organizations (O) of client certificates signed by the hub CA that grant a
// role in the query API. A certificate's common name names the person or
// automation for the logs.
const (
	// AdminOrganization grants every call, including the token calls.
	AdminOrganization = "imperator.tenzen-y.io:admins"
	// ViewerOrganization grants the read-only calls.
	ViewerOrganization = "imperator.tenzen-y.io:viewers"
)

// Role is what a caller may do.
type Role int

const (
	// RoleNone may call nothing.
	RoleNone Role = iota
	// RoleViewer may call the read-only queries. Spoke certificates
	// (identity.SpokeOrganization) are viewers: they can never administer
	// tokens.
	RoleViewer
	// RoleAdmin may call everything.
	RoleAdmin
)

func (r Role) String() string {
	switch r {
	case RoleViewer:
		return "viewer"
	case RoleAdmin:
		return "admin"
	default:
		return "none"
	}
}

// RoleOf is the role a verified client certificate grants. A spoke
// certificate never grants admin, even when it also lists the admin
// organization: the hub issues spoke certificates itself and a spoke must
// not be able to mint tokens for other clusters.
func RoleOf(cert *x509.Certificate) Role {
	orgs := cert.Subject.Organization
	switch {
	case slices.Contains(orgs, identity.SpokeOrganization):
		return RoleViewer
	case slices.Contains(orgs, AdminOrganization):
		return RoleAdmin
	case slices.Contains(orgs, ViewerOrganization):
		return RoleViewer
	default:
		return RoleNone
	}
}

// callerOf returns the common name and role of the verified client
// certificate of the call in ctx.
func callerOf(ctx context.Context) (string, Role, error) {
	cert, err := identity.VerifiedCertificate(ctx)
	if err != nil {
		return "", RoleNone, err
	}
	return cert.Subject.CommonName, RoleOf(cert), nil
}

// authorize refuses the call unless its caller has at least role want.
func authorize(ctx context.Context, want Role) (string, error) {
	name, got, err := callerOf(ctx)
	if err != nil {
		return "", status.Errorf(codes.Unauthenticated, "the query API requires a client certificate signed by the hub CA with organization %s or %s: %v", ViewerOrganization, AdminOrganization, err)
	}
	if got < want {
		return name, status.Errorf(codes.PermissionDenied, "%q is a %s: this call needs a %s certificate (organization %s)", name, got, want, organizationOf(want))
	}
	return name, nil
}

func organizationOf(r Role) string {
	if r == RoleAdmin {
		return AdminOrganization
	}
	return ViewerOrganization
}
