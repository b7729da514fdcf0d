package reporter

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/imperator-federation/imperator/internal/pki"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// secretWrites fails the credentials Secret's updates that fail says
// should fail, while blocked, and counts the failures.
type secretWrites struct {
	mu      sync.Mutex
	blocked bool
	failed  int
	fail    func(*corev1.Secret) bool
}

func (w *secretWrites) update(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
	w.mu.Lock()
	if s, ok := obj.(*corev1.Secret); ok && w.blocked && s.Name == testSecret && w.fail(s) {
		w.failed++
		w.mu.Unlock()
		return apierrors.NewServiceUnavailable("etcd is being restarted")
	}
	w.mu.Unlock()
	return c.Update(ctx, obj, opts...)
}

func (w *secretWrites) unblock() (failed int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.blocked = false
	return w.failed
}

// clientCertificate is the DER of the client certificate of stream.
func clientCertificate(t *testing.T, stream grpc.ServerStream) []byte {
	t.Helper()
	p, ok := peer.FromContext(stream.Context())
	if !ok {
		t.Fatal("stream without peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		t.Fatal("stream without a client certificate")
	}
	return info.State.PeerCertificates[0].Raw
}

func TestRenewedCertificateIsUsedAtOnceAndStoredWhenTheSecretIsWritableAgain(t *testing.T) {
	cases := map[string]struct {
		// failWrite says which Secret updates fail while writes are blocked;
		// old is the certificate stored before the renewal.
		failWrite func(secret *corev1.Secret, old []byte) bool
		// wantPendingKeyStored: the key of the renewed certificate is in the
		// Secret as pending.key while the certificate write fails.
		wantPendingKeyStored bool
	}{
		"the pending key is stored, writing the renewed certificate fails": {
			failWrite:            func(s *corev1.Secret, old []byte) bool { return !bytes.Equal(s.Data[corev1.TLSCertKey], old) },
			wantPendingKeyStored: true,
		},
		"no write of the Secret succeeds through the renewal window": {
			failWrite: func(*corev1.Secret, []byte) bool { return true },
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ca, err := pki.NewCA("hub-ca", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			hub := &handoverHub{ca: ca, events: make(chan string, 256), kick: make(chan struct{}),
				streams: make(chan grpc.BidiStreamingServer[federationv1.SpokeMessage, federationv1.HubMessage], 8)}
			address := serveTLS(t, ca, hub)
			// Obtained just now with 6s of life: renewal is due in 4s, with a
			// key kept in memory from 5s.
			oldPEM, oldKeyPEM, err := ca.IssueClient(testCluster, nil, 6*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			oldLeaf, err := pki.ParseCertificate(oldPEM)
			if err != nil {
				t.Fatal(err)
			}
			writes := &secretWrites{blocked: true, fail: func(s *corev1.Secret) bool { return tc.failWrite(s, oldPEM) }}
			scheme := testScheme(t)
			objects := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
				wrappers.MakeMachine("gpu", "team-a").Type("compute-xlarge", "40", "128Gi", 2).Obj(),
				&corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testSecret,
						Annotations: map[string]string{obtainedAtAnnotation: obtainedAtValue(time.Now(), oldLeaf)}},
					Type: corev1.SecretTypeTLS,
					Data: map[string][]byte{corev1.TLSCertKey: oldPEM, corev1.TLSPrivateKeyKey: oldKeyPEM},
				},
			).WithInterceptorFuncs(interceptor.Funcs{Update: writes.update}).Build()
			startReporter(t, ca, address, scheme, objects, "", func(o *Options) { o.HeartbeatInterval = 200 * time.Millisecond })

			ack := &federationv1.HubMessage{Kind: &federationv1.HubMessage_Ack{Ack: &federationv1.Ack{Generation: 1}}}
			hub.expectEvent(t, "1:hello", 10*time.Second)
			first := <-hub.streams
			if err := first.Send(ack); err != nil {
				t.Fatal(err)
			}
			// Heartbeats on the first stream until the renewal opens the second.
			var second grpc.BidiStreamingServer[federationv1.SpokeMessage, federationv1.HubMessage]
			for second == nil {
				select {
				case second = <-hub.streams:
				case <-hub.events:
				case <-time.After(10 * time.Second):
					t.Fatal("no second stream within 10s: the renewed certificate was not used")
				}
			}
			renewed := clientCertificate(t, second)
			if bytes.Equal(renewed, oldLeaf.Raw) {
				t.Fatal("the second stream uses the replaced certificate")
			}
			if err := second.Send(ack); err != nil {
				t.Fatal(err)
			}

			// The second stream carries heartbeats while nothing is stored,
			// and the first ends once the hub answered the second.
			hub.awaitHeartbeats(t, 2, "1:closed")
			// A reconnect meanwhile uses the renewed certificate, not the
			// replaced one the Secret still holds (which the hub would
			// refuse once its renewal overlap ends).
			hub.kick <- struct{}{}
			select {
			case third := <-hub.streams:
				if !bytes.Equal(clientCertificate(t, third), renewed) {
					t.Fatal("after a reconnect the agent streams with another certificate than the renewed one")
				}
				if err := third.Send(ack); err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the agent did not reconnect within 10s")
			}
			hub.awaitHeartbeats(t, 3, "2:closed")
			data, err := secretData(context.Background(), objects)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(data[corev1.TLSCertKey], oldPEM) {
				t.Fatal("the Secret changed while its writes fail; the test's interceptor is not in the way")
			}
			if got := publicKeyIs(data[pendingKeyKey], renewed); got != tc.wantPendingKeyStored {
				t.Errorf("pending.key is the renewed certificate's key: %t, want %t", got, tc.wantPendingKeyStored)
			}

			if failed := writes.unblock(); failed == 0 {
				t.Fatal("no Secret write failed")
			}
			stored := waitForStoredCertificateOtherThan(t, objects, oldPEM)
			cert, err := pki.ParseCertificate(stored[corev1.TLSCertKey])
			if err != nil {
				t.Fatalf("stored certificate: %v", err)
			}
			if !bytes.Equal(cert.Raw, renewed) {
				t.Error("the Secret holds another certificate than the one the agent streams with")
			}
			if !publicKeyIs(stored[corev1.TLSPrivateKeyKey], renewed) {
				t.Error("the stored key is not the key of the certificate in use")
			}
			if _, ok := stored[pendingKeyKey]; ok {
				t.Error("the Secret still holds a pending key after the renewed certificate was stored")
			}
			// The stream stays on the renewed certificate.
			settled := time.After(time.Second)
			for done := false; !done; {
				select {
				case ev := <-hub.events:
					if ev == "3:closed" || ev == "4:hello" {
						t.Fatalf("hub saw %q after the certificate was stored: the stream must stay on it", ev)
					}
				case <-settled:
					done = true
				}
			}
		})
	}
}

// awaitHeartbeats waits for 3 heartbeats on stream and for the event
// alsoWant, failing the test when another stream opens or stream closes.
func (h *handoverHub) awaitHeartbeats(t *testing.T, stream int, alsoWant string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	heartbeat, closed, next := fmt.Sprintf("%d:heartbeat", stream), fmt.Sprintf("%d:closed", stream), fmt.Sprintf("%d:hello", stream+1)
	heartbeats, sawAlso := 0, false
	for heartbeats < 3 || !sawAlso {
		select {
		case ev := <-h.events:
			switch ev {
			case heartbeat:
				heartbeats++
			case alsoWant:
				sawAlso = true
			case closed, next:
				t.Fatalf("hub saw %q while the renewed certificate was not stored: the agent must keep streaming with it", ev)
			}
		case <-deadline:
			t.Fatalf("within 10s: %d heartbeats on stream %d (want 3), %q seen: %t", heartbeats, stream, alsoWant, sawAlso)
		}
	}
}

// publicKeyIs reports whether keyPEM is the private key of the certificate
// certDER.
func publicKeyIs(keyPEM, certDER []byte) bool {
	key, err := pki.ParsePrivateKey(keyPEM)
	if err != nil {
		return false
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return false
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(cert.PublicKey)
}

// waitForStoredCertificateOtherThan waits until the credentials Secret
// holds a certificate other than old, and returns its data.
func waitForStoredCertificateOtherThan(t *testing.T, c client.Reader, old []byte) map[string][]byte {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := secretData(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		if len(data[corev1.TLSCertKey]) > 0 && !bytes.Equal(data[corev1.TLSCertKey], old) {
			return data
		}
		if time.Now().After(deadline) {
			t.Fatal("the renewed certificate was not stored within 10s of the Secret becoming writable")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// csrRecordingHub is a handoverHub that records the CSR of every Renew.
type csrRecordingHub struct {
	*handoverHub
	csrs chan []byte
}

func (h csrRecordingHub) Renew(ctx context.Context, req *federationv1.RenewRequest) (*federationv1.RenewResponse, error) {
	h.csrs <- req.GetCsr()
	return h.handoverHub.Renew(ctx, req)
}

// An agent restarted before it could store a renewed certificate finds the
// replaced certificate and, as pending request, the renewed one's key; the
// hub accepts the replaced certificate for its renewal overlap.
func TestRestartedAgentRenewsAtOnceWithThePendingKeyOfTheUnstoredCertificate(t *testing.T) {
	ca, err := pki.NewCA("hub-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	hub := csrRecordingHub{
		handoverHub: &handoverHub{ca: ca, events: make(chan string, 256),
			streams: make(chan grpc.BidiStreamingServer[federationv1.SpokeMessage, federationv1.HubMessage], 8)},
		csrs: make(chan []byte, 8),
	}
	address := serveTLS(t, ca, hub)
	// Valid for another minute, backdated 5 minutes: its renewal is overdue.
	oldPEM, oldKeyPEM, err := ca.IssueClient(testCluster, nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	pendingCSR, pendingKeyPEM, err := pki.NewCSR(testCluster)
	if err != nil {
		t.Fatal(err)
	}
	scheme := testScheme(t)
	objects := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		wrappers.MakeMachine("gpu", "team-a").Type("compute-xlarge", "40", "128Gi", 2).Obj(),
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testSecret},
			Type:       corev1.SecretTypeTLS,
			Data: map[string][]byte{
				corev1.TLSCertKey: oldPEM, corev1.TLSPrivateKeyKey: oldKeyPEM,
				pendingCSRKey: pendingCSR, pendingKeyKey: pendingKeyPEM,
			},
		},
	).Build()
	startReporter(t, ca, address, scheme, objects, "", nil)

	select {
	case csr := <-hub.csrs:
		if !bytes.Equal(csr, pendingCSR) {
			t.Error("the restarted agent renewed with another CSR than the pending one it found in the Secret")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the restarted agent did not renew its overdue certificate within 10s")
	}
	stored := waitForStoredCertificateOtherThan(t, objects, oldPEM)
	if !bytes.Equal(stored[corev1.TLSPrivateKeyKey], pendingKeyPEM) {
		t.Error("the stored key is not the pending key found in the Secret")
	}
}
