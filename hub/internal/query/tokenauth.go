package query

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/lru"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// FleetGroup is the API group of the virtual resources the query API
// authorizes Kubernetes identities on. Nothing is stored under it: Roles
// and ClusterRoles name its resources so that the hub cluster's RBAC says
// who may call what.
const FleetGroup = "fleet.imperator.tenzen-y.io"

// The virtual resources of FleetGroup.
const (
	ResourceClusters = "clusters"
	ResourceMachines = "machines"
	ResourceUsage    = "usage"
	ResourceCapacity = "capacity"
	ResourceHolds    = "holds"
	ResourceTokens   = "tokens"
)

// access is the one SubjectAccessReview a Query method needs. namespaced
// methods (the hold writes) need get on the resource across the fleet before
// their handler, which knows the namespaces, asks verb in each namespace of
// the hold.
type access struct {
	verb, resource string
	namespaced     bool
}

// methodAccess is what each Query method asks of the hub cluster's RBAC for
// a caller with a bearer token. A method missing here is refused to every
// token: a new method must be given its access (the test of this table
// fails until it is).
var methodAccess = map[string]access{
	queryv1.Query_ListClusters_FullMethodName:      {verb: "list", resource: ResourceClusters},
	queryv1.Query_Watch_FullMethodName:             {verb: "watch", resource: ResourceClusters},
	queryv1.Query_GetVersion_FullMethodName:        {verb: "get", resource: ResourceClusters},
	queryv1.Query_ListMachines_FullMethodName:      {verb: "list", resource: ResourceMachines},
	queryv1.Query_GetUsage_FullMethodName:          {verb: "get", resource: ResourceUsage},
	queryv1.Query_FindCapacity_FullMethodName:      {verb: "get", resource: ResourceCapacity},
	queryv1.Query_GetHold_FullMethodName:           {verb: "get", resource: ResourceHolds},
	queryv1.Query_ListHolds_FullMethodName:         {verb: "list", resource: ResourceHolds},
	queryv1.Query_CreateHold_FullMethodName:        {verb: "create", resource: ResourceHolds, namespaced: true},
	queryv1.Query_ReleaseHold_FullMethodName:       {verb: "delete", resource: ResourceHolds, namespaced: true},
	queryv1.Query_CreateToken_FullMethodName:       {verb: "create", resource: ResourceTokens},
	queryv1.Query_ListTokens_FullMethodName:        {verb: "list", resource: ResourceTokens},
	queryv1.Query_RevokeToken_FullMethodName:       {verb: "delete", resource: ResourceTokens},
	queryv1.Query_DeregisterCluster_FullMethodName: {verb: "delete", resource: ResourceClusters},
}

// Defaults of TokenAuthOptions.
const (
	DefaultTokenAuthTTL = 10 * time.Second
	// MaxTokenAuthTTL bounds both TTLs: a revocation must be honoured
	// within minutes.
	MaxTokenAuthTTL      = 10 * time.Minute
	DefaultTokenAuthSize = 4096
	// maxBearerTokenBytes bounds the token sent to the API server: service
	// account and OIDC tokens are a few kilobytes, and token calls come
	// through the anonymous server, whose headers are at most 8KiB.
	maxBearerTokenBytes = 7 << 10
	// DefaultTokenReviewRate and DefaultTokenReviewBurst bound the
	// TokenReviews of tokens the caches do not know, of all callers
	// together: token calls come through the anonymous server, anyone can
	// send a new random token with each call, and the hub's client has no
	// client-side rate limit (its own writes and leases share the API
	// server's fairness share with these reviews). A known token, accepted
	// or refused, costs no review within the TTL.
	DefaultTokenReviewRate  = 50
	DefaultTokenReviewBurst = 100
	// DefaultSourceTokenReviewRate and DefaultSourceTokenReviewBurst bound
	// them per source (an IPv4 address, an IPv6 /64), so that one source
	// cannot take every review of the hub: a person presents one token per
	// TTL, a NAT of many people a few.
	DefaultSourceTokenReviewRate  = 5
	DefaultSourceTokenReviewBurst = 20
	// DefaultUserAccessReviewRate and DefaultUserAccessReviewBurst bound
	// the SubjectAccessReviews one authenticated identity's calls cause
	// beyond the decision cache: CreateHold asks one per namespace it
	// names, any namespace, so that a viewer naming a new namespace at each
	// call would otherwise have the hub ask the API server at its calls'
	// rate. The burst covers a hold of maxNamespaces namespaces.
	DefaultUserAccessReviewRate  = 20
	DefaultUserAccessReviewBurst = 2 * maxNamespaces
	// maxReviewSources bounds the sources whose review rate is tracked; the
	// least recently seen is forgotten first.
	maxReviewSources = 16384
	// reviewTimeout bounds one TokenReview or SubjectAccessReview, whatever
	// the caller's deadline (a call may have none).
	reviewTimeout = 10 * time.Second
	// acceptedMemory is how long a token the API server accepted is
	// remembered, after its authentication's TTL, as one whose next
	// reviews skip the review rates: a flood of unknown tokens must not
	// lock out the people already using the hub, whose tokens are reviewed
	// again every TTL.
	acceptedMemory = time.Hour
)

// errReviewUnavailable is what a caller whose token could not be reviewed
// reads, whatever the hub cluster's API server answered.
const errReviewUnavailable = "the hub could not authenticate the bearer token with its cluster's API server now: retry later (the hub's log says why)"

// TokenAuthOptions configure a TokenAuthorizer.
type TokenAuthOptions struct {
	// TTL is how long a token's authentication is reused
	// (DefaultTokenAuthTTL when zero): a revoked token or a deleted
	// ServiceAccount is honoured within it.
	TTL time.Duration
	// DecisionTTL is how long an authorization decision is reused
	// (DefaultTokenAuthTTL when zero): a removed RoleBinding is honoured
	// within it.
	DecisionTTL time.Duration
	// Size bounds each cache's entries (DefaultTokenAuthSize when zero).
	Size int
	// Audiences, when set, are the audiences a token must be issued for
	// (TokenReview spec.audiences); empty accepts the API server's own.
	Audiences []string
	// Clock of the caches; the real clock when nil.
	Clock cache.Clock
	// ReviewRate (per second) and ReviewBurst bound the TokenReviews of
	// unknown tokens of all callers together; SourceReviewRate and
	// SourceReviewBurst per source. The Default*TokenReview* constants when
	// zero. Beyond them a call with an unknown token is refused with
	// ResourceExhausted, before the hub cluster's API is asked.
	ReviewRate, SourceReviewRate   float64
	ReviewBurst, SourceReviewBurst int
}

// The hub's ServiceAccount creates TokenReviews and SubjectAccessReviews
// through a binding to the built-in ClusterRole system:auth-delegator (as
// metrics-server and aggregated API servers do), not a generated rule:
// deploy/hub/manager/rbac_bindings.yaml and the chart's access-roles.yaml.

// TokenAuthorizer authenticates bearer tokens with TokenReview and
// authorizes Query calls with SubjectAccessReview against the hub cluster,
// caching both for a short time in bounded LRU caches. Only the query API
// uses it: spokes' Report streams never wait on it.
type TokenAuthorizer struct {
	client           kubernetes.Interface
	ttl, decisionTTL time.Duration
	audiences        []string
	// users holds accepted tokens and refused the refused ones, apart:
	// a flood of unknown tokens evicts no accepted one.
	users     *cache.LRUExpireCache // sha256(token) -> authentication
	refused   *cache.LRUExpireCache // sha256(token) -> authentication
	accepted  *cache.LRUExpireCache // sha256(token) -> struct{}, for acceptedMemory
	decisions *cache.LRUExpireCache // reviewKey -> decision

	reviews     *rate.Limiter
	sourceRate  rate.Limit
	sourceBurst int
	sourcesMu   sync.Mutex
	sources     *lru.Cache // source -> *rate.Limiter
	usersMu     sync.Mutex
	userReviews *lru.Cache // user name and uid -> *rate.Limiter
}

// NewTokenAuthorizer returns an authorizer asking c, the hub cluster's API.
func NewTokenAuthorizer(c kubernetes.Interface, opts TokenAuthOptions) (*TokenAuthorizer, error) {
	if c == nil {
		return nil, errors.New("creating the token authorizer: no Kubernetes client")
	}
	if opts.TTL < 0 || opts.DecisionTTL < 0 || opts.Size < 0 {
		return nil, fmt.Errorf("creating the token authorizer: TTLs %s, %s and size %d must not be negative", opts.TTL, opts.DecisionTTL, opts.Size)
	}
	if opts.TTL > MaxTokenAuthTTL || opts.DecisionTTL > MaxTokenAuthTTL {
		return nil, fmt.Errorf("creating the token authorizer: TTLs %s and %s must not exceed %s (revocations are honoured within them)", opts.TTL, opts.DecisionTTL, MaxTokenAuthTTL)
	}
	if opts.ReviewRate < 0 || opts.ReviewBurst < 0 || opts.SourceReviewRate < 0 || opts.SourceReviewBurst < 0 {
		return nil, fmt.Errorf("creating the token authorizer: review rates %g, %g and bursts %d, %d must not be negative",
			opts.ReviewRate, opts.SourceReviewRate, opts.ReviewBurst, opts.SourceReviewBurst)
	}
	if opts.ReviewRate == 0 {
		opts.ReviewRate = DefaultTokenReviewRate
	}
	if opts.ReviewBurst == 0 {
		opts.ReviewBurst = DefaultTokenReviewBurst
	}
	if opts.SourceReviewRate == 0 {
		opts.SourceReviewRate = DefaultSourceTokenReviewRate
	}
	if opts.SourceReviewBurst == 0 {
		opts.SourceReviewBurst = DefaultSourceTokenReviewBurst
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultTokenAuthTTL
	}
	if opts.DecisionTTL == 0 {
		opts.DecisionTTL = DefaultTokenAuthTTL
	}
	if opts.Size == 0 {
		opts.Size = DefaultTokenAuthSize
	}
	newCache := cache.NewLRUExpireCache
	if opts.Clock != nil {
		newCache = func(size int) *cache.LRUExpireCache { return cache.NewLRUExpireCacheWithClock(size, opts.Clock) }
	}
	return &TokenAuthorizer{
		client:      c,
		ttl:         opts.TTL,
		decisionTTL: opts.DecisionTTL,
		audiences:   slices.Clone(opts.Audiences),
		users:       newCache(opts.Size),
		refused:     newCache(opts.Size),
		accepted:    newCache(opts.Size),
		decisions:   newCache(opts.Size),
		reviews:     rate.NewLimiter(rate.Limit(opts.ReviewRate), opts.ReviewBurst),
		sourceRate:  rate.Limit(opts.SourceReviewRate),
		sourceBurst: opts.SourceReviewBurst,
		sources:     lru.New(maxReviewSources),
		userReviews: lru.New(opts.Size),
	}, nil
}

type callerKey struct{}

// tokenCaller is the authenticated token caller of a call, in its context.
type tokenCaller struct {
	user *tokenUser
	auth *TokenAuthorizer
}

// BearerToken returns the bearer token of the call's metadata (the
// authorization header), or false when there is none.
func BearerToken(ctx context.Context) (string, bool) {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return "", false
	}
	values := md.Get("authorization")
	if len(values) == 0 {
		return "", false
	}
	scheme, token, found := strings.Cut(values[0], " ")
	if !found || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// HasBearerToken reports whether the call carries an authorization header of
// the bearer scheme.
func HasBearerToken(ctx context.Context) bool {
	_, ok := BearerToken(ctx)
	return ok
}

// Authorize authenticates the call's bearer token and decides fullMethod
// for its user: Unauthenticated without a token, with one the API server
// does not recognise (expired, of another cluster, revoked) or one beyond
// the size limit; PermissionDenied when RBAC does not grant the method's
// access. It returns ctx carrying the caller, whose handlers read it
// (callerOf) and, for the hold writes, ask the namespaced reviews.
func (a *TokenAuthorizer) Authorize(ctx context.Context, fullMethod string) (context.Context, error) {
	want, ok := methodAccess[fullMethod]
	if !ok {
		return nil, status.Errorf(codes.PermissionDenied, "%s is granted to no Kubernetes identity", fullMethod)
	}
	token, ok := BearerToken(ctx)
	if !ok || token == "" {
		return nil, status.Error(codes.Unauthenticated, "the query API requires a bearer token of the hub cluster (authorization: Bearer ...) or a client certificate signed by the hub CA")
	}
	if len(token) > maxBearerTokenBytes {
		return nil, status.Errorf(codes.Unauthenticated, "the bearer token is %d bytes, more than the %d the hub accepts", len(token), maxBearerTokenBytes)
	}
	user, err := a.authenticate(ctx, token)
	if err != nil {
		return nil, err
	}
	caller := &tokenCaller{user: user, auth: a}
	verb := want.verb
	if want.namespaced {
		// Whoever writes holds reads them across the fleet first: a
		// caller RBAC gives nothing learns nothing, not even whether a
		// hold of that name exists; the handler then asks the write in
		// each namespace of the hold.
		verb = "get"
	}
	if err := caller.allowed(ctx, verb, want.resource, ""); err != nil {
		return nil, err
	}
	return context.WithValue(ctx, callerKey{}, caller), nil
}

// tokenCallerOf returns the token caller of the call in ctx, if any.
func tokenCallerOf(ctx context.Context) (*tokenCaller, bool) {
	c, ok := ctx.Value(callerKey{}).(*tokenCaller)
	return c, ok
}
