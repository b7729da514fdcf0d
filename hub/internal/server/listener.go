package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc/credentials"

	"github.com/imperator-federation/imperator/internal/identity"
)

// The unauthenticated surface is enforced in one place, here: the hub's
// listener completes every TLS handshake itself (bounded in time and in
// number) and hands a connection that presented a client certificate verified
// against the hub CA to the authenticated gRPC server, and every other
// connection to the anonymous gRPC server, which registers nothing but Join
// and the health check and refuses everything else in its tap handle.
//
// A connection is routed, rather than a call checked, because grpc-go reads
// and decodes a unary request before any interceptor runs and has one receive
// limit per server: only a server of its own gives anonymous callers a small
// receive limit (anonymousMaxRecvMsgBytes) while spokes keep the large one
// their Snapshots need. Both servers share the one port, so spokes and
// imperatorctl need no second address.

// errListenerClosed is what a routed listener's Accept returns once closed.
var errListenerClosed = errors.New("listener closed")

// routedListener is the net.Listener a gRPC server serves: it yields the
// connections the router hands it.
type routedListener struct {
	addr   net.Addr
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newRoutedListener(addr net.Addr) *routedListener {
	return &routedListener{addr: addr, conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *routedListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, errListenerClosed
	}
}

// Close stops the listener; it never fails.
func (l *routedListener) Close() error {
	l.stop()
	return nil
}

// stop makes Accept return errListenerClosed and closes connections delivered
// from then on.
func (l *routedListener) stop() { l.once.Do(func() { close(l.closed) }) }

func (l *routedListener) Addr() net.Addr { return l.addr }

// deliver hands c to the server, or closes it when the server is gone.
func (l *routedListener) deliver(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.closed:
		_ = c.Close()
	}
}

// routedConn is a connection whose TLS handshake the router completed.
type routedConn struct {
	*tls.Conn
	state   tls.ConnectionState
	release func()
	once    sync.Once
}

func (c *routedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if c.release != nil {
			c.release()
		}
	})
	return err
}

// handshakenTLS are the transport credentials of a gRPC server fed by the
// router: the handshake is done, so they only report its outcome (the
// verified chains identity.VerifiedCertificate reads).
type handshakenTLS struct{}

func (handshakenTLS) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("the hub's routed credentials only serve")
}

func (handshakenTLS) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	rc, ok := c.(*routedConn)
	if !ok {
		return nil, nil, errors.New("connection did not come through the hub's router")
	}
	return rc, credentials.TLSInfo{
		State:          rc.state,
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity},
	}, nil
}

func (handshakenTLS) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func (h handshakenTLS) Clone() credentials.TransportCredentials { return h }

func (handshakenTLS) OverrideServerName(string) error { return nil }

// router accepts connections on the hub's port and routes them (see above).
type router struct {
	raw              net.Listener
	tls              *tls.Config
	handshakeTimeout time.Duration
	authenticated    *routedListener
	anonymous        *routedListener
	// revoked reports whether a verified client certificate was revoked
	// (nil: none is): such a connection is closed before it is served.
	revoked func(*x509.Certificate) bool
	// handshakeSlots and anonymousSlots bound the connections in their TLS
	// handshake and the open anonymous ones: one token per connection,
	// returned when it is done.
	handshakeSlots chan struct{}
	anonymousSlots chan struct{}
	// tokenSlots and tokenBySource are the budget of the anonymous
	// connections that offered identity.TokenCallerProtocol (token
	// callers), apart from the joining spokes'; tokenCallers marks such a
	// connection (its raw net.Conn) between its ClientHello and the end of
	// its handshake.
	tokenSlots    chan struct{}
	tokenBySource map[string]int
	tokenCallers  sync.Map
	// handshaking, anonymousBySource, authenticatedBySource and
	// bySerial count the connections in their TLS handshake per source
	// (sourceKey), the anonymous ones per source, the authenticated ones
	// per source, and the authenticated ones per certificate serial.
	// Counted apart so that a source's idle anonymous connections do not
	// keep its spokes from handshaking.
	mu                    sync.Mutex
	handshaking           map[string]int
	anonymousBySource     map[string]int
	authenticatedBySource map[string]int
	bySerial              map[string]int
	limits                Limits
	metrics               *Metrics
	log                   logr.Logger
}

// newRouter limits lis to maxConns open connections (handshaking ones
// included: a client that opens connections and never finishes a handshake
// holds a slot for at most the handshake timeout, and at most
// limits.MaxHandshakes of them are held so).
func newRouter(lis net.Listener, tlsConfig *tls.Config, limits Limits, revoked func(*x509.Certificate) bool, metrics *Metrics, log logr.Logger) *router {
	r := &router{
		raw:                   netutil.LimitListener(lis, limits.MaxConnections),
		handshakeTimeout:      limits.HandshakeTimeout,
		authenticated:         newRoutedListener(lis.Addr()),
		anonymous:             newRoutedListener(lis.Addr()),
		revoked:               revoked,
		handshakeSlots:        make(chan struct{}, limits.MaxHandshakes),
		anonymousSlots:        make(chan struct{}, limits.MaxAnonymousConnections),
		tokenSlots:            make(chan struct{}, limits.MaxTokenConnections),
		tokenBySource:         map[string]int{},
		handshaking:           map[string]int{},
		anonymousBySource:     map[string]int{},
		authenticatedBySource: map[string]int{},
		bySerial:              map[string]int{},
		limits:                limits,
		metrics:               metrics,
		log:                   log,
	}
	r.tls = r.markingTokenCallers(r.refusingRevoked(tlsConfig))
	return r
}

// markingTokenCallers returns a copy of cfg that notes, per connection,
// whether its ClientHello offers identity.TokenCallerProtocol; cfg's own
// GetConfigForClient still answers.
func (r *router) markingTokenCallers(cfg *tls.Config) *tls.Config {
	out := cfg.Clone()
	get := cfg.GetConfigForClient
	out.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		if slices.Contains(hello.SupportedProtos, identity.TokenCallerProtocol) && hello.Conn != nil {
			r.tokenCallers.Store(hello.Conn, struct{}{})
		}
		if get == nil {
			return nil, nil
		}
		return get(hello)
	}
	return out
}

// refusingRevoked returns a copy of cfg whose handshakes fail, with a
// bad_certificate alert, for a client certificate that was revoked, so that
// a revoked certificate is refused once per connection, before it holds a
// slot, and its holder's client says why (a TLS error, Unavailable in
// gRPC). A GetConfigForClient's configurations get the same check.
func (r *router) refusingRevoked(cfg *tls.Config) *tls.Config {
	if r.revoked == nil {
		return cfg
	}
	check := func(next func(tls.ConnectionState) error) func(tls.ConnectionState) error {
		// The revocation check comes before next (the hub CA's record of
		// which CA a spoke presents), so that a revoked certificate is
		// not recorded as a spoke still using the previous CA.
		return func(cs tls.ConnectionState) error {
			if len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0 {
				leaf := cs.VerifiedChains[0][0]
				if r.revoked(leaf) {
					r.metrics.rejectedConnections.WithLabelValues(rejectRevoked).Inc()
					r.log.Info("Refused the handshake of a revoked certificate", "subject", leaf.Subject.CommonName, "serial", identity.SerialOf(leaf))
					return fmt.Errorf("client certificate %q (serial %s) was revoked", leaf.Subject.CommonName, identity.SerialOf(leaf))
				}
			}
			if next != nil {
				return next(cs)
			}
			return nil
		}
	}
	out := cfg.Clone()
	out.VerifyConnection = check(cfg.VerifyConnection)
	if get := cfg.GetConfigForClient; get != nil {
		out.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			c, err := get(hello)
			if err != nil || c == nil {
				return c, err
			}
			c = c.Clone()
			c.VerifyConnection = check(c.VerifyConnection)
			return c, nil
		}
	}
	return out
}

// serve accepts until the raw listener is closed.
func (r *router) serve() error {
	defer r.authenticated.stop()
	defer r.anonymous.stop()
	var backoff time.Duration
	for {
		c, err := r.raw.Accept()
		if err != nil {
			var netErr net.Error
			if errors.As(err, &netErr) && netErr.Timeout() {
				// Out of file descriptors and the like: wait, as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		go r.route(c)
	}
}

func (r *router) close() error {
	err := r.raw.Close()
	r.authenticated.stop()
	r.anonymous.stop()
	return err
}

// claim counts one more connection of key in counts, unless it has max
// already.
func (r *router) claim(counts map[string]int, key string, max int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if counts[key] >= max {
		return false
	}
	counts[key]++
	return true
}

func (r *router) unclaim(counts map[string]int, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if counts[key]--; counts[key] <= 0 {
		delete(counts, key)
	}
}

// refuse closes c, counting and logging why.
func (r *router) refuse(c net.Conn, reason, message string, keysAndValues ...any) {
	r.metrics.rejectedConnections.WithLabelValues(reason).Inc()
	r.log.V(1).Info(message, append([]any{"remote", c.RemoteAddr().String()}, keysAndValues...)...)
	_ = c.Close()
}

func (r *router) route(c net.Conn) {
	source := sourceKey(c.RemoteAddr())
	select {
	case r.handshakeSlots <- struct{}{}:
	default:
		r.refuse(c, rejectTooManyHandshakes, "Closed connection: too many TLS handshakes in flight", "limit", cap(r.handshakeSlots))
		return
	}
	if !r.claim(r.handshaking, source, r.limits.MaxAnonymousConnectionsPerSource) {
		<-r.handshakeSlots
		r.refuse(c, rejectTooManyFromSource, "Closed connection: too many handshakes from its source", "source", source, "limit", r.limits.MaxAnonymousConnectionsPerSource)
		return
	}
	tc := tls.Server(c, r.tls)
	ctx, cancel := context.WithTimeout(context.Background(), r.handshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	_, tokenCaller := r.tokenCallers.LoadAndDelete(c)
	r.unclaim(r.handshaking, source)
	<-r.handshakeSlots
	if err != nil {
		r.metrics.rejectedConnections.WithLabelValues(rejectHandshake).Inc()
		r.log.V(2).Info("TLS handshake failed", "remote", c.RemoteAddr().String(), "reason", err.Error())
		_ = tc.Close()
		return
	}
	state := tc.ConnectionState()
	if len(state.VerifiedChains) > 0 {
		r.routeAuthenticated(tc, state, source)
		return
	}
	// Both kinds are served by the anonymous server; they count against
	// budgets of their own.
	kind, slots, bySource := "anonymous", r.anonymousSlots, r.anonymousBySource
	if tokenCaller {
		kind, slots, bySource = "token caller's", r.tokenSlots, r.tokenBySource
	}
	if !r.claim(bySource, source, r.limits.MaxAnonymousConnectionsPerSource) {
		r.refuse(tc, rejectTooManyFromSource, "Closed "+kind+" connection: too many from its source", "source", source, "limit", r.limits.MaxAnonymousConnectionsPerSource)
		return
	}
	select {
	case slots <- struct{}{}:
	default:
		r.unclaim(bySource, source)
		r.refuse(tc, rejectTooManyAnonymous, "Closed "+kind+" connection: too many open", "limit", cap(slots))
		return
	}
	r.anonymous.deliver(&routedConn{Conn: tc, state: state, release: func() {
		<-slots
		r.unclaim(bySource, source)
	}})
}

// routeAuthenticated hands a connection with a verified client certificate
// to the authenticated server, unless the certificate was revoked (refused
// here, once per connection, so that a revoked certificate holds no slot
// however many calls it would make) or its serial or its source holds as
// many connections as allowed.
func (r *router) routeAuthenticated(tc *tls.Conn, state tls.ConnectionState, source string) {
	leaf := state.VerifiedChains[0][0]
	serial := identity.SerialOf(leaf)
	if r.revoked != nil && r.revoked(leaf) {
		// The handshake refuses revoked certificates (refusingRevoked);
		// this catches one revoked during its handshake.
		r.refuse(tc, rejectRevoked, "Closed connection of a revoked certificate", "subject", leaf.Subject.CommonName, "serial", serial)
		return
	}
	if !r.claim(r.bySerial, serial, r.limits.MaxConnectionsPerCertificate) {
		r.refuse(tc, rejectTooManyForCertificate, "Closed connection: too many open with its certificate",
			"subject", leaf.Subject.CommonName, "serial", serial, "limit", r.limits.MaxConnectionsPerCertificate)
		return
	}
	if !r.claim(r.authenticatedBySource, source, r.limits.MaxAuthenticatedConnectionsPerSource) {
		r.unclaim(r.bySerial, serial)
		r.refuse(tc, rejectTooManyAuthenticatedFromSource, "Closed connection: too many authenticated ones from its source",
			"source", source, "limit", r.limits.MaxAuthenticatedConnectionsPerSource)
		return
	}
	r.authenticated.deliver(&routedConn{Conn: tc, state: state, release: func() {
		r.unclaim(r.bySerial, serial)
		r.unclaim(r.authenticatedBySource, source)
	}})
}
