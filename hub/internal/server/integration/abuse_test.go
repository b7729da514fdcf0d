package integration

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"golang.org/x/net/http2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/hub/internal/query"
	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/hub/internal/server"
	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/pki"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// spokeKey is a joining spoke's key and certificate request.
type spokeKey struct {
	csrPEM, keyPEM []byte
}

func newSpokeKey(cluster string) spokeKey {
	GinkgoHelper()
	csrPEM, keyPEM, err := pki.NewCSR(cluster)
	Expect(err).NotTo(HaveOccurred())
	return spokeKey{csrPEM: csrPEM, keyPEM: keyPEM}
}

func newToken(ctx context.Context, boundTo string) string {
	GinkgoHelper()
	token, err := hubtest.CreateToken(ctx, hubClient, hubNamespace, time.Hour, boundTo)
	Expect(err).NotTo(HaveOccurred())
	return token
}

// join joins cluster with token and key from a fresh source address.
func join(ctx context.Context, cluster, token string, key spokeKey) (*tls.Certificate, error) {
	resp, err := federationv1.NewFederationClient(dialFrom(newSource(), nil)).Join(ctx, &federationv1.JoinRequest{ClusterName: cluster, Token: token, Csr: key.csrPEM})
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(resp.GetCertificate(), key.keyPEM)
	return &pair, err
}

// joinedSpoke joins a new cluster with a fresh unbound token.
func joinedSpoke(ctx context.Context, cluster string) *tls.Certificate {
	GinkgoHelper()
	cert, err := join(ctx, cluster, newToken(ctx, ""), newSpokeKey(cluster))
	Expect(err).NotTo(HaveOccurred())
	return cert
}

// report opens a Report stream of cluster with cert and returns nil once the
// hub acknowledged its first Snapshot.
func report(ctx context.Context, cluster string, cert *tls.Certificate) error {
	// Closed when done: the hub caps the connections of one certificate.
	conn := dialOnce(newSource(), cert)
	defer func() { _ = conn.Close() }()
	return reportOn(ctx, conn, cluster)
}

// reportOn is report on an open connection.
func reportOn(ctx context.Context, conn *grpc.ClientConn, cluster string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := openReport(ctx, conn, cluster)
	return err
}

// openReport opens a Report stream of cluster on conn and returns it once
// the hub acknowledged its first Snapshot.
func openReport(ctx context.Context, conn *grpc.ClientConn, cluster string) (federationv1.Federation_ReportClient, error) {
	stream, err := federationv1.NewFederationClient(conn).Report(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range []*federationv1.SpokeMessage{
		{Kind: &federationv1.SpokeMessage_Hello{Hello: &federationv1.Hello{ClusterName: cluster, AgentVersion: "abuse", Epoch: uint64(time.Now().UnixNano())}}},
		{Kind: &federationv1.SpokeMessage_Snapshot{Snapshot: &federationv1.Snapshot{Generation: 1}}},
	} {
		if err := stream.Send(m); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
	}
	msg, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	if msg.GetAck() == nil {
		return nil, errors.New("first answer is no Ack")
	}
	return stream, nil
}

func renew(ctx context.Context, cluster string, cert *tls.Certificate) (*tls.Certificate, error) {
	conn := dialOnce(newSource(), cert)
	defer func() { _ = conn.Close() }()
	return renewOn(ctx, conn, cluster)
}

// renewOn is renew on an open connection.
func renewOn(ctx context.Context, conn *grpc.ClientConn, cluster string) (*tls.Certificate, error) {
	key := newSpokeKey(cluster)
	resp, err := federationv1.NewFederationClient(conn).Renew(ctx, &federationv1.RenewRequest{Csr: key.csrPEM})
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(resp.GetCertificate(), key.keyPEM)
	return &pair, err
}

// renewForKey renews cluster's cert for a certificate of key.
func renewForKey(ctx context.Context, cluster string, cert *tls.Certificate, key crypto.Signer) (*tls.Certificate, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cluster}}, key)
	if err != nil {
		return nil, err
	}
	conn := dialOnce(newSource(), cert)
	defer func() { _ = conn.Close() }()
	resp, err := federationv1.NewFederationClient(conn).Renew(ctx, &federationv1.RenewRequest{Csr: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})})
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(resp.GetCertificate())
	if block == nil {
		return nil, errors.New("the hub answered no PEM certificate")
	}
	return &tls.Certificate{Certificate: [][]byte{block.Bytes}, PrivateKey: key}, nil
}

func viewerCertificate(name string) (*tls.Certificate, string) {
	GinkgoHelper()
	certPEM, keyPEM, err := ca.IssueClient(name, []string{query.ViewerOrganization}, time.Hour)
	Expect(err).NotTo(HaveOccurred())
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	Expect(err).NotTo(HaveOccurred())
	cert, err := pki.ParseCertificate(certPEM)
	Expect(err).NotTo(HaveOccurred())
	return &pair, identity.SerialOf(cert)
}

func listClusters(ctx context.Context, cert *tls.Certificate) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn := dialOnce(newSource(), cert)
	defer func() { _ = conn.Close() }()
	_, err := queryv1.NewQueryClient(conn).ListClusters(ctx, &queryv1.ListClustersRequest{})
	return err
}

// refusalReason is the hub's refusal reason in err's ErrorInfo.
func refusalReason(err error) identity.RefusalReason {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == identity.RefusalDomain {
			return identity.RefusalReason(info.GetReason())
		}
	}
	return ""
}

// waitUntilTheCacheAdmits waits until the hub's cache admits the
// certificate of conn: a health check, decided from the cache only, is
// answered.
func waitUntilTheCacheAdmits(ctx context.Context, conn *grpc.ClientConn) {
	GinkgoHelper()
	Eventually(func() error {
		_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}).WithTimeout(10 * time.Second).Should(Succeed())
}

// hubCacheLag, while set, delays each read of the hub's ManagedCluster
// watches by that long: the hub's informer cache shows a Join's or a
// Renew's write later than the API server, as a loaded hub's does at times.
var hubCacheLag atomic.Int64

// lagHubCache makes the hub's cache of ManagedClusters lag by lag for the
// rest of the spec.
func lagHubCache(lag time.Duration) {
	hubCacheLag.Store(int64(lag))
	DeferCleanup(func() { hubCacheLag.Store(0) })
}

// laggingWatch is resp, whose events arrive hubCacheLag late when it
// answers a watch of ManagedClusters.
func laggingWatch(req *http.Request, resp *http.Response) *http.Response {
	if resp == nil || req.Method != http.MethodGet || !strings.HasSuffix(req.URL.Path, "/managedclusters") {
		return resp
	}
	if watch, _ := strconv.ParseBool(req.URL.Query().Get("watch")); watch {
		resp.Body = laggingBody{resp.Body}
	}
	return resp
}

type laggingBody struct{ io.ReadCloser }

func (b laggingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if lag := time.Duration(hubCacheLag.Load()); n > 0 && lag > 0 {
		time.Sleep(lag)
	}
	return n, err
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

var _ = Describe("Anonymous callers", func() {
	It("get ResourceExhausted for a 4 MiB JoinRequest, and 100 of them barely grow the hub's heap", func(ctx SpecContext) {
		huge := &federationv1.JoinRequest{ClusterName: "huge", Token: strings.Repeat("x", 4<<20)}
		before := heapAlloc()
		for range 100 {
			// A source of its own each: the size limit, not the rate, refuses.
			conn := dialOnce(newSource(), nil)
			_, err := federationv1.NewFederationClient(conn).Join(ctx, huge)
			Expect(conn.Close()).To(Succeed())
			Expect(status.Code(err)).To(Equal(codes.ResourceExhausted), "%v", err)
			Expect(status.Convert(err).Message()).To(ContainSubstring("larger than max"))
		}
		// The hub's side of the closed connections goes within moments.
		var growth int64
		Eventually(func() int64 {
			growth = int64(heapAlloc()) - int64(before)
			return growth
		}).WithTimeout(5 * time.Second).Should(BeNumerically("<", 10<<20))
		GinkgoWriter.Printf("heap growth over 100 anonymous 4 MiB JoinRequests: %d KiB\n", growth/1024)
	})

	It("are refused a malformed token without a single read of the hub cluster's API", func(ctx SpecContext) {
		key := newSpokeKey("prod-malformed")
		before := apiReads.Load()
		for _, token := range []string{"", "nope", "ABCDEF.0123456789abcdef", "abcdef.0123456789abcde", strings.Repeat("a", 60<<10)} {
			_, err := federationv1.NewFederationClient(dialFrom(newSource(), nil)).Join(ctx, &federationv1.JoinRequest{ClusterName: "prod-malformed", Token: token, Csr: key.csrPEM})
			Expect(status.Code(err)).To(Equal(codes.Unauthenticated), "%v", err)
		}
		reads := apiReads.Load() - before
		GinkgoWriter.Printf("API reads for 5 malformed-token Joins: %d\n", reads)
		Expect(reads).To(BeZero())
	})

	It("are limited when 200 Join at once from one source, while a real spoke's Join from another succeeds within 2s", func(ctx SpecContext) {
		flooder := federationv1.NewFederationClient(dialFrom(newSource(), nil))
		floodKey := newSpokeKey("flood")
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			codesOf = map[codes.Code]int{}
		)
		start := make(chan struct{})
		for range 200 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				// Well-formed but unknown: each would cost an API read.
				_, err := flooder.Join(ctx, &federationv1.JoinRequest{ClusterName: "flood", Token: "zzzzzz.zzzzzzzzzzzzzzzz", Csr: floodKey.csrPEM})
				mu.Lock()
				codesOf[status.Code(err)]++
				mu.Unlock()
			}()
		}
		token := newToken(ctx, "")
		// The spoke's key exists before the flood: the time measured is the Join's.
		key := newSpokeKey("prod-during-flood")
		close(start)
		began := time.Now()
		_, err := join(ctx, "prod-during-flood", token, key)
		took := time.Since(began)
		wg.Wait()
		GinkgoWriter.Printf("200 concurrent anonymous Joins from one source: %v; real Join took %s\n", codesOf, took)
		Expect(err).NotTo(HaveOccurred())
		Expect(took).To(BeNumerically("<", 2*time.Second))
		Expect(codesOf[codes.ResourceExhausted]).To(BeNumerically(">", 150))
	})

	It("cannot crowd out spokes and viewers with 300 idle connections, which are closed when idle", func(ctx SpecContext) {
		spokeCert := joinedSpoke(ctx, "prod-idle")
		viewer, _ := viewerCertificate("idle-viewer")
		idle := make([]net.Conn, 0, 300)
		DeferCleanup(func() {
			for _, c := range idle {
				_ = c.Close()
			}
		})
		tlsConfig := &tls.Config{RootCAs: poolOf(ca), ServerName: serverName, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS13}
		// From 20 sources, 15 each: within the per-source limit (16).
		var dialer *tls.Dialer
		for i := range 300 {
			if i%15 == 0 {
				dialer = &tls.Dialer{NetDialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(newSource())}}, Config: tlsConfig}
			}
			conn, err := dialer.DialContext(ctx, "tcp", hub.Address())
			Expect(err).NotTo(HaveOccurred())
			c := conn.(*tls.Conn)
			// An HTTP/2 client preface and settings: a live, idle gRPC connection.
			_, err = io.WriteString(c, http2.ClientPreface)
			Expect(err).NotTo(HaveOccurred())
			Expect(http2.NewFramer(c, c).WriteSettings()).To(Succeed())
			idle = append(idle, c)
		}
		opened := time.Now()

		began := time.Now()
		Expect(report(ctx, "prod-idle", spokeCert)).To(Succeed())
		reportTook := time.Since(began)
		began = time.Now()
		Expect(listClusters(ctx, viewer)).To(Succeed())
		queryTook := time.Since(began)
		GinkgoWriter.Printf("with 300 idle anonymous connections: Report acked in %s, ListClusters in %s\n", reportTook, queryTook)
		Expect(reportTook).To(BeNumerically("<", time.Second))
		Expect(queryTook).To(BeNumerically("<", time.Second))

		// Every idle connection is closed by the hub (read until EOF). These
		// clients never answer the hub's GOAWAY ping, so closing takes the
		// idle time plus grpc-go's 5s wait for that ping's ack.
		var (
			wg        sync.WaitGroup
			mu        sync.Mutex
			stillOpen int
			lastClose time.Duration
		)
		deadline := opened.Add(anonymousIdle + 10*time.Second)
		for _, c := range idle {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = c.SetReadDeadline(deadline)
				_, err := io.Copy(io.Discard, c)
				mu.Lock()
				defer mu.Unlock()
				var netErr net.Error
				if errors.As(err, &netErr) && netErr.Timeout() {
					stillOpen++
					return
				}
				lastClose = max(lastClose, time.Since(opened))
			}()
		}
		wg.Wait()
		GinkgoWriter.Printf("idle anonymous connections: %d of 300 still open after %s; the last closed %s after opening\n",
			stillOpen, anonymousIdle+10*time.Second, lastClose.Round(100*time.Millisecond))
		Expect(stillOpen).To(BeZero())

		// One source gets no more than 16 at a time: of 17, one is closed at
		// once (whichever the hub saw last), the others stay open until idle.
		source := &tls.Dialer{NetDialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(newSource())}}, Config: tlsConfig}
		conns := make([]net.Conn, 0, 17)
		for range 17 {
			conn, err := source.DialContext(ctx, "tcp", hub.Address())
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(conn.Close)
			conns = append(conns, conn)
		}
		readUntil := time.Now().Add(anonymousIdle * 3 / 4)
		closedAtOnce := 0
		for _, conn := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = conn.SetReadDeadline(readUntil)
				_, err := io.Copy(io.Discard, conn)
				var netErr net.Error
				if !errors.As(err, &netErr) || !netErr.Timeout() {
					mu.Lock()
					closedAtOnce++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		Expect(closedAtOnce).To(Equal(1), "of 17 anonymous connections from one source, the hub closes one at once")
	})

	It("get Unauthenticated from every method but Join, before their request is read", func(ctx SpecContext) {
		conn := dialFrom(newSource(), nil)
		var methods []string
		for _, svc := range []grpc.ServiceDesc{queryv1.Query_ServiceDesc, federationv1.Federation_ServiceDesc} {
			for _, m := range svc.Methods {
				methods = append(methods, "/"+svc.ServiceName+"/"+m.MethodName)
			}
			for _, s := range svc.Streams {
				methods = append(methods, "/"+svc.ServiceName+"/"+s.StreamName)
			}
		}
		Expect(methods).To(ContainElement(queryv1.Query_ListClusters_FullMethodName))
		for _, method := range methods {
			if method == federationv1.Federation_Join_FullMethodName {
				continue
			}
			callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			stream, err := conn.NewStream(callCtx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
			if err == nil {
				_ = stream.SendMsg(&emptypb.Empty{})
				_ = stream.CloseSend()
				err = stream.RecvMsg(&emptypb.Empty{})
			}
			cancel()
			Expect(status.Code(err)).To(Equal(codes.Unauthenticated), "%s: %v", method, err)
		}
	})

	It("may not join as a reserved name", func(ctx SpecContext) {
		for _, name := range []string{"kube-system", "default", "open-cluster-management-agent", hubNamespace} {
			_, err := join(ctx, name, newToken(ctx, ""), newSpokeKey(name))
			Expect(status.Code(err)).To(Equal(codes.InvalidArgument), "%s: %v", name, err)
		}
		var mc clusterv1.ManagedCluster
		Expect(hubClient.Get(ctx, clientKey("kube-system"), &mc)).NotTo(Succeed())
	})

	It("get a certificate again when a Join is retried with the same token and key, and not with another key", func(ctx SpecContext) {
		token, key := newToken(ctx, ""), newSpokeKey("prod-retry")
		first, err := join(ctx, "prod-retry", token, key)
		Expect(err).NotTo(HaveOccurred())
		retried, err := join(ctx, "prod-retry", token, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(report(ctx, "prod-retry", retried)).To(Succeed())
		// The retry's certificate is the current one: the first is retired.
		Expect(refusalReason(report(ctx, "prod-retry", first))).NotTo(BeEmpty())
		_, err = join(ctx, "prod-retry", token, newSpokeKey("prod-retry"))
		Expect(status.Code(err)).To(Equal(codes.Unauthenticated), "%v", err)
	})
})

var _ = Describe("Spoke connections", func() {
	It("are recycled after MaxConnectionAge, so that a renewed certificate gets used, and the spoke reports again at once", func(ctx SpecContext) {
		cert := joinedSpoke(ctx, "prod-aged")
		streamCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		stream, err := federationv1.NewFederationClient(dialFrom(newSource(), cert)).Report(streamCtx)
		Expect(err).NotTo(HaveOccurred())
		opened := time.Now()
		Expect(stream.Send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Hello{Hello: &federationv1.Hello{ClusterName: "prod-aged", AgentVersion: "abuse", Epoch: 1}}})).To(Succeed())
		Expect(stream.Send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Snapshot{Snapshot: &federationv1.Snapshot{Generation: 1}}})).To(Succeed())
		var recvErr error
		for recvErr == nil {
			_, recvErr = stream.Recv()
		}
		lived := time.Since(opened)
		GinkgoWriter.Printf("Report stream ended after %s (max age %s + grace %s): %v\n", lived.Round(100*time.Millisecond), connectionAge, connectionAgeGrace, recvErr)
		Expect(status.Code(recvErr)).To(Equal(codes.Unavailable), "%v", recvErr)
		Expect(lived).To(BeNumerically("<", connectionAge*11/10+connectionAgeGrace+2*time.Second))
		Expect(report(ctx, "prod-aged", cert)).To(Succeed())
	})
})

var _ = Describe("Certificates", func() {
	It("of a deregistered spoke read nothing from the query API", func(ctx SpecContext) {
		cert := joinedSpoke(ctx, "prod-gone")
		Expect(listClusters(ctx, cert)).To(Succeed())
		Expect(hubClient.Delete(ctx, &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: "prod-gone"}})).To(Succeed())
		Eventually(func() codes.Code { return status.Code(listClusters(ctx, cert)) }).
			WithTimeout(10 * time.Second).Should(Equal(codes.PermissionDenied))
	})

	It("of a revoked viewer are refused at the TLS handshake, and a connection opened before ends its calls", func(ctx SpecContext) {
		viewer, serial := viewerCertificate("revoked-viewer")
		Expect(listClusters(ctx, viewer)).To(Succeed())
		before := queryv1.NewQueryClient(dialFrom(newSource(), viewer))
		_, err := before.ListClusters(ctx, &queryv1.ListClustersRequest{})
		Expect(err).NotTo(HaveOccurred())
		watch, err := before.Watch(ctx, &queryv1.WatchRequest{})
		Expect(err).NotTo(HaveOccurred())
		watchEnded := make(chan error, 1)
		go func() {
			for {
				if _, err := watch.Recv(); err != nil {
					watchEnded <- err
					return
				}
			}
		}()
		Expect(registry.Revoke(ctx, hubClient, hubNamespace, serial, "abuse suite", time.Now())).To(Succeed())
		// A Watch opened before the revocation ends with it, however quiet.
		var watchErr error
		Eventually(watchEnded).WithTimeout(10 * time.Second).Should(Receive(&watchErr))
		Expect(status.Code(watchErr)).To(Equal(codes.PermissionDenied), "%v", watchErr)
		Eventually(func() string { return status.Convert(listClusters(ctx, viewer)).Message() }).
			WithTimeout(5 * time.Second).Should(ContainSubstring("bad certificate"))
		Expect(status.Code(listClusters(ctx, viewer))).To(Equal(codes.Unavailable))
		_, err = before.ListClusters(ctx, &queryv1.ListClustersRequest{})
		Expect(status.Code(err)).To(Equal(codes.PermissionDenied), "%v", err)
		other, _ := viewerCertificate("other-viewer")
		Expect(listClusters(ctx, other)).To(Succeed())
	})

	It("issued before a re-join are refused from the moment the Join is answered, also on a connection opened before, whose Report stream ends unapplied at its next Snapshot", func(ctx SpecContext) {
		old := joinedSpoke(ctx, "prod-rejoin")
		// Opened before the re-join, so that the calls after it go out at
		// once, without a handshake, while the hub's cache still shows the
		// record before the Join, which admits the old certificate.
		oldConn := dialFrom(newSource(), old)
		waitUntilTheCacheAdmits(ctx, oldConn)
		lagHubCache(time.Second)
		openStream, err := openReport(ctx, oldConn, "prod-rejoin")
		Expect(err).NotTo(HaveOccurred())
		current, err := join(ctx, "prod-rejoin", newToken(ctx, "prod-rejoin"), newSpokeKey("prod-rejoin"))
		Expect(err).NotTo(HaveOccurred())

		// Not a Heartbeat: an old key that never sends one must not feed
		// the inventory either.
		Expect(openStream.Send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Snapshot{Snapshot: &federationv1.Snapshot{Generation: 2}}})).To(Succeed())
		for attempt := range 5 {
			err = reportOn(ctx, oldConn, "prod-rejoin")
			Expect(status.Code(err)).To(Equal(codes.PermissionDenied), "Report right after the re-join, attempt %d: %v", attempt, err)
			Expect(refusalReason(err)).To(Equal(identity.RefusedEarlierRegistration), "attempt %d", attempt)
		}
		_, err = renewOn(ctx, oldConn, "prod-rejoin")
		Expect(status.Code(err)).To(Equal(codes.PermissionDenied), "%v", err)
		_, err = queryv1.NewQueryClient(oldConn).ListClusters(ctx, &queryv1.ListClustersRequest{})
		Expect(status.Code(err)).To(Equal(codes.PermissionDenied), "%v", err)
		// A health check never reaches the API server: until the cache
		// shows the Join it is Unavailable, then refused; never SERVING.
		_, err = healthpb.NewHealthClient(oldConn).Check(ctx, &healthpb.HealthCheckRequest{})
		Expect(status.Code(err)).To(BeElementOf(codes.Unavailable, codes.PermissionDenied), "%v", err)
		// The stream opened before ended at its Snapshot, without an Ack.
		var streamErr error
		for streamErr == nil {
			var msg *federationv1.HubMessage
			msg, streamErr = openStream.Recv()
			Expect(msg.GetAck()).To(BeNil(), "the hub applied a Snapshot of a retired certificate")
		}
		Expect(status.Code(streamErr)).To(Equal(codes.PermissionDenied), "%v", streamErr)
		Expect(refusalReason(streamErr)).To(Equal(identity.RefusedEarlierRegistration))

		Expect(report(ctx, "prod-rejoin", current)).To(Succeed())
	})

	It("replaced by a Renew are refused after the overlap", func(ctx SpecContext) {
		old := joinedSpoke(ctx, "prod-renew")
		// Taken before the call: the hub starts the overlap while answering.
		renewedAt := time.Now()
		lost, err := renew(ctx, "prod-renew", old)
		Expect(err).NotTo(HaveOccurred())
		// Opened before the second Renew, so that the calls after it go out
		// at once, while the hub's cache still shows the lost certificate as
		// current.
		lostConn := dialFrom(newSource(), lost)
		waitUntilTheCacheAdmits(ctx, lostConn)
		lagHubCache(time.Second)
		Expect(reportOn(ctx, lostConn, "prod-renew")).To(Succeed())
		// The answer was lost: the agent renews again with the replaced
		// certificate, within the overlap, and gets a certificate; the lost
		// one is retired unused, from the moment the Renew is answered.
		renewed, err := renew(ctx, "prod-renew", old)
		Expect(err).NotTo(HaveOccurred())
		for attempt := range 5 {
			Expect(refusalReason(reportOn(ctx, lostConn, "prod-renew"))).To(Equal(identity.RefusedReplacedCertificate), "Report right after the Renew, attempt %d", attempt)
		}
		// Within the overlap the replaced certificate still works. A call
		// that returns after the overlap may be refused either way, so only
		// one answered in time is held to it (5 s leaves a loaded CI machine
		// ample room for the two Renews above).
		err = report(ctx, "prod-renew", old)
		if time.Since(renewedAt) < renewalOverlap {
			Expect(err).To(Succeed(), "within the overlap the replaced certificate still works")
		} else {
			GinkgoWriter.Printf("the two Renews took longer than the overlap (%s); the within-overlap check is void this run\n", renewalOverlap)
		}
		Eventually(func() identity.RefusalReason { return refusalReason(report(ctx, "prod-renew", old)) }).
			WithTimeout(renewalOverlap + 5*time.Second).Should(Equal(identity.RefusedReplacedCertificate))
		Expect(time.Since(renewedAt)).To(BeNumerically(">=", renewalOverlap))
		Expect(report(ctx, "prod-renew", renewed)).To(Succeed())

		// Past the overlap, the retired certificate renews only for the key
		// of the current one: the agent that stored that key before asking,
		// then lost the certificate, recovers without a new token; any other
		// key is refused.
		_, err = renew(ctx, "prod-renew", old)
		Expect(status.Code(err)).To(Equal(codes.PermissionDenied), "%v", err)
		recovered, err := renewForKey(ctx, "prod-renew", old, renewed.PrivateKey.(crypto.Signer))
		Expect(err).NotTo(HaveOccurred())
		Expect(report(ctx, "prod-renew", recovered)).To(Succeed())
		Expect(refusalReason(report(ctx, "prod-renew", old))).To(Equal(identity.RefusedReplacedCertificate))
	})
})

func poolOf(ca *pki.CA) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return pool
}

func clientKey(name string) client.ObjectKey { return client.ObjectKey{Name: name} }

var _ = Describe("Authenticated connections", func() {
	It("of one certificate are capped, while the other spokes are served", func(ctx SpecContext) {
		capped := joinedSpoke(ctx, "prod-capped")
		other := joinedSpoke(ctx, "prod-uncapped")
		const attempts = 20
		var (
			wg        sync.WaitGroup
			mu        sync.Mutex
			stillOpen int
		)
		conns := make([]net.Conn, 0, attempts)
		DeferCleanup(func() {
			for _, c := range conns {
				_ = c.Close()
			}
		})
		for range attempts {
			// A source of its own each: the certificate's cap, not the
			// source's, applies.
			dialer := &tls.Dialer{NetDialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(newSource())}}, Config: &tls.Config{
				RootCAs: poolOf(ca), ServerName: serverName, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{*capped},
			}}
			conn, err := dialer.DialContext(ctx, "tcp", hub.Address())
			if err != nil {
				continue // refused within the handshake
			}
			c := conn.(*tls.Conn)
			_, _ = io.WriteString(c, http2.ClientPreface)
			_ = http2.NewFramer(c, c).WriteSettings()
			conns = append(conns, c)
		}
		// Well within the suite's connection age (3s): only the cap closes.
		readUntil := time.Now().Add(time.Second)
		for _, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = c.SetReadDeadline(readUntil)
				_, err := io.Copy(io.Discard, c)
				var netErr net.Error
				if errors.As(err, &netErr) && netErr.Timeout() {
					mu.Lock()
					stillOpen++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		GinkgoWriter.Printf("%d connections with one spoke certificate: %d left open\n", attempts, stillOpen)
		Expect(stillOpen).To(Equal(server.DefaultMaxConnectionsPerCertificate))
		Expect(report(ctx, "prod-uncapped", other)).To(Succeed())
		for _, c := range conns {
			_ = c.Close()
		}
		Eventually(func() error { return report(ctx, "prod-capped", capped) }).WithTimeout(5 * time.Second).Should(Succeed())
	})

	It("of a deregistered spoke calling in a loop cost the hub cluster's API at most one read, and get no health answer", func(ctx SpecContext) {
		cert := joinedSpoke(ctx, "prod-looping")
		Expect(report(ctx, "prod-looping", cert)).To(Succeed())
		Expect(hubClient.Delete(ctx, &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: "prod-looping"}})).To(Succeed())
		Eventually(func() identity.RefusalReason { return refusalReason(report(ctx, "prod-looping", cert)) }).
			WithTimeout(10 * time.Second).Should(Equal(identity.RefusedNotRegistered))

		conn := dialFrom(newSource(), cert)
		fed, health := federationv1.NewFederationClient(conn), healthpb.NewHealthClient(conn)
		csr := newSpokeKey("prod-looping").csrPEM
		before := apiReads.Load()
		for range 50 {
			_, err := fed.Renew(ctx, &federationv1.RenewRequest{Csr: csr})
			Expect(refusalReason(err)).To(Equal(identity.RefusedNotRegistered), "%v", err)
			_, err = health.Check(ctx, &healthpb.HealthCheckRequest{})
			Expect(status.Code(err)).To(Equal(codes.PermissionDenied), "%v", err)
		}
		reads := apiReads.Load() - before
		GinkgoWriter.Printf("API reads for 50 Renews and 50 health checks of a deregistered spoke: %d\n", reads)
		Expect(reads).To(BeNumerically("<=", 1))
	})
})
