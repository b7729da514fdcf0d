package join

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
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

// DefaultRenewalOverlap is how long the certificate a Renew replaces stays
// good. The agent stores the renewed certificate and moves its stream to it
// at once; the overlap covers a failed write of its credentials Secret and a
// reconnect with backoff, and bounds to minutes how long a copied key of a
// renewed certificate is worth anything.
const DefaultRenewalOverlap = 10 * time.Minute

// Authority signs spokes' certificates and names the CA bundle they verify
// the hub with: a *pki.CA, or the hub's hubca.Authority, which hands out
// both CAs during a rotation.
type Authority interface {
	SignClientCSR(csrPEM []byte, commonName string, organizations []string, uris []*url.URL, validity time.Duration) ([]byte, error)
	TrustBundle() []byte
}

// Service answers the Join and Renew calls.
type Service struct {
	Tokens *Tokens
	CA     Authority
	// Client writes the ManagedCluster and the cluster's namespace.
	Client client.Client
	// Validity of issued certificates (DefaultCertificateValidity when zero).
	Validity time.Duration
	// HubNamespace is the hub's own namespace, a name no cluster may take.
	HubNamespace string
	// RenewalOverlap is how long a renewed certificate stays good
	// (DefaultRenewalOverlap when zero).
	RenewalOverlap time.Duration
	// Clock is the time of renewal overlaps and rates (the real clock when nil).
	Clock clock.PassiveClock
	// RecordWritten, when set, is told the cluster and the new
	// resourceVersion of every write of a registration's certificate record
	// (registry.RecordJoin, registry.RecordRenewal), before the Join or
	// Renew is answered: the hub wires its registry.Admitter's Wrote, so
	// that a certificate this answer retires is not admitted by a cache
	// that does not show the write yet.
	RecordWritten func(cluster, resourceVersion string)

	// renewals holds a cluster's Renew budget (*rate.Limiter), by name.
	renewalsMu sync.Mutex
	renewals   *lru.Cache
}

// reservedPrefixes and reservedNames are cluster names no join may take:
// Kubernetes' and OCM's own namespaces, which a registration would adopt.
var (
	reservedPrefixes = []string{"kube-", "open-cluster-management"}
	reservedNames    = []string{"default"}
)

// ReservedName says why cluster may not be joined, or "" when it may.
func ReservedName(cluster, hubNamespace string) string {
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(cluster, p) {
			return fmt.Sprintf("names starting with %q are reserved for the system's own namespaces", p)
		}
	}
	if slices.Contains(reservedNames, cluster) {
		return "the name is reserved for the system's own namespace"
	}
	if cluster == hubNamespace {
		return "the name is the hub's own namespace"
	}
	return ""
}

// Join validates the request, consumes the token, registers the cluster and
// returns a client certificate for the CSR's key with CN = cluster name,
// bound to the registration (see identity.RegistrationURI): the UID of the
// cluster's ManagedCluster. A cluster whose ManagedCluster exists already
// (re-join, or adoption of an OCM cluster) needs a token bound to its name
// and keeps its registration; a new registration — also of a name whose
// ManagedCluster was deleted — gets a new UID. Either way the issued
// certificate is recorded as the registration's only good one
// (registry.RecordJoin): every certificate issued for the name before is
// retired.
//
// Everything that needs no API read is checked first: the token's format,
// the name, the CSR. A retry with the same token and the same key within
// JoinRetryWindow is answered again, only while the registration the first
// join made, recorded in the token, is the cluster's (see
// Tokens.ConsumeForKey and Tokens.BindRegistration).
//
// Errors are gRPC status errors whose message tells the spoke's operator
// what to do.
func (s *Service) Join(ctx context.Context, req *federationv1.JoinRequest) (*federationv1.JoinResponse, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("cluster", req.GetClusterName())
	csr, err := s.checkJoinRequest(req)
	if err != nil {
		return nil, err
	}
	registered, err := registry.Exists(ctx, s.Client, req.GetClusterName())
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "checking cluster registration: %v", err)
	}
	use, err := s.Tokens.ConsumeForKey(ctx, req.GetToken(), req.GetClusterName(), KeySHA256(csr.RawSubjectPublicKeyInfo), registered)
	if err != nil {
		log.Info("Join refused", "reason", err.Error())
		return nil, tokenRefusal(err)
	}
	uid, err := s.registration(ctx, req, use, registered)
	registeredNow := err == nil
	if registeredNow && !use.Retry {
		// Before any certificate is issued, so that a retry of this join is
		// answered for this registration only (a failure here leaves the
		// token used and unbound: its retry is refused, and the spoke needs
		// a new token).
		err = s.Tokens.BindRegistration(ctx, req.GetToken(), req.GetClusterName(), uid)
	}
	var (
		certPEM []byte
		cert    *x509.Certificate
	)
	if err == nil {
		certPEM, cert, err = s.issue(ctx, req, uid)
	}
	if err != nil {
		// The join did not happen. Before the registration exists, the
		// token is given back so that the spoke's retry can use it. Once it
		// exists, the token stays used, by this key: the spoke's retry with
		// the same key is answered (ConsumeForKey), whereas a released
		// unbound token could not join the now registered name.
		if !use.Retry && !registeredNow {
			if releaseErr := s.Tokens.Release(ctx, req.GetToken(), req.GetClusterName()); releaseErr != nil {
				log.Error(releaseErr, "Releasing the bootstrap token of a failed join")
			}
		}
		return nil, joinRefusal(ctx, req.GetClusterName(), err)
	}
	log.Info("Cluster joined", "agentVersion", req.GetAgentVersion(), "registration", uid, "newRegistration", !registered, "retry", use.Retry,
		"serial", identity.SerialOf(cert), "notAfter", cert.NotAfter)
	return &federationv1.JoinResponse{
		Certificate: certPEM,
		Ca:          s.CA.TrustBundle(),
		NotAfter:    timestamppb.New(cert.NotAfter),
	}, nil
}

// checkJoinRequest checks everything of a Join that needs no API read: the
// token's format, the cluster name, the CSR (first, so that a bad one does
// not burn the token).
func (s *Service) checkJoinRequest(req *federationv1.JoinRequest) (*x509.CertificateRequest, error) {
	if _, _, err := ParseToken(req.GetToken()); err != nil {
		return nil, status.Errorf(codes.Unauthenticated, "token: %v", err)
	}
	if msgs := validation.IsDNS1123Label(req.GetClusterName()); len(msgs) > 0 {
		return nil, status.Errorf(codes.InvalidArgument, "cluster_name %q: %s", req.GetClusterName(), strings.Join(msgs, "; "))
	}
	if why := ReservedName(req.GetClusterName(), s.HubNamespace); why != "" {
		return nil, status.Errorf(codes.InvalidArgument, "cluster_name %q: %s", req.GetClusterName(), why)
	}
	if len(req.GetCsr()) == 0 || len(req.GetCsr()) > maxCSRBytes {
		return nil, status.Errorf(codes.InvalidArgument, "csr: want a PEM certificate request of at most %d bytes", maxCSRBytes)
	}
	csr, err := pki.ParseCSR(req.GetCsr())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "csr: %v", err)
	}
	return csr, nil
}

// tokenRefusal is the status of a token ConsumeForKey refused.
func tokenRefusal(err error) error {
	switch {
	case errors.Is(err, ErrWrongCluster), errors.Is(err, ErrUnboundToken):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, ErrMalformedToken), errors.Is(err, ErrUnknownToken), errors.Is(err, ErrExpiredToken), errors.Is(err, ErrUsedToken):
		return status.Error(codes.Unauthenticated, err.Error())
	default:
		return status.Errorf(codes.Unavailable, "checking bootstrap token: %v", err)
	}
}

// registration returns the UID of the registration the join is for: the
// one a retried join made (which the token recorded, and which must still
// be the cluster's), the existing one, or a new one (a new name is claimed
// by creating its ManagedCluster, so that two joins racing for it cannot
// both get its identity).
func (s *Service) registration(ctx context.Context, req *federationv1.JoinRequest, use Use, registered bool) (types.UID, error) {
	var (
		uid types.UID
		err error
	)
	switch {
	case use.Retry:
		uid, err = registeredUID(ctx, s.Client, req.GetClusterName())
		switch {
		case err != nil:
		case use.RegistrationUID == "":
			err = errNoRecordedRegistration
		case uid != use.RegistrationUID:
			err = &registry.RefusedError{Reason: registry.RefusedEarlierRegistration, Cluster: req.GetClusterName()}
		}
	case registered:
		uid, err = registry.EnsureCluster(ctx, s.Client, req.GetClusterName())
	default:
		uid, err = registry.Register(ctx, s.Client, req.GetClusterName())
	}
	if err == nil && uid == "" {
		err = errors.New("the ManagedCluster has no UID")
	}
	return uid, err
}

// issue signs the join's CSR for the registration uid and records the
// certificate as the registration's only good one.
func (s *Service) issue(ctx context.Context, req *federationv1.JoinRequest, uid types.UID) ([]byte, *x509.Certificate, error) {
	certPEM, cert, err := s.sign(req.GetCsr(), identity.Spoke{Cluster: req.GetClusterName(), RegistrationUID: string(uid)})
	if err != nil {
		return nil, nil, err
	}
	written, err := registry.RecordJoin(ctx, s.Client, req.GetClusterName(), uid, identity.SerialOf(cert), registry.KeyDigest(cert.RawSubjectPublicKeyInfo), cert.NotBefore)
	if err != nil {
		return nil, nil, err
	}
	s.recordWritten(req.GetClusterName(), written)
	return certPEM, cert, nil
}

// joinRefusal is the status of a join that failed after the token was
// taken, saying what the spoke's operator should do.
func joinRefusal(ctx context.Context, cluster string, err error) error {
	log := ctrl.LoggerFrom(ctx).WithValues("cluster", cluster)
	var refused *registry.RefusedError
	switch {
	case errors.Is(err, registry.ErrAlreadyRegistered):
		log.Info("Join refused", "reason", "cluster registered by another join meanwhile")
		return status.Errorf(codes.PermissionDenied,
			"cluster %q was registered by another join meanwhile; joining a registered cluster needs a token bound to its name (hub token create --cluster %s)",
			cluster, cluster)
	case errors.Is(err, errNoRecordedRegistration):
		log.Info("Join refused", "reason", err.Error())
		return status.Errorf(codes.PermissionDenied, "cluster %q: %v; ask the platform team for a new token", cluster, err)
	case errors.As(err, &refused):
		log.Info("Join refused", "reason", err.Error())
		return status.Errorf(codes.PermissionDenied, "cluster %q was deregistered or registered again since this token was used: %v; ask the platform team for a new token", cluster, err)
	}
	return status.Errorf(codes.Unavailable, "registering cluster: %v", err)
}

// errNoRecordedRegistration refuses the retry of a join that failed before
// recording its registration in the token: the retry cannot tell that
// registration from a later one.
var errNoRecordedRegistration = errors.New("the first join with this token did not finish recording its registration, so its retry is not answered")

// registeredUID is the UID of cluster's ManagedCluster, which must exist.
func registeredUID(ctx context.Context, c client.Reader, cluster string) (types.UID, error) {
	var mc clusterv1.ManagedCluster
	if err := c.Get(ctx, client.ObjectKey{Name: cluster}, &mc); err != nil {
		if apierrors.IsNotFound(err) {
			return "", &registry.RefusedError{Reason: registry.RefusedNotRegistered, Cluster: cluster}
		}
		return "", fmt.Errorf("reading ManagedCluster %q: %w", cluster, err)
	}
	if !mc.DeletionTimestamp.IsZero() {
		return "", &registry.RefusedError{Reason: registry.RefusedNotRegistered, Cluster: cluster}
	}
	return mc.UID, nil
}

// Renew issues a new client certificate for spoke — the caller's verified
// and admitted identity, never a name from the request — for the CSR's key,
// bound to the same registration, and records it as the registration's
// current certificate (registry.RecordRenewal): the caller's certificate
// stays good for RenewalOverlap, then is retired. Only the current
// certificate may renew, or the replaced one retrying within its overlap,
// or a retired one of the registration asking for the current certificate's
// own key (see registry.RecordRenewal).
func (s *Service) Renew(ctx context.Context, spoke identity.Spoke, req *federationv1.RenewRequest) (*federationv1.RenewResponse, error) {
	if len(req.GetCsr()) == 0 || len(req.GetCsr()) > maxCSRBytes {
		return nil, status.Errorf(codes.InvalidArgument, "csr: want a PEM certificate request of at most %d bytes", maxCSRBytes)
	}
	if spoke.Cluster == "" || spoke.RegistrationUID == "" {
		return nil, status.Error(codes.PermissionDenied, "renewing needs a spoke certificate bound to a registration; join again with a new token")
	}
	if _, err := pki.ParseCSR(req.GetCsr()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "csr: %v", err)
	}
	clk := s.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	if !s.renewalAllowed(spoke.Cluster, clk.Now()) {
		return nil, status.Errorf(codes.ResourceExhausted,
			"cluster %q renewed its certificate %d times within moments: at most one renewal per %s is answered after that; retry later",
			spoke.Cluster, RenewBurstPerCluster, RenewIntervalPerCluster)
	}
	certPEM, cert, err := s.sign(req.GetCsr(), spoke)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "issuing certificate: %v", err)
	}
	overlap := s.RenewalOverlap
	if overlap <= 0 {
		overlap = DefaultRenewalOverlap
	}
	written, err := registry.RecordRenewal(ctx, s.Client, spoke.Cluster, types.UID(spoke.RegistrationUID), spoke,
		identity.SerialOf(cert), registry.KeyDigest(cert.RawSubjectPublicKeyInfo), clk.Now(), overlap)
	if err != nil {
		var refused *registry.RefusedError
		if errors.As(err, &refused) {
			return nil, status.Error(codes.PermissionDenied, err.Error())
		}
		return nil, status.Errorf(codes.Unavailable, "recording the renewed certificate: %v", err)
	}
	s.recordWritten(spoke.Cluster, written)
	ctrl.LoggerFrom(ctx).Info("Renewed cluster certificate", "cluster", spoke.Cluster, "registration", spoke.RegistrationUID,
		"serial", identity.SerialOf(cert), "replaced", spoke.Serial, "notAfter", cert.NotAfter)
	return &federationv1.RenewResponse{Certificate: certPEM, Ca: s.CA.TrustBundle(), NotAfter: timestamppb.New(cert.NotAfter)}, nil
}

// recordWritten tells RecordWritten, if set, of a write of cluster's record.
func (s *Service) recordWritten(cluster, resourceVersion string) {
	if s.RecordWritten != nil {
		s.RecordWritten(cluster, resourceVersion)
	}
}

// Per-cluster rate of Renew: every renewal issues a certificate and writes
// the registration's record, so that a current certificate (or the one it
// replaced, within the overlap) renewing in a loop would be a write loop on
// the hub cluster's API. The agent renews at two thirds of its
// certificate's life, and again only when it lost an answer; the burst
// covers those retries and tests with certificates of seconds.
const (
	RenewBurstPerCluster    = 5
	RenewIntervalPerCluster = time.Minute
	// maxRenewingClusters bounds the clusters whose renewals are counted;
	// the least recently renewed is forgotten first.
	maxRenewingClusters = 16384
)

// renewalAllowed takes one renewal of cluster's budget at now, if any is left.
func (s *Service) renewalAllowed(cluster string, now time.Time) bool {
	s.renewalsMu.Lock()
	defer s.renewalsMu.Unlock()
	if s.renewals == nil {
		s.renewals = lru.New(maxRenewingClusters)
	}
	limiter, ok := s.renewals.Get(cluster)
	if !ok {
		limiter = rate.NewLimiter(rate.Every(RenewIntervalPerCluster), RenewBurstPerCluster)
		s.renewals.Add(cluster, limiter)
	}
	return limiter.(*rate.Limiter).AllowN(now, 1)
}

// sign issues the client certificate of spoke for the CSR's key.
func (s *Service) sign(csrPEM []byte, spoke identity.Spoke) ([]byte, *x509.Certificate, error) {
	validity := s.Validity
	if validity <= 0 {
		validity = DefaultCertificateValidity
	}
	uris := []*url.URL{identity.RegistrationURI(spoke.Cluster, spoke.RegistrationUID)}
	certPEM, err := s.CA.SignClientCSR(csrPEM, spoke.Cluster, []string{identity.SpokeOrganization}, uris, validity)
	if err != nil {
		return nil, nil, err
	}
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("reading issued certificate: %w", err)
	}
	return certPEM, cert, nil
}
