package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/pki"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

func TestSourceKeyGroupsWhatOneClientCanChooseFrom(t *testing.T) {
	cases := map[string]struct {
		addr net.Addr
		want string
	}{
		"IPv4":                       {addr: &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 1}, want: "192.0.2.7"},
		"IPv4 mapped into IPv6":      {addr: &net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 1}, want: "192.0.2.7"},
		"IPv6 is grouped by its /64": {addr: &net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), Port: 1}, want: "2001:db8:1:2::/64"},
		"another address of the /64": {addr: &net.TCPAddr{IP: net.ParseIP("2001:db8:1:2::1"), Port: 1}, want: "2001:db8:1:2::/64"},
		"IPv6 with a zone":           {addr: &net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 1, Zone: "eth0"}, want: "fe80::/64"},
		"IPv6 given as a string":     {addr: stringAddr("[2001:db8:1:2::9]:443"), want: "2001:db8:1:2::/64"},
		"not an IP":                  {addr: stringAddr("@unix"), want: "@unix"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, sourceKey(tc.addr)); diff != "" {
				t.Errorf("sourceKey(%v) (-want +got):\n%s", tc.addr, diff)
			}
		})
	}
	// The Join rate is counted by the same source.
	l := DefaultLimits()
	l.JoinRatePerSource, l.JoinBurstPerSource = 0.001, 1
	j := newJoinLimiter(l)
	if !j.allow(fromSource("2001:db8:1:2::1")) {
		t.Fatal("the first Join of a source was limited")
	}
	if j.allow(fromSource("2001:db8:1:2::2")) {
		t.Error("another address of the same IPv6 /64 got a Join budget of its own")
	}
}

type stringAddr string

func (a stringAddr) Network() string { return "tcp" }
func (a stringAddr) String() string  { return string(a) }

// closedAtOnce reports whether the hub closes a connection with cert (nil:
// anonymous) right after its TLS handshake; an error when the handshake
// itself failed.
func closedAtOnce(t *testing.T, h *testHub, cert *tls.Certificate) bool {
	t.Helper()
	cfg, err := identity.ClientTLS(h.ca.CertPEM, cert, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.Dial("tcp", h.addr, cfg)
	if err != nil {
		return true
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_, err = io.ReadAll(c)
	var netErr net.Error
	return !errors.As(err, &netErr) || !netErr.Timeout()
}

func healthCheck(t *testing.T, h *testHub, cert *tls.Certificate) error {
	t.Helper()
	cfg, err := identity.ClientTLS(h.ca.CertPEM, cert, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// revocationList is a Revoked option the test changes.
type revocationList struct {
	mu      sync.Mutex
	serials map[string]bool
}

func (r *revocationList) revoke(cert *tls.Certificate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.serials[identity.SerialOf(cert.Leaf)] = true
}

func (r *revocationList) options(o *Options) {
	o.Revoked = func(cert *x509.Certificate) bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.serials[identity.SerialOf(cert)]
	}
}

func TestRevokedCertificateIsClosedAtConnectionTime(t *testing.T) {
	revoked := &revocationList{serials: map[string]bool{}}
	h := startTestHubWith(t, revoked.options)
	cert := h.certificate(t, "a", identity.SpokeOrganization)
	revoked.revoke(cert)
	if !closedAtOnce(t, h, cert) {
		t.Error("a connection with a revoked certificate stays open, want it closed after the handshake")
	}
	// In TLS 1.3 the client finishes its handshake before the server has
	// judged its certificate, so the client may write before the server's
	// bad_certificate alert arrives and see the closed connection instead.
	err := healthCheck(t, h, cert)
	if err == nil {
		t.Fatal("a health check with a revoked certificate was answered")
	}
	refused := strings.Contains(err.Error(), "bad certificate") ||
		strings.Contains(err.Error(), "broken pipe") || strings.Contains(err.Error(), "connection reset")
	if status.Code(err) != codes.Unavailable || !refused {
		t.Errorf("health check with a revoked certificate = %v, want Unavailable from a bad_certificate alert or the connection it closed", err)
	}
	if closedAtOnce(t, h, h.certificate(t, "b", identity.SpokeOrganization)) {
		t.Error("a connection with a good certificate was closed")
	}
}

func TestAuthenticatedConnectionsAreCappedPerCertificateAndPerSource(t *testing.T) {
	cases := map[string]struct {
		limit func(*Limits)
		// sameCertificate: all three connections present one certificate.
		sameCertificate bool
	}{
		"per certificate": {limit: func(l *Limits) { l.MaxConnectionsPerCertificate = 2 }, sameCertificate: true},
		"per source":      {limit: func(l *Limits) { l.MaxAuthenticatedConnectionsPerSource = 2 }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := startTestHubWith(t, func(o *Options) {
				o.Limits = DefaultLimits()
				tc.limit(&o.Limits)
			})
			shared := h.certificate(t, "a", identity.SpokeOrganization)
			certFor := func(cluster string) *tls.Certificate {
				if tc.sameCertificate {
					return shared
				}
				return h.certificate(t, cluster, identity.SpokeOrganization)
			}
			for _, cluster := range []string{"a", "b"} {
				if closedAtOnce(t, h, certFor(cluster)) {
					t.Fatalf("connection of %s within the limit was closed", cluster)
				}
			}
			if !closedAtOnce(t, h, certFor("c")) {
				t.Error("a third connection stays open, want it closed at once (limit 2)")
			}
		})
	}
}

func TestHandshakesInFlightHaveAPoolOfTheirOwn(t *testing.T) {
	limits := DefaultLimits()
	limits.MaxHandshakes = 2
	r, ca, addr := startRouter(t, limits)
	// Serve the routed connections: the anonymous one below must stay open.
	for _, l := range []*routedListener{r.anonymous, r.authenticated} {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { _ = c.Close() })
			}
		}()
	}

	// Two clients that connect and never say a word, from two sources: the
	// per-source limit does not stop them.
	for _, source := range []string{"127.0.0.2", "127.0.0.3"} {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	for deadline := time.Now().Add(5 * time.Second); len(r.handshakeSlots) < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the silent connections hold %d handshake slots, want 2", len(r.handshakeSlots))
		}
	}
	cfg, err := identity.ClientTLS(ca.CertPEM, nil, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := tls.Dial("tcp", addr, cfg); err == nil {
		_ = c.Close()
		t.Fatal("with 2 handshakes stalled a third connection was handshaken, want it closed at once (MaxHandshakes 2)")
	}
	if got := testutil.ToFloat64(r.metrics.rejectedConnections.WithLabelValues(rejectTooManyHandshakes)); got != 1 {
		t.Errorf("rejected for too many handshakes = %v, want 1", got)
	}
}

func TestLimitsValidateKeepsHandshakesBelowConnections(t *testing.T) {
	l := DefaultLimits()
	l.MaxConnections, l.MaxHandshakes = 100, 51
	if err := l.Validate(); err == nil {
		t.Error("Validate accepts MaxHandshakes above half of MaxConnections")
	}
}

func TestHealthAndReflectionNeedAnAdmittedSpoke(t *testing.T) {
	h := startTestHub(t)
	cert := h.certificate(t, "gone", identity.SpokeOrganization)
	if err := healthCheck(t, h, cert); err != nil {
		t.Fatalf("health check of an admitted spoke: %v", err)
	}
	h.mu.Lock()
	h.deregistered["gone"] = true
	h.mu.Unlock()
	wantRefusal(t, healthCheck(t, h, cert), "gone", identity.RefusedNotRegistered)
	if err := healthCheck(t, h, nil); err != nil {
		t.Errorf("anonymous health check: %v", err)
	}
}

func TestRevocationEndsAnOpenReportStreamAtItsNextHeartbeat(t *testing.T) {
	revoked := &revocationList{serials: map[string]bool{}}
	h := startTestHubWith(t, revoked.options)
	cert := h.certificate(t, "a", identity.SpokeOrganization)
	fed := h.client(t, cert)
	stream, err := fed.Report(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*federationv1.SpokeMessage{hello("a", 1), snapshotMsg(1)} {
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("waiting for the ack: %v", err)
	}
	revoked.revoke(cert)
	err = streamEnd(t, stream, &federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Heartbeat{Heartbeat: &federationv1.Heartbeat{Generation: 1}}})
	if got := status.Code(err); got != codes.PermissionDenied {
		t.Errorf("stream of a revoked certificate ended with %v (%v) at its heartbeat, want PermissionDenied", got, err)
	}
}

// Connections without a client certificate that offer the token-caller
// protocol (imperatorctl with a bearer token) and those that do not (joining
// spokes, probes) count against budgets of their own: neither fills the
// other's.
func TestTokenCallersHaveAConnectionBudgetOfTheirOwn(t *testing.T) {
	limits := DefaultLimits()
	limits.MaxAnonymousConnections, limits.MaxTokenConnections = 2, 1
	r, ca, addr := startRouter(t, limits)
	go func() {
		for {
			c, err := r.anonymous.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	// open reports whether a connection, offering the token-caller
	// protocol or not, stays open after its handshake.
	open := func(token bool) bool {
		t.Helper()
		cfg, err := identity.ClientTLS(ca.CertPEM, nil, "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		cfg.NextProtos = []string{"h2"}
		if token {
			cfg.NextProtos = append(cfg.NextProtos, identity.TokenCallerProtocol)
		}
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			return false
		}
		t.Cleanup(func() { _ = c.Close() })
		if got := c.ConnectionState().NegotiatedProtocol; got != "h2" {
			t.Errorf("negotiated %q, want h2 whatever the offer", got)
		}
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		_, err = c.Read(make([]byte, 1))
		var netErr net.Error
		return errors.As(err, &netErr) && netErr.Timeout()
	}
	// Joining spokes fill their budget: a token caller still gets in.
	for i := range 2 {
		if !open(false) {
			t.Fatalf("anonymous connection %d within the limit was closed", i+1)
		}
	}
	if open(false) {
		t.Error("a third anonymous connection stays open, want it closed (MaxAnonymousConnections 2)")
	}
	if !open(true) {
		t.Fatal("a token caller's connection was closed while joining spokes filled theirs: the budgets are shared")
	}
	// Token callers fill theirs: it is theirs alone.
	if open(true) {
		t.Error("a second token caller's connection stays open, want it closed (MaxTokenConnections 1)")
	}
	if got := len(r.anonymousSlots); got != 2 {
		t.Errorf("the anonymous budget holds %d connections, want the 2 spokes' only", got)
	}
	if got := testutil.ToFloat64(r.metrics.rejectedConnections.WithLabelValues(rejectTooManyAnonymous)); got != 2 {
		t.Errorf("rejected for too many anonymous connections = %v, want 2", got)
	}
}

func TestLimitsValidateTokenConnections(t *testing.T) {
	for name, n := range map[string]int{"zero": 0, "above MaxConnections": DefaultMaxConnections + 1} {
		l := DefaultLimits()
		l.MaxTokenConnections = n
		if err := l.Validate(); err == nil || !strings.Contains(err.Error(), "MaxTokenConnections") {
			t.Errorf("%s: Validate() = %v, want an error naming MaxTokenConnections", name, err)
		}
	}
}

// startRouter serves a router with limits on a loopback port, with a
// serving certificate of a new CA; it returns the router, the CA and the
// address. Both stop with the test.
func startRouter(t *testing.T, limits Limits) (r *router, ca *pki.CA, addr string) {
	t.Helper()
	ca, err := pki.NewCA("test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.IssueServer("hub", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	metrics, err := NewMetrics(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r = newRouter(lis, identity.ServerTLS(func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &serving, nil }, pool), limits, nil, metrics, logr.Discard())
	go func() { _ = r.serve() }()
	t.Cleanup(func() { _ = r.close() })
	return r, ca, lis.Addr().String()
}
