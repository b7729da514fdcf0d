package reporter

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/pki"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	"github.com/imperator-federation/imperator/spoke/internal/config"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// objectCache is a cache whose informers are fakes and whose reads come
// from a fake client.
type objectCache struct {
	*informertest.FakeInformers
	reader client.Reader
}

func (c objectCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.reader.Get(ctx, key, obj, opts...)
}

func (c objectCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.reader.List(ctx, list, opts...)
}

// recordingHub is a Federation server that hands each Report stream to the
// test and forwards what the spoke sends on it.
type recordingHub struct {
	federationv1.UnimplementedFederationServer
	streams  chan grpc.BidiStreamingServer[federationv1.SpokeMessage, federationv1.HubMessage]
	received chan *federationv1.SpokeMessage
	// join answers Join; nil: Unimplemented.
	join func(context.Context, *federationv1.JoinRequest) (*federationv1.JoinResponse, error)
}

func (h *recordingHub) Join(ctx context.Context, req *federationv1.JoinRequest) (*federationv1.JoinResponse, error) {
	if h.join == nil {
		return h.UnimplementedFederationServer.Join(ctx, req)
	}
	return h.join(ctx, req)
}

func (h *recordingHub) Report(stream grpc.BidiStreamingServer[federationv1.SpokeMessage, federationv1.HubMessage]) error {
	select {
	case h.streams <- stream:
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			return err
		}
		select {
		case h.received <- msg:
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

// next returns the spoke's next message, failing the test when none comes.
func (h *recordingHub) next(t *testing.T) *federationv1.SpokeMessage {
	t.Helper()
	select {
	case msg := <-h.received:
		return msg
	case <-time.After(10 * time.Second):
		t.Fatal("the spoke sent nothing within 10s")
		return nil
	}
}

// startHub serves a recordingHub over TLS on loopback with a serving
// certificate of ca; join, when not nil, answers Join.
func startHub(t *testing.T, ca *pki.CA, join func(context.Context, *federationv1.JoinRequest) (*federationv1.JoinResponse, error)) (*recordingHub, string) {
	t.Helper()
	hub := &recordingHub{
		streams:  make(chan grpc.BidiStreamingServer[federationv1.SpokeMessage, federationv1.HubMessage], 1),
		received: make(chan *federationv1.SpokeMessage, 16),
		join:     join,
	}
	return hub, serveTLS(t, ca, hub)
}

// serveTLS serves hub over TLS on loopback with a serving certificate of
// ca, requiring client certificates of ca for the calls that need one,
// until the test ends, and returns its address.
func serveTLS(t *testing.T, ca *pki.CA, hub federationv1.FederationServer) string {
	t.Helper()
	certPEM, keyPEM, err := ca.IssueServer("127.0.0.1", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	clientCAs := x509.NewCertPool()
	clientCAs.AddCert(ca.Cert)
	tlsConfig := identity.ServerTLS(func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &serving, nil }, clientCAs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer(grpc.Creds(credentials.NewTLS(tlsConfig)))
	federationv1.RegisterFederationServer(server, hub)
	go func() { _ = server.Serve(lis) }()
	t.Cleanup(server.Stop)
	return lis.Addr().String()
}

// reporting starts a Reporter of cluster alpha, already joined, with one
// Machine "gpu", against a recording hub, until the test ends. It returns
// the hub and the client holding the spoke's objects.
func reporting(t *testing.T, debounce time.Duration) (*recordingHub, *Reporter, client.Client) {
	t.Helper()
	const cluster, namespace, secretName = "alpha", "imperator-system", "imperator-hub-credentials"
	ca, err := pki.NewCA("hub-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	hub, address := startHub(t, ca, nil)
	caFile := filepath.Join(t.TempDir(), "hub-ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	// A certificate from an earlier join: the reporter reports with it.
	certPEM, keyPEM, err := ca.IssueClient(cluster, nil, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	scheme := testScheme(t)
	objects := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		wrappers.MakeMachine("gpu", "team-a").Type("compute-xlarge", "40", "128Gi", 2).Obj(),
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: secretName},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
		},
	).Build()

	r := runUntilTheTestEnds(t, Options{
		Cache:     objectCache{FakeInformers: &informertest.FakeInformers{Scheme: scheme}, reader: objects},
		Client:    objects,
		Namespace: namespace,
		Hub: config.Hub{
			Address: address, ClusterName: cluster, CAFile: caFile,
			CredentialsSecret: secretName, ReportDebounce: debounce,
		},
		Token: func() (string, error) { return "", nil },
		// No heartbeat during the test: every message is a reply to the hub.
		HeartbeatInterval: time.Hour,
		Log:               logr.Discard(),
	})

	return hub, r, objects
}

func TestReporterSendsASnapshotWhenTheHubAsksForOne(t *testing.T) {
	const cluster = "alpha"
	hub, _, _ := reporting(t, 10*time.Millisecond)
	if hello := hub.next(t).GetHello(); hello.GetClusterName() != cluster {
		t.Fatalf("first message: Hello for %q, want one for %q", hello.GetClusterName(), cluster)
	}
	snapshot := hub.next(t).GetSnapshot()
	if snapshot == nil || len(snapshot.GetMachines()) != 1 || snapshot.GetMachines()[0].GetName() != "gpu" {
		t.Fatalf("second message: %v, want a Snapshot of Machine gpu", snapshot)
	}

	stream := <-hub.streams
	if err := stream.Send(&federationv1.HubMessage{Kind: &federationv1.HubMessage_Resync{Resync: &federationv1.Resync{Reason: "generation gap"}}}); err != nil {
		t.Fatal(err)
	}
	resent := hub.next(t).GetSnapshot()
	if resent == nil {
		t.Fatal("after a Resync the spoke sent something else than a Snapshot")
	}
	if resent.GetGeneration() <= snapshot.GetGeneration() || len(resent.GetMachines()) != 1 {
		t.Errorf("Snapshot after Resync: generation %d with %d Machines, want a generation above %d with Machine gpu",
			resent.GetGeneration(), len(resent.GetMachines()), snapshot.GetGeneration())
	}
}

// The first change after a quiet period goes to the hub at once, not after
// the batching window: with a window of an hour, the change still arrives.
func TestReporterSendsTheFirstChangeAfterAQuietPeriodAtOnce(t *testing.T) {
	hub, r, objects := reporting(t, time.Hour)
	ctx := context.Background()
	if hub.next(t).GetHello() == nil || hub.next(t).GetSnapshot() == nil {
		t.Fatal("want a Hello, then a Snapshot")
	}

	var m imperatorv1alpha1.Machine
	if err := objects.Get(ctx, client.ObjectKey{Name: "gpu"}, &m); err != nil {
		t.Fatal(err)
	}
	m.Spec.MachineTypes[0].Available = 1
	if err := objects.Update(ctx, &m); err != nil {
		t.Fatal(err)
	}
	r.signal()
	delta := hub.next(t).GetDelta()
	if delta == nil || len(delta.GetUpserts()) != 1 || delta.GetUpserts()[0].GetTypes()[0].GetAvailable() != 1 {
		t.Fatalf("after one change: %v, want a Delta with the new available", delta)
	}
}
