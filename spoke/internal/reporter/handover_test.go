package reporter

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/pki"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// handoverHub renews certificates and records, in the order it sees them,
// every stream's Hello, Snapshot, Heartbeat and end as "<stream>:<event>";
// it answers nothing on its own: the test acks through the streams it is
// handed, and ends a stream when the test sends on kick.
type handoverHub struct {
	federationv1.UnimplementedFederationServer
	ca     *pki.CA
	opened atomic.Int32
	events chan string
	// kick ends the stream that receives from it (nil: never).
	kick    chan struct{}
	streams chan grpc.BidiStreamingServer[federationv1.SpokeMessage, federationv1.HubMessage]
}

func (h *handoverHub) Renew(_ context.Context, req *federationv1.RenewRequest) (*federationv1.RenewResponse, error) {
	cert, err := h.ca.SignClientCSR(req.GetCsr(), testCluster, []string{identity.SpokeOrganization}, nil, time.Hour)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &federationv1.RenewResponse{Certificate: cert, Ca: h.ca.CertPEM}, nil
}

func (h *handoverHub) Report(stream grpc.BidiStreamingServer[federationv1.SpokeMessage, federationv1.HubMessage]) error {
	n := h.opened.Add(1)
	defer func() { h.events <- fmt.Sprintf("%d:closed", n) }()
	h.streams <- stream
	ended := make(chan error, 1)
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				ended <- err
				return
			}
			switch {
			case msg.GetHello() != nil:
				h.events <- fmt.Sprintf("%d:hello", n)
			case msg.GetSnapshot() != nil:
				h.events <- fmt.Sprintf("%d:snapshot", n)
			case msg.GetHeartbeat() != nil:
				h.events <- fmt.Sprintf("%d:heartbeat", n)
			}
		}
	}()
	select {
	case err := <-ended:
		return err
	case <-h.kick:
		return status.Error(codes.Unavailable, "the hub ended the stream")
	}
}

// expectEvent fails the test unless the hub's next event is want.
func (h *handoverHub) expectEvent(t *testing.T, want string, within time.Duration) {
	t.Helper()
	select {
	case got := <-h.events:
		if got != want {
			t.Fatalf("hub saw %q, want %q next", got, want)
		}
	case <-time.After(within):
		t.Fatalf("hub did not see %q within %s", want, within)
	}
}

func TestRenewalMovesTheStreamMakeBeforeBreak(t *testing.T) {
	ca, err := pki.NewCA("hub-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	hub := &handoverHub{ca: ca, events: make(chan string, 64),
		streams: make(chan grpc.BidiStreamingServer[federationv1.SpokeMessage, federationv1.HubMessage], 8)}
	address := serveTLS(t, ca, hub)
	// A certificate obtained just now with 3s of life: renewal is due in 2s.
	certPEM, keyPEM, err := ca.IssueClient(testCluster, nil, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := pki.ParseCertificate(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	scheme := testScheme(t)
	objects := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		wrappers.MakeMachine("gpu", "team-a").Type("compute-xlarge", "40", "128Gi", 2).Obj(),
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testSecret,
				Annotations: map[string]string{obtainedAtAnnotation: obtainedAtValue(time.Now(), leaf)}},
			Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
		},
	).Build()
	startReporter(t, ca, address, scheme, objects, "", nil)

	hub.expectEvent(t, "1:hello", 10*time.Second)
	hub.expectEvent(t, "1:snapshot", 10*time.Second)
	first := <-hub.streams
	ack := &federationv1.HubMessage{Kind: &federationv1.HubMessage_Ack{Ack: &federationv1.Ack{Generation: 1}}}
	if err := first.Send(ack); err != nil {
		t.Fatal(err)
	}

	// The renewed certificate opens a second stream while the first is up.
	hub.expectEvent(t, "2:hello", 10*time.Second)
	hub.expectEvent(t, "2:snapshot", 5*time.Second)
	data, err := secretData(context.Background(), objects)
	if err != nil {
		t.Fatal(err)
	}
	if string(data[corev1.TLSCertKey]) == string(certPEM) {
		t.Error("the renewed certificate was not stored")
	}
	// Until the hub answers on the second, the first stays open.
	select {
	case got := <-hub.events:
		t.Fatalf("hub saw %q before it answered the new stream; the first stream must stay open until then", got)
	case <-time.After(500 * time.Millisecond):
	}
	second := <-hub.streams
	if err := second.Send(ack); err != nil {
		t.Fatal(err)
	}
	hub.expectEvent(t, "1:closed", 5*time.Second)
}
