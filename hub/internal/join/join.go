package join

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/pki"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// DefaultCertificateValidity is how long a spoke client certificate is valid.
const DefaultCertificateValidity = 365 * 24 * time.Hour

// maxCSRBytes bounds the CSR a joining spoke may send.
const maxCSRBytes = 16 << 10

// Service answers the Join call.
type Service struct {
	Tokens *Tokens
	CA     *pki.CA
	// Client writes the ManagedCluster and the cluster's namespace.
	Client client.Client
	// Validity of issued certificates (DefaultCertificateValidity when zero).
	Validity time.Duration
}

// Join validates the request, consumes the token, registers the cluster and
// returns a client certificate for the CSR's key with CN = cluster name,
// bound to the registration (see identity.RegistrationURI): the UID of the
// cluster's ManagedCluster. A cluster whose ManagedCluster exists already
// (re-join, or adoption of an OCM cluster) needs a token bound to its name
// and keeps its registration; a new registration — also of a name whose
// ManagedCluster was deleted — gets a new UID, so certificates issued before
// are refused.
// Errors are gRPC status errors whose message tells the spoke's operator
// what to do.
func (s *Service) Join(ctx context.Context, req *federationv1.JoinRequest) (*federationv1.JoinResponse, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("cluster", req.GetClusterName())
	if msgs := validation.IsDNS1123Label(req.GetClusterName()); len(msgs) > 0 {
		return nil, status.Errorf(codes.InvalidArgument, "cluster_name %q: %s", req.GetClusterName(), strings.Join(msgs, "; "))
	}
	if len(req.GetCsr()) == 0 || len(req.GetCsr()) > maxCSRBytes {
		return nil, status.Errorf(codes.InvalidArgument, "csr: want a PEM certificate request of at most %d bytes", maxCSRBytes)
	}
	// Check the CSR first so that a bad one does not burn the token.
	if _, err := pki.ParseCSR(req.GetCsr()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "csr: %v", err)
	}
	registered, err := registry.Exists(ctx, s.Client, req.GetClusterName())
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "checking cluster registration: %v", err)
	}
	if err := s.Tokens.Consume(ctx, req.GetToken(), req.GetClusterName(), registered); err != nil {
		log.Info("Join refused", "reason", err.Error())
		switch {
		case errors.Is(err, ErrWrongCluster), errors.Is(err, ErrUnboundToken):
			return nil, status.Error(codes.PermissionDenied, err.Error())
		case errors.Is(err, ErrMalformedToken), errors.Is(err, ErrUnknownToken), errors.Is(err, ErrExpiredToken), errors.Is(err, ErrUsedToken):
			return nil, status.Error(codes.Unauthenticated, err.Error())
		default:
			return nil, status.Errorf(codes.Unavailable, "checking bootstrap token: %v", err)
		}
	}
	// A new name is claimed by creating its ManagedCluster, so that two joins
	// racing for it cannot both get its identity; a registered one is adopted.
	register := registry.EnsureCluster
	if !registered {
		register = registry.Register
	}
	uid, err := register(ctx, s.Client, req.GetClusterName())
	if err == nil && uid == "" {
		err = errors.New("the ManagedCluster has no UID")
	}
	var certPEM []byte
	if err == nil {
		certPEM, err = s.sign(req.GetCsr(), identity.Spoke{Cluster: req.GetClusterName(), RegistrationUID: string(uid)})
	}
	if err != nil {
		// The join did not happen: give the token back so that the spoke's
		// retry can use it.
		if releaseErr := s.Tokens.Release(ctx, req.GetToken(), req.GetClusterName()); releaseErr != nil {
			log.Error(releaseErr, "Releasing the bootstrap token of a failed join")
		}
		if errors.Is(err, registry.ErrAlreadyRegistered) {
			log.Info("Join refused", "reason", "cluster registered by another join meanwhile")
			return nil, status.Errorf(codes.PermissionDenied,
				"cluster %q was registered by another join meanwhile; joining a registered cluster needs a token bound to its name (hub token create --cluster %s)",
				req.GetClusterName(), req.GetClusterName())
		}
		return nil, status.Errorf(codes.Unavailable, "registering cluster: %v", err)
	}
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "reading issued certificate: %v", err)
	}
	log.Info("Cluster joined", "agentVersion", req.GetAgentVersion(), "registration", uid, "newRegistration", !registered, "notAfter", cert.NotAfter)
	return &federationv1.JoinResponse{
		Certificate: certPEM,
		Ca:          s.CA.CertPEM,
		NotAfter:    timestamppb.New(cert.NotAfter),
	}, nil
}

// Renew issues a new client certificate for spoke — the caller's verified
// and admitted identity, never a name from the request — for the CSR's key,
// bound to the same registration: rotating a certificate does not revoke the
// current one, which stays valid until it expires.
func (s *Service) Renew(ctx context.Context, spoke identity.Spoke, req *federationv1.RenewRequest) (*federationv1.RenewResponse, error) {
	if len(req.GetCsr()) == 0 || len(req.GetCsr()) > maxCSRBytes {
		return nil, status.Errorf(codes.InvalidArgument, "csr: want a PEM certificate request of at most %d bytes", maxCSRBytes)
	}
	if spoke.Cluster == "" || spoke.RegistrationUID == "" {
		return nil, status.Error(codes.PermissionDenied, "renewing needs a spoke certificate bound to a registration; join again with a new token")
	}
	certPEM, err := s.sign(req.GetCsr(), spoke)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "csr: %v", err)
	}
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "reading issued certificate: %v", err)
	}
	ctrl.LoggerFrom(ctx).Info("Renewed cluster certificate", "cluster", spoke.Cluster, "registration", spoke.RegistrationUID, "notAfter", cert.NotAfter)
	return &federationv1.RenewResponse{Certificate: certPEM, Ca: s.CA.CertPEM, NotAfter: timestamppb.New(cert.NotAfter)}, nil
}

// sign issues the client certificate of spoke for the CSR's key.
func (s *Service) sign(csrPEM []byte, spoke identity.Spoke) ([]byte, error) {
	validity := s.Validity
	if validity <= 0 {
		validity = DefaultCertificateValidity
	}
	uris := []*url.URL{identity.RegistrationURI(spoke.Cluster, spoke.RegistrationUID)}
	return s.CA.SignClientCSR(csrPEM, spoke.Cluster, []string{identity.SpokeOrganization}, uris, validity)
}
