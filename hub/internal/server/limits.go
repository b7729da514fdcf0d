package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"k8s.io/utils/lru"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// Limits bound what callers, above all anonymous ones, can make the hub hold.
type Limits struct {
	// MaxConnections bounds the open connections of every kind, including
	// those still in their TLS handshake. Spokes and people need one each.
	MaxConnections int
	// MaxAnonymousConnections bounds the open connections without a verified
	// client certificate (joining spokes, probes); more are closed at once.
	MaxAnonymousConnections int
	// MaxTokenConnections bounds, apart from MaxAnonymousConnections, the
	// open connections without a client certificate whose ClientHello
	// offers identity.TokenCallerProtocol (people and automation with a
	// bearer token), so that token callers and joining spokes cannot take
	// each other's slots. Per source they are bounded by
	// MaxAnonymousConnectionsPerSource, counted apart too.
	MaxTokenConnections int
	// MaxAnonymousConnectionsPerSource bounds, per source (see sourceKey), the
	// connections in their TLS handshake and, apart, the anonymous ones, so
	// that one source cannot take every slot of MaxConnections or
	// MaxAnonymousConnections.
	MaxAnonymousConnectionsPerSource int
	// MaxHandshakes bounds the connections in their TLS handshake, of all
	// sources together, well below MaxConnections: clients that open
	// connections and never finish a handshake (slowloris, from many
	// sources) hold at most this many of MaxConnections' slots, and more are
	// closed at once.
	MaxHandshakes int
	// MaxConnectionsPerCertificate bounds the open connections presenting
	// one client certificate (by serial): a spoke needs one, two while it
	// moves its stream to a new connection; a stolen or retired
	// certificate cannot take every slot.
	MaxConnectionsPerCertificate int
	// MaxAuthenticatedConnectionsPerSource bounds the open connections with
	// a verified client certificate from one source (an IPv4 address, an
	// IPv6 /64), of all certificates together.
	MaxAuthenticatedConnectionsPerSource int
	// HandshakeTimeout bounds a connection's TLS handshake.
	HandshakeTimeout time.Duration
	// AnonymousIdleTimeout closes an anonymous connection without a call in
	// progress for this long.
	AnonymousIdleTimeout time.Duration
	// MaxConnectionIdle closes an authenticated connection without a call
	// in progress for this long (an idle imperatorctl; a spoke always has its
	// Report stream open).
	MaxConnectionIdle time.Duration
	// MaxConnectionAge makes clients reconnect after this long (grpc-go adds
	// ±10% jitter), so that a spoke presents its renewed certificate and a
	// retired or revoked one stops being used on an old connection;
	// MaxConnectionAgeGrace is how long calls in progress then get to end.
	MaxConnectionAge      time.Duration
	MaxConnectionAgeGrace time.Duration
	// JoinRatePerSource and JoinBurstPerSource limit the Join calls of one
	// remote IP address (token bucket: so many per second, bursts of so many).
	JoinRatePerSource  float64
	JoinBurstPerSource int
	// MaxConcurrentJoins bounds the Join calls being answered at once (each
	// reads and writes the hub cluster's API); more wait, within their
	// deadline, for a turn.
	MaxConcurrentJoins int
}

// Defaults of Limits. A fleet has hundreds of spokes, each with one
// connection; joins are rare (a new cluster, a lost certificate).
const (
	DefaultMaxConnections          = 4096
	DefaultMaxAnonymousConnections = 256
	// DefaultMaxTokenConnections: people and automation with tokens hold
	// a connection for a call or a Watch of at most five minutes.
	DefaultMaxTokenConnections = 256
	// DefaultMaxAnonymousConnectionsPerSource leaves room for several
	// clusters joining at once from behind one NAT.
	DefaultMaxAnonymousConnectionsPerSource = 16
	// DefaultMaxHandshakes: a TLS handshake takes milliseconds, so 256 in
	// flight serve thousands of connections a second while leaving 15/16 of
	// DefaultMaxConnections to established ones.
	DefaultMaxHandshakes = 256
	// DefaultMaxConnectionsPerCertificate: one per spoke or person, a second
	// while a connection is recycled, room for a few parallel imperatorctl
	// calls.
	DefaultMaxConnectionsPerCertificate = 8
	// DefaultMaxAuthenticatedConnectionsPerSource leaves room for a fleet of
	// spokes behind one NAT while keeping one source below a sixteenth of
	// DefaultMaxConnections.
	DefaultMaxAuthenticatedConnectionsPerSource = 256
	DefaultHandshakeTimeout                     = 10 * time.Second
	DefaultAnonymousIdleTimeout                 = 30 * time.Second
	DefaultMaxConnectionIdle                    = 15 * time.Minute
	// DefaultMaxConnectionAge: spoke certificates renew at 2/3 of their life
	// (months by default, minutes in the fault suite with its flags), and a
	// Renew retires the replaced certificate after the renewal overlap
	// (join.DefaultRenewalOverlap, 10 minutes): reconnecting every half hour
	// costs a spoke one Snapshot and bounds how long any connection outlives
	// a certificate change.
	DefaultMaxConnectionAge = 30 * time.Minute
	// DefaultMaxConnectionAgeGrace lets a Report stream finish the message
	// it is on; the spoke reconnects at once when the stream ends.
	DefaultMaxConnectionAgeGrace = 30 * time.Second
	DefaultJoinRatePerSource     = 1
	DefaultJoinBurstPerSource    = 5
	DefaultMaxConcurrentJoins    = 8
)

// Fixed bounds of anonymous calls.
const (
	// anonymousMaxRecvMsgBytes is the receive limit of anonymous calls: a
	// JoinRequest is a cluster name, a token and a CSR of at most 16 KiB.
	anonymousMaxRecvMsgBytes = 64 << 10
	// anonymousMaxHeaderListBytes bounds the request headers of anonymous calls.
	anonymousMaxHeaderListBytes = 8 << 10
	// maxHeaderListBytes bounds the request headers of authenticated calls.
	maxHeaderListBytes = 64 << 10
	// anonymousMaxConcurrentStreams: a joining spoke needs one call at a time.
	anonymousMaxConcurrentStreams = 4
	// anonymousMaxConnectionAge ends anonymous connections however busy.
	anonymousMaxConnectionAge = 5 * time.Minute
	// JoinTimeout is the deadline of a Join call at the hub.
	JoinTimeout = 20 * time.Second
	// maxJoinSources bounds the remote addresses whose Join rate is tracked;
	// the least recently seen is forgotten first.
	maxJoinSources = 16384
)

// DefaultLimits returns the default Limits.
func DefaultLimits() Limits {
	return Limits{
		MaxConnections:                       DefaultMaxConnections,
		MaxAnonymousConnections:              DefaultMaxAnonymousConnections,
		MaxTokenConnections:                  DefaultMaxTokenConnections,
		MaxAnonymousConnectionsPerSource:     DefaultMaxAnonymousConnectionsPerSource,
		MaxHandshakes:                        DefaultMaxHandshakes,
		MaxConnectionsPerCertificate:         DefaultMaxConnectionsPerCertificate,
		MaxAuthenticatedConnectionsPerSource: DefaultMaxAuthenticatedConnectionsPerSource,
		HandshakeTimeout:                     DefaultHandshakeTimeout,
		AnonymousIdleTimeout:                 DefaultAnonymousIdleTimeout,
		MaxConnectionIdle:                    DefaultMaxConnectionIdle,
		MaxConnectionAge:                     DefaultMaxConnectionAge,
		MaxConnectionAgeGrace:                DefaultMaxConnectionAgeGrace,
		JoinRatePerSource:                    DefaultJoinRatePerSource,
		JoinBurstPerSource:                   DefaultJoinBurstPerSource,
		MaxConcurrentJoins:                   DefaultMaxConcurrentJoins,
	}
}

// Validate returns every limit that is not positive, by field name.
func (l Limits) Validate() error {
	var errs []error
	positive := func(name string, ok bool) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s must be positive", name))
		}
	}
	positive("MaxConnections", l.MaxConnections > 0)
	positive("MaxAnonymousConnections", l.MaxAnonymousConnections > 0)
	positive("MaxTokenConnections", l.MaxTokenConnections > 0)
	positive("MaxAnonymousConnectionsPerSource", l.MaxAnonymousConnectionsPerSource > 0)
	positive("MaxHandshakes", l.MaxHandshakes > 0)
	positive("MaxConnectionsPerCertificate", l.MaxConnectionsPerCertificate > 0)
	positive("MaxAuthenticatedConnectionsPerSource", l.MaxAuthenticatedConnectionsPerSource > 0)
	positive("HandshakeTimeout", l.HandshakeTimeout > 0)
	positive("AnonymousIdleTimeout", l.AnonymousIdleTimeout > 0)
	positive("MaxConnectionIdle", l.MaxConnectionIdle > 0)
	positive("MaxConnectionAge", l.MaxConnectionAge > 0)
	positive("MaxConnectionAgeGrace", l.MaxConnectionAgeGrace > 0)
	positive("JoinRatePerSource", l.JoinRatePerSource > 0)
	positive("JoinBurstPerSource", l.JoinBurstPerSource > 0)
	positive("MaxConcurrentJoins", l.MaxConcurrentJoins > 0)
	if l.MaxAnonymousConnections > l.MaxConnections {
		errs = append(errs, fmt.Errorf("MaxAnonymousConnections %d exceeds MaxConnections %d", l.MaxAnonymousConnections, l.MaxConnections))
	}
	if l.MaxTokenConnections > l.MaxConnections {
		errs = append(errs, fmt.Errorf("MaxTokenConnections %d exceeds MaxConnections %d", l.MaxTokenConnections, l.MaxConnections))
	}
	if l.MaxHandshakes > 0 && l.MaxConnections > 0 && l.MaxHandshakes > l.MaxConnections/2 {
		// Else handshakes that never finish could hold most of the port.
		errs = append(errs, fmt.Errorf("MaxHandshakes %d exceeds half of MaxConnections %d", l.MaxHandshakes, l.MaxConnections))
	}
	return errors.Join(errs...)
}

// joinLimiter limits Join calls per remote IP address and in total.
type joinLimiter struct {
	rate    rate.Limit
	burst   int
	mu      sync.Mutex
	sources *lru.Cache
	// slots holds one token per Join being answered.
	slots chan struct{}
}

func newJoinLimiter(l Limits) *joinLimiter {
	return &joinLimiter{
		rate:    rate.Limit(l.JoinRatePerSource),
		burst:   l.JoinBurstPerSource,
		sources: lru.New(maxJoinSources),
		slots:   make(chan struct{}, l.MaxConcurrentJoins),
	}
}

// allow reports whether the caller in ctx (its remote IP) may call Join now.
// It never blocks: it runs in the tap handle, before the request is read.
func (j *joinLimiter) allow(ctx context.Context) bool {
	source := sourceOf(ctx)
	j.mu.Lock()
	defer j.mu.Unlock()
	limiter, ok := j.sources.Get(source)
	if !ok {
		limiter = rate.NewLimiter(j.rate, j.burst)
		j.sources.Add(source, limiter)
	}
	return limiter.(*rate.Limiter).Allow()
}

// acquire waits for a turn to answer a Join; release gives it back.
func (j *joinLimiter) acquire(ctx context.Context) error {
	select {
	case j.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return status.Errorf(codes.ResourceExhausted, "the hub is answering %d joins already; retry later", cap(j.slots))
	}
}

func (j *joinLimiter) release() { <-j.slots }

// sourceOf is the source (sourceKey) of the call in ctx ("" when unknown:
// all such calls then share one bucket).
func sourceOf(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	return sourceKey(p.Addr)
}

// sourceKey is the source of a connection from addr, as every per-source
// limit counts it: an IPv4 address (also one mapped into IPv6), or the /64
// of an IPv6 address, since one host or site is routinely given a whole
// /64 and could otherwise take a fresh source per connection. An address
// that is no IP is its own source.
func sourceKey(addr net.Addr) string {
	if addr == nil {
		return ""
	}
	var ip netip.Addr
	if tcp, ok := addr.(*net.TCPAddr); ok {
		ip, _ = netip.AddrFromSlice(tcp.IP)
	} else if ap, err := netip.ParseAddrPort(addr.String()); err == nil {
		ip = ap.Addr()
	} else if a, err := netip.ParseAddr(addr.String()); err == nil {
		ip = a
	}
	if !ip.IsValid() {
		return addr.String()
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		prefix, err := ip.Prefix(64)
		if err == nil {
			return prefix.String()
		}
	}
	return ip.String()
}

// healthCheckMethod is the one health method served anonymously; Watch is
// not, since a stream held open would keep an idle connection alive.
const healthCheckMethod = "/grpc.health.v1.Health/Check"

// anonymousTap runs before an anonymous call's request is read: it lets
// through Join (within its rate), the health check and, when the server
// takes tokens, a service's call with a bearer token (authenticate decides
// it), and refuses everything else with Unauthenticated.
func (s *Server) anonymousTap(ctx context.Context, info *tap.Info) (context.Context, error) {
	switch info.FullMethodName {
	case federationv1.Federation_Join_FullMethodName:
		return s.joinTap(ctx, info)
	case healthCheckMethod:
		return ctx, nil
	}
	if s.opts.AuthorizeToken != nil && !federationMethod(info.FullMethodName) && !infrastructureMethod(info.FullMethodName) && bearerHeader(info) {
		// A Kubernetes identity: authenticate decides it.
		return ctx, nil
	}
	s.metrics.rejectedConnections.WithLabelValues(rejectAnonymousMethod).Inc()
	return nil, status.Errorf(codes.Unauthenticated,
		"%s requires a client certificate signed by the hub CA or a bearer token of the hub cluster: only Join and the health check are served without one", info.FullMethodName)
}

// bearerHeader reports whether a call's headers carry a bearer token.
func bearerHeader(info *tap.Info) bool {
	for _, v := range info.Header.Get("authorization") {
		if len(v) > len("bearer ") && strings.EqualFold(v[:len("bearer ")], "bearer ") {
			return true
		}
	}
	return false
}

// joinTap applies the per-source Join rate, on both servers: a spoke joining
// again may present its old certificate.
func (s *Server) joinTap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if info.FullMethodName == federationv1.Federation_Join_FullMethodName && !s.joins.allow(ctx) {
		s.metrics.rejectedConnections.WithLabelValues(rejectJoinRateLimited).Inc()
		return nil, status.Errorf(codes.ResourceExhausted,
			"too many Join calls from %s: at most %g per second (bursts of %d); retry later", sourceOf(ctx), float64(s.joins.rate), s.joins.burst)
	}
	return ctx, nil
}
