package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "open-cluster-management.io/api/cluster/v1"

	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/hub/internal/store"
	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/pki"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// testHub is a Server on a loopback listener with an in-memory CA, a store,
// and, instead of ManagedClusters, one registration per cluster name (UID
// testUID(name)) that accepts its client unless rejected.
type testHub struct {
	ca     *pki.CA
	store  *store.Store
	server *Server
	addr   string

	mu       sync.Mutex
	rejected map[string]bool
	// registeredAgain marks clusters whose registration was replaced: their
	// UID is no longer testUID(name).
	registeredAgain map[string]bool
	// deregistered marks clusters without a registration.
	deregistered map[string]bool
}

type refusingJoiner struct{}

func (refusingJoiner) Join(context.Context, *federationv1.JoinRequest) (*federationv1.JoinResponse, error) {
	return nil, status.Error(codes.Unauthenticated, "test joiner refuses every token")
}

func (refusingJoiner) Renew(_ context.Context, spoke identity.Spoke, _ *federationv1.RenewRequest) (*federationv1.RenewResponse, error) {
	return &federationv1.RenewResponse{Certificate: []byte("renewed " + spoke.Cluster + " " + spoke.RegistrationUID)}, nil
}

// testUID is the UID of cluster's registration at the test hub.
func testUID(cluster string) string { return "uid-" + cluster }

func startTestHub(tb testing.TB) *testHub {
	tb.Helper()
	return startTestHubWith(tb, nil)
}

// startTestHubWith is startTestHub with configure changing the options.
func startTestHubWith(tb testing.TB, configure func(*Options)) *testHub {
	tb.Helper()
	ca, err := pki.NewCA("test-ca", time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	certPEM, keyPEM, err := ca.IssueServer("hub", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	serving, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	h := &testHub{ca: ca, store: store.New(nil, time.Minute), rejected: map[string]bool{}, registeredAgain: map[string]bool{}, deregistered: map[string]bool{}}
	metrics, err := NewMetrics(prometheus.NewRegistry(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	h.addr = lis.Addr().String()
	opts := Options{
		Listener: lis,
		TLS:      identity.ServerTLS(func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &serving, nil }, pool),
		Store:    h.store,
		Joiner:   refusingJoiner{},
		Admit: func(_ context.Context, spoke identity.Spoke) error {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.deregistered[spoke.Cluster] {
				return registry.Admission(nil, spoke, time.Now())
			}
			uid := testUID(spoke.Cluster)
			if h.registeredAgain[spoke.Cluster] {
				uid += "-again"
			}
			return registry.Admission(&clusterv1.ManagedCluster{
				ObjectMeta: metav1.ObjectMeta{Name: spoke.Cluster, UID: types.UID(uid)},
				Spec:       clusterv1.ManagedClusterSpec{HubAcceptsClient: !h.rejected[spoke.Cluster]},
			}, spoke, time.Now())
		},
		Metrics: metrics,
		Log:     logr.Discard(),
	}
	if configure != nil {
		configure(&opts)
	}
	srv, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	h.server = srv
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("server: %v", err)
		}
	})
	return h
}

// certificate issues a client certificate for cn with organizations, bound
// to cn's registration at the test hub.
func (h *testHub) certificate(tb testing.TB, cn string, organizations ...string) *tls.Certificate {
	tb.Helper()
	return h.certificateWithURIs(tb, cn, organizations, identity.RegistrationURI(cn, testUID(cn)))
}

// certificateWithURIs issues a client certificate for cn with organizations
// and exactly the URI SANs uris.
func (h *testHub) certificateWithURIs(tb testing.TB, cn string, organizations []string, uris ...*url.URL) *tls.Certificate {
	tb.Helper()
	certPEM, keyPEM := h.certificatePEM(tb, cn, organizations, uris...)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		tb.Fatal(err)
	}
	return &cert
}

// certificatePEM issues a client certificate for cn with organizations and
// exactly the URI SANs uris, PEM-encoded with its key.
func (h *testHub) certificatePEM(tb testing.TB, cn string, organizations []string, uris ...*url.URL) (certPEM, keyPEM []byte) {
	tb.Helper()
	csrPEM, keyPEM, err := pki.NewCSR(cn)
	if err != nil {
		tb.Fatal(err)
	}
	certPEM, err = h.ca.SignClientCSR(csrPEM, cn, organizations, uris, time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	return certPEM, keyPEM
}

// client dials the hub with cert (nil: none).
// reportingStream opens a Report stream of cluster, which the hub
// acknowledged a first Snapshot on.
func (h *testHub) reportingStream(t *testing.T, cluster string) federationv1.Federation_ReportClient {
	t.Helper()
	fed := h.client(t, h.certificate(t, cluster, identity.SpokeOrganization))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := fed.Report(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*federationv1.SpokeMessage{hello(cluster, 1), snapshotMsg(1)} {
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("waiting for the ack: %v", err)
	}
	return stream
}

func (h *testHub) client(tb testing.TB, cert *tls.Certificate) federationv1.FederationClient {
	tb.Helper()
	cfg, err := identity.ClientTLS(h.ca.CertPEM, cert, "127.0.0.1")
	if err != nil {
		tb.Fatal(err)
	}
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return federationv1.NewFederationClient(conn)
}

func hello(cluster string, epoch uint64) *federationv1.SpokeMessage {
	return &federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Hello{Hello: &federationv1.Hello{ClusterName: cluster, AgentVersion: "test", Epoch: epoch}}}
}

func snapshotMsg(gen uint64, machines ...*federationv1.Machine) *federationv1.SpokeMessage {
	return &federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Snapshot{Snapshot: &federationv1.Snapshot{Generation: gen, Machines: machines}}}
}

func deltaMsg(gen uint64, upserts ...*federationv1.Machine) *federationv1.SpokeMessage {
	return &federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Delta{Delta: &federationv1.Delta{Generation: gen, Upserts: upserts}}}
}

// refusalInfo returns the ErrorInfo of err's status, nil when it has none.
func refusalInfo(err error) *errdetails.ErrorInfo {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// wantRefusal checks that err is the hub's PermissionDenied refusal of
// cluster's certificate for reason, with its ErrorInfo.
func wantRefusal(tb testing.TB, err error, cluster string, reason registry.RefusalReason) {
	tb.Helper()
	if got := status.Code(err); got != codes.PermissionDenied {
		tb.Errorf("code = %v (%v), want PermissionDenied", got, err)
	}
	want := &errdetails.ErrorInfo{Reason: string(reason), Domain: "imperator.tenzen-y.io", Metadata: map[string]string{"cluster": cluster}}
	if diff := cmp.Diff(want, refusalInfo(err), protocmp.Transform()); diff != "" {
		tb.Errorf("ErrorInfo (-want +got):\n%s", diff)
	}
}
