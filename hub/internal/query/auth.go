package query

import (
	"context"
	"crypto/x509"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/imperator-federation/imperator/internal/identity"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// Lifetimes of the certificates people and automation use (hub client-cert).
const (
	// DefaultClientCertValidity is the default lifetime of a viewer or admin
	// certificate.
	DefaultClientCertValidity = 90 * 24 * time.Hour
	// MaxClientCertValidity is the longest lifetime of a viewer or admin
	// certificate: hub client-cert issues none longer, and the query API
	// refuses one that is (issued by other means from the hub CA).
	MaxClientCertValidity = 365 * 24 * time.Hour
	// notBeforeSkew is how far the hub backdates NotBefore (pki).
	notBeforeSkew = 5 * time.Minute
)

// methodRoles is the role each Query method needs. A method missing here is
// refused to everyone: a new method must be given its role.
var methodRoles = map[string]Role{
	queryv1.Query_ListClusters_FullMethodName:      RoleViewer,
	queryv1.Query_ListMachines_FullMethodName:      RoleViewer,
	queryv1.Query_GetUsage_FullMethodName:          RoleViewer,
	queryv1.Query_FindCapacity_FullMethodName:      RoleViewer,
	queryv1.Query_Watch_FullMethodName:             RoleViewer,
	queryv1.Query_CreateToken_FullMethodName:       RoleAdmin,
	queryv1.Query_ListTokens_FullMethodName:        RoleAdmin,
	queryv1.Query_RevokeToken_FullMethodName:       RoleAdmin,
	queryv1.Query_DeregisterCluster_FullMethodName: RoleAdmin,
	queryv1.Query_GetVersion_FullMethodName:        RoleViewer,
	queryv1.Query_CreateHold_FullMethodName:        RoleHolder,
	queryv1.Query_GetHold_FullMethodName:           RoleViewer,
	queryv1.Query_ListHolds_FullMethodName:         RoleViewer,
	queryv1.Query_ReleaseHold_FullMethodName:       RoleHolder,
}

// Authorize decides a Query call by the verified client certificate in ctx,
// before the request is handed to its handler (the hub server's
// interceptor calls it for every method of the service): Unauthenticated
// without a certificate, PermissionDenied when its role is short of the
// method's, when the method has no role, or when a viewer or admin
// certificate lives longer than MaxClientCertValidity. A spoke
// certificate's admission (its cluster still registered and accepted) is
// the server's to check.
func Authorize(ctx context.Context, fullMethod string) error {
	want, ok := methodRoles[fullMethod]
	if !ok {
		return status.Errorf(codes.PermissionDenied, "%s is granted to no role", fullMethod)
	}
	cert, err := identity.VerifiedCertificate(ctx)
	if err != nil {
		return status.Errorf(codes.Unauthenticated, "the query API requires a client certificate signed by the hub CA with organization %s or %s: %v", ViewerOrganization, AdminOrganization, err)
	}
	if !slices.Contains(cert.Subject.Organization, identity.SpokeOrganization) {
		if life := cert.NotAfter.Sub(cert.NotBefore); life > MaxClientCertValidity+notBeforeSkew {
			return status.Errorf(codes.PermissionDenied, "client certificate %q is valid for %s, longer than the %s the hub accepts; issue a new one with hub client-cert",
				cert.Subject.CommonName, life.Round(time.Hour), MaxClientCertValidity)
		}
	}
	_, err = authorize(ctx, want)
	return err
}

// Organizations (O) of client certificates signed by the hub CA that grant a
// role in the query API. A certificate's common name names the person or
// automation for the logs.
const (
	// AdminOrganization grants every call, including the token calls.
	AdminOrganization = "imperator.tenzen-y.io:admins"
	// ViewerOrganization grants the read-only calls.
	ViewerOrganization = "imperator.tenzen-y.io:viewers"
	// HolderOrganization grants the read-only calls and the fleet hold
	// calls (CreateHold, ReleaseHold), not the token calls.
	HolderOrganization = "imperator.tenzen-y.io:holders"
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
	// RoleHolder may also create and release fleet holds.
	RoleHolder
	// RoleAdmin may call everything.
	RoleAdmin
)

func (r Role) String() string {
	switch r {
	case RoleViewer:
		return "viewer"
	case RoleHolder:
		return "holder"
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
	case slices.Contains(orgs, HolderOrganization):
		return RoleHolder
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

// Kinds of identity a hold's creator is recorded with: a certificate's
// common name and a Kubernetes user name live in two name spaces, so that a
// certificate named alice is not the Kubernetes user alice.
const (
	CertificateCreator = "certificate:"
	KubernetesCreator  = "kubernetes:"
	// maxCreatorBytes is the FleetHold's spec.creator limit.
	maxCreatorBytes = 512
)

// authorize refuses the call unless its caller has at least role want, and
// returns the caller's identity with its kind (CertificateCreator or
// KubernetesCreator). A caller with a bearer token was decided by
// TokenAuthorizer.Authorize before the handler ran (the hold writes by their
// handler, per namespace).
func authorize(ctx context.Context, want Role) (string, error) {
	if caller, ok := tokenCallerOf(ctx); ok {
		return KubernetesCreator + caller.user.name, nil
	}
	name, got, err := callerOf(ctx)
	if err != nil {
		return "", status.Errorf(codes.Unauthenticated, "the query API requires a client certificate signed by the hub CA with organization %s or %s: %v", ViewerOrganization, AdminOrganization, err)
	}
	if got < want {
		return name, status.Errorf(codes.PermissionDenied, "%q is a %s: this call needs a %s certificate (organization %s)", name, got, want, organizationOf(want))
	}
	return CertificateCreator + name, nil
}

// createdBy reports whether a hold whose spec.creator is creator was
// created by the certificate named commonName. A creator without a kind
// was recorded before identities carried theirs, when only certificates
// created holds.
func createdBy(creator, commonName string) bool {
	if creator == CertificateCreator+commonName {
		return true
	}
	kinded := strings.HasPrefix(creator, CertificateCreator) || strings.HasPrefix(creator, KubernetesCreator)
	return !kinded && creator == commonName
}

func organizationOf(r Role) string {
	switch r {
	case RoleAdmin:
		return AdminOrganization
	case RoleHolder:
		return HolderOrganization + " or " + AdminOrganization
	}
	return ViewerOrganization
}
