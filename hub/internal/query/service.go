package query

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/hub/internal/capacity"
	"github.com/imperator-federation/imperator/hub/internal/holds"
	"github.com/imperator-federation/imperator/hub/internal/join"
	"github.com/imperator-federation/imperator/hub/internal/store"
	"github.com/imperator-federation/imperator/hub/internal/versionskew"
	"github.com/imperator-federation/imperator/internal/version"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// TokenAdmin manages bootstrap tokens; *join.Tokens implements it.
type TokenAdmin interface {
	Create(ctx context.Context, opts join.CreateOptions) (string, join.TokenInfo, error)
	List(ctx context.Context) ([]join.TokenInfo, error)
	Revoke(ctx context.Context, id string) error
}

// Service implements queryv1.QueryServer. It is also a controller-runtime
// Runnable: when its manager stops, open Watch streams end so that the gRPC
// server can stop gracefully.
type Service struct {
	queryv1.UnimplementedQueryServer

	store *store.Store
	// tokens is nil when the hub administers no tokens.
	tokens *Tokens
	clock  clock.PassiveClock
	watch  *broadcaster
	// usage is computed once per cluster value and shared by every Watch
	// stream and GetUsage call.
	usage capacity.UsageCache
	// holds runs fleet holds (SetHolds); nil: the hold calls answer
	// Unimplemented.
	holds *holds.Coordinator
	// registry deletes ManagedClusters (SetRegistry); nil:
	// DeregisterCluster answers Unimplemented.
	registry client.Client
	// hubVersion is this replica's release, which each cluster's agent
	// version is held to (version_skew).
	hubVersion string
}

// New returns the service over st; it registers a change listener on st, so
// call it before the hub starts serving. tokens may be nil, then the token
// calls answer Unimplemented.
func New(st *store.Store, tokens TokenAdmin, clk clock.PassiveClock) *Service {
	if clk == nil {
		clk = clock.RealClock{}
	}
	s := &Service{store: st, clock: clk, watch: newBroadcaster(), hubVersion: version.Get().Version}
	if tokens != nil {
		s.tokens = NewTokens(tokens)
	}
	st.OnChange(func(cluster string) {
		if _, ok := st.Get(cluster); !ok {
			s.usage.Forget(cluster)
		}
	})
	st.OnChange(s.watch.publish)
	return s
}

// Register registers the service on a gRPC server.
func (s *Service) Register(r grpc.ServiceRegistrar) { queryv1.RegisterQueryServer(r, s) }

// NeedLeaderElection is false: every hub replica answers queries.
func (s *Service) NeedLeaderElection() bool { return false }

// Start blocks until ctx is done, then ends every open Watch stream.
func (s *Service) Start(ctx context.Context) error {
	<-ctx.Done()
	s.watch.close()
	return nil
}

// ListClusters implements queryv1.QueryServer.
func (s *Service) ListClusters(ctx context.Context, _ *queryv1.ListClustersRequest) (*queryv1.ListClustersResponse, error) {
	if _, err := authorize(ctx, RoleViewer); err != nil {
		return nil, err
	}
	now := s.clock.Now()
	clusters := s.store.List()
	resp := &queryv1.ListClustersResponse{Clusters: make([]*queryv1.Cluster, 0, len(clusters))}
	for _, c := range clusters {
		resp.Clusters = append(resp.Clusters, s.clusterInfo(c, now))
	}
	return resp, nil
}

// ListMachines implements queryv1.QueryServer.
func (s *Service) ListMachines(ctx context.Context, req *queryv1.ListMachinesRequest) (*queryv1.ListMachinesResponse, error) {
	if _, err := authorize(ctx, RoleViewer); err != nil {
		return nil, err
	}
	filter, err := validateListMachines(req)
	if err != nil {
		return nil, err
	}
	return &queryv1.ListMachinesResponse{MachineTypes: capacity.Machines(s.clusters(filter.Cluster), filter)}, nil
}

// GetUsage implements queryv1.QueryServer.
func (s *Service) GetUsage(ctx context.Context, req *queryv1.GetUsageRequest) (*queryv1.GetUsageResponse, error) {
	if _, err := authorize(ctx, RoleViewer); err != nil {
		return nil, err
	}
	if err := dnsLabel("cluster", req.GetCluster()); err != nil {
		return nil, err
	}
	if req.GetCluster() != "" {
		if _, ok := s.store.Get(req.GetCluster()); !ok {
			return nil, status.Errorf(codes.NotFound, "cluster %q is not known to the hub", req.GetCluster())
		}
	}
	return capacity.Usage(s.clusters(req.GetCluster()), s.usage.Of), nil
}

// FindCapacity implements queryv1.QueryServer.
func (s *Service) FindCapacity(ctx context.Context, req *queryv1.FindCapacityRequest) (*queryv1.FindCapacityResponse, error) {
	if _, err := authorize(ctx, RoleViewer); err != nil {
		return nil, err
	}
	creq, err := validateFindCapacity(req)
	if err != nil {
		return nil, err
	}
	resp := capacity.Find(s.store.List(), creq, s.clock.Now())
	ctrl.LoggerFrom(ctx).V(1).Info("Answered capacity request", "count", creq.Count, "spread", creq.Spread, "satisfiable", resp.Satisfiable, "candidates", len(resp.Candidates))
	return resp, nil
}

// clusterInfo is the wire form of c at now, its agent's version held to
// the skew policy against this replica's.
func (s *Service) clusterInfo(c *store.Cluster, now time.Time) *queryv1.Cluster {
	info := capacity.ClusterInfo(c, now)
	info.VersionSkew = versionskew.Unsupported(s.hubVersion, c.AgentVersion)
	return info
}

// clusters returns the named cluster, or every cluster when name is empty.
func (s *Service) clusters(name string) []*store.Cluster {
	if name == "" {
		return s.store.List()
	}
	if c, ok := s.store.Get(name); ok {
		return []*store.Cluster{c}
	}
	return nil
}

// CreateToken implements queryv1.QueryServer.
func (s *Service) CreateToken(ctx context.Context, req *queryv1.CreateTokenRequest) (*queryv1.CreateTokenResponse, error) {
	caller, err := s.authorizeTokens(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := s.tokens.CreateToken(ctx, req)
	if err == nil {
		info := resp.GetInfo()
		ctrl.LoggerFrom(ctx).Info("Bootstrap token created", "caller", caller, "tokenID", info.GetId(), "boundCluster", info.GetClusterName(), "expiration", info.GetExpiration().AsTime())
	}
	return resp, err
}

// ListTokens implements queryv1.QueryServer.
func (s *Service) ListTokens(ctx context.Context, req *queryv1.ListTokensRequest) (*queryv1.ListTokensResponse, error) {
	if _, err := s.authorizeTokens(ctx); err != nil {
		return nil, err
	}
	return s.tokens.ListTokens(ctx, req)
}

// RevokeToken implements queryv1.QueryServer.
func (s *Service) RevokeToken(ctx context.Context, req *queryv1.RevokeTokenRequest) (*queryv1.RevokeTokenResponse, error) {
	caller, err := s.authorizeTokens(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := s.tokens.RevokeToken(ctx, req)
	if err == nil {
		ctrl.LoggerFrom(ctx).Info("Bootstrap token revoked", "caller", caller, "tokenID", req.GetId())
	}
	return resp, err
}

func (s *Service) authorizeTokens(ctx context.Context) (string, error) {
	caller, err := authorize(ctx, RoleAdmin)
	if err != nil {
		return "", err
	}
	if s.tokens == nil {
		return "", status.Error(codes.Unimplemented, "this hub does not administer bootstrap tokens")
	}
	return caller, nil
}

// GetVersion implements queryv1.QueryServer.
func (s *Service) GetVersion(ctx context.Context, _ *queryv1.GetVersionRequest) (*queryv1.GetVersionResponse, error) {
	if _, err := authorize(ctx, RoleViewer); err != nil {
		return nil, err
	}
	return &queryv1.GetVersionResponse{Hub: VersionOf(version.Get())}, nil
}

// VersionOf is the wire form of a build's version.
func VersionOf(v version.Info) *queryv1.Version {
	return &queryv1.Version{Version: v.Version, GitCommit: v.GitCommit, GoVersion: v.GoVersion, Platform: v.Platform}
}

// Tokens answers the token calls of the query API over a TokenAdmin: it
// validates each request, converts the answer and maps errors to status
// codes. It authorizes nobody: the Service does that for remote callers,
// and the hub binary's own token command runs it with the caller's
// kubeconfig, whose RBAC decides. Both imperatorctl token and hub token
// therefore share one implementation, from the flags to the output.
type Tokens struct {
	admin TokenAdmin
}

// NewTokens returns the token calls over admin (a *join.Tokens).
func NewTokens(admin TokenAdmin) *Tokens { return &Tokens{admin: admin} }

// CreateToken validates req and creates a bootstrap token.
func (t *Tokens) CreateToken(ctx context.Context, req *queryv1.CreateTokenRequest) (*queryv1.CreateTokenResponse, error) {
	ttl, err := validateCreateToken(req)
	if err != nil {
		return nil, err
	}
	token, info, err := t.admin.Create(ctx, join.CreateOptions{TTL: ttl, ClusterName: req.GetClusterName(), Description: req.GetDescription()})
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "creating bootstrap token: %v", err)
	}
	return &queryv1.CreateTokenResponse{Token: token, Info: tokenInfo(info)}, nil
}

// ListTokens lists the bootstrap tokens without their secrets.
func (t *Tokens) ListTokens(ctx context.Context, _ *queryv1.ListTokensRequest) (*queryv1.ListTokensResponse, error) {
	list, err := t.admin.List(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "listing bootstrap tokens: %v", err)
	}
	resp := &queryv1.ListTokensResponse{Tokens: make([]*queryv1.Token, 0, len(list))}
	for _, info := range list {
		resp.Tokens = append(resp.Tokens, tokenInfo(info))
	}
	return resp, nil
}

// RevokeToken deletes a bootstrap token; NotFound when there is none.
func (t *Tokens) RevokeToken(ctx context.Context, req *queryv1.RevokeTokenRequest) (*queryv1.RevokeTokenResponse, error) {
	if err := validateRevokeToken(req); err != nil {
		return nil, err
	}
	if err := t.admin.Revoke(ctx, req.GetId()); err != nil {
		if errors.Is(err, join.ErrUnknownToken) {
			return nil, status.Errorf(codes.NotFound, "no bootstrap token with ID %q", req.GetId())
		}
		return nil, status.Errorf(codes.Unavailable, "revoking bootstrap token: %v", err)
	}
	return &queryv1.RevokeTokenResponse{}, nil
}

func tokenInfo(t join.TokenInfo) *queryv1.Token {
	out := &queryv1.Token{Id: t.ID, ClusterName: t.ClusterName, Description: t.Description, UsedBy: t.UsedBy}
	if !t.Expiration.IsZero() {
		out.Expiration = timestamppb.New(t.Expiration)
	}
	if !t.UsedAt.IsZero() {
		out.UsedAt = timestamppb.New(t.UsedAt)
	}
	return out
}

// watchEvent builds the event of the named cluster at now.
func (s *Service) watchEvent(name string, now time.Time, initial bool) *queryv1.ClusterEvent {
	c, ok := s.store.Get(name)
	if !ok {
		return &queryv1.ClusterEvent{Type: queryv1.ClusterEventType_CLUSTER_EVENT_TYPE_REMOVED, Cluster: &queryv1.Cluster{Name: name}}
	}
	return &queryv1.ClusterEvent{
		Type:    queryv1.ClusterEventType_CLUSTER_EVENT_TYPE_UPDATED,
		Cluster: s.clusterInfo(c, now),
		Usage:   s.usage.Of(c),
		Initial: initial,
	}
}
