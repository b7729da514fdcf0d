package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/internal/identity"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

func ack(gen uint64) *federationv1.HubMessage {
	return &federationv1.HubMessage{Kind: &federationv1.HubMessage_Ack{Ack: &federationv1.Ack{Generation: gen}}}
}

func resync(reason string) *federationv1.HubMessage {
	return &federationv1.HubMessage{Kind: &federationv1.HubMessage_Resync{Resync: &federationv1.Resync{Reason: reason}}}
}

func TestReport(t *testing.T) {
	machine := &federationv1.Machine{Name: "m", Group: "g"}
	cases := map[string]struct {
		certCN, certOrg string
		// certURIs replace the certificate's registration URI when not nil.
		certURIs     []string
		noCert       bool
		rejected     bool
		deregistered bool
		wantMsg      string
		// wantReason is the reason of the ErrorInfo of a refusal.
		wantReason  registry.RefusalReason
		send        []*federationv1.SpokeMessage
		wantReplies []*federationv1.HubMessage
		wantCode    codes.Code
		wantInIndex bool
	}{
		"own cluster: snapshot and delta are acknowledged": {
			certCN: "a", certOrg: identity.SpokeOrganization,
			send:        []*federationv1.SpokeMessage{hello("a", 1), snapshotMsg(1, machine), deltaMsg(2, machine)},
			wantReplies: []*federationv1.HubMessage{ack(1), ack(2)},
			wantCode:    codes.OK, wantInIndex: true,
		},
		"generation gap asks for a snapshot": {
			certCN: "a", certOrg: identity.SpokeOrganization,
			send:        []*federationv1.SpokeMessage{hello("a", 1), snapshotMsg(1, machine), deltaMsg(5, machine)},
			wantReplies: []*federationv1.HubMessage{ack(1), resync("generation gap")},
			wantCode:    codes.OK, wantInIndex: true,
		},
		"hello naming another cluster": {
			certCN: "a", certOrg: identity.SpokeOrganization,
			send:     []*federationv1.SpokeMessage{hello("b", 1)},
			wantCode: codes.PermissionDenied,
		},
		"hub does not accept the cluster": {
			certCN: "a", certOrg: identity.SpokeOrganization, rejected: true,
			send:     []*federationv1.SpokeMessage{hello("a", 1)},
			wantCode: codes.PermissionDenied, wantMsg: "spec.hubAcceptsClient=false",
			wantReason: registry.RefusedNotAccepted,
		},
		"cluster not registered": {
			certCN: "a", certOrg: identity.SpokeOrganization, deregistered: true,
			send:     []*federationv1.SpokeMessage{hello("a", 1)},
			wantCode: codes.PermissionDenied, wantMsg: `cluster "a" is not registered at the hub`,
			wantReason: registry.RefusedNotRegistered,
		},
		"certificate of an earlier registration": {
			certCN: "a", certOrg: identity.SpokeOrganization,
			certURIs:   []string{"imperator://cluster/a/uid-of-a-deleted-managedcluster"},
			send:       []*federationv1.SpokeMessage{hello("a", 1)},
			wantCode:   codes.PermissionDenied,
			wantMsg:    `certificate was issued for an earlier registration of cluster "a"; join again with a new token`,
			wantReason: registry.RefusedEarlierRegistration,
		},
		"certificate without registration": {
			certCN: "a", certOrg: identity.SpokeOrganization,
			certURIs: []string{"spiffe://example.org/not-a-registration"},
			send:     []*federationv1.SpokeMessage{hello("a", 1)},
			wantCode: codes.PermissionDenied, wantMsg: "names no registration",
			wantReason: registry.RefusedNoRegistration,
		},
		"registration URI of another cluster": {
			certCN: "a", certOrg: identity.SpokeOrganization,
			certURIs: []string{"imperator://cluster/b/uid-b"},
			send:     []*federationv1.SpokeMessage{hello("a", 1)},
			wantCode: codes.Unauthenticated, wantMsg: `names cluster "b"`,
		},
		"malformed registration URI": {
			certCN: "a", certOrg: identity.SpokeOrganization,
			certURIs: []string{"imperator://cluster/a/"},
			send:     []*federationv1.SpokeMessage{hello("a", 1)},
			wantCode: codes.Unauthenticated, wantMsg: "malformed registration URI",
		},
		"first message is not a hello": {
			certCN: "a", certOrg: identity.SpokeOrganization,
			send:     []*federationv1.SpokeMessage{snapshotMsg(1, machine)},
			wantCode: codes.InvalidArgument,
		},
		"second hello": {
			certCN: "a", certOrg: identity.SpokeOrganization,
			send:        []*federationv1.SpokeMessage{hello("a", 1), snapshotMsg(1, machine), hello("a", 1)},
			wantReplies: []*federationv1.HubMessage{ack(1)},
			wantCode:    codes.InvalidArgument, wantInIndex: true,
		},
		"certificate of the hub CA that is not a spoke's": {
			certCN: "a", certOrg: "platform-admins",
			send:     []*federationv1.SpokeMessage{hello("a", 1)},
			wantCode: codes.Unauthenticated,
		},
		"no client certificate": {
			noCert:   true,
			send:     []*federationv1.SpokeMessage{hello("a", 1)},
			wantCode: codes.Unauthenticated,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := startTestHub(t)
			h.mu.Lock()
			h.rejected["a"] = tc.rejected
			h.deregistered["a"] = tc.deregistered
			h.mu.Unlock()
			var cert = h.certificate(t, tc.certCN, tc.certOrg)
			if tc.certURIs != nil {
				var uris []*url.URL
				for _, raw := range tc.certURIs {
					u, err := url.Parse(raw)
					if err != nil {
						t.Fatal(err)
					}
					uris = append(uris, u)
				}
				cert = h.certificateWithURIs(t, tc.certCN, []string{tc.certOrg}, uris...)
			}
			if tc.noCert {
				cert = nil
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stream, err := h.client(t, cert).Report(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range tc.send {
				if err := stream.Send(m); err != nil {
					break // the server ended the stream; Recv says why
				}
			}
			var gotReplies []*federationv1.HubMessage
			for len(gotReplies) < len(tc.wantReplies) {
				msg, err := stream.Recv()
				if err != nil {
					break
				}
				gotReplies = append(gotReplies, msg)
			}
			if diff := cmp.Diff(tc.wantReplies, gotReplies, protocmp.Transform()); diff != "" {
				t.Errorf("replies (-want +got):\n%s", diff)
			}
			if tc.wantCode != codes.OK {
				_, err := stream.Recv()
				if got := status.Code(err); got != tc.wantCode {
					t.Errorf("stream ended with %v (%v), want %v", got, err, tc.wantCode)
				}
				if !strings.Contains(status.Convert(err).Message(), tc.wantMsg) {
					t.Errorf("stream ended with %q, want a message containing %q", status.Convert(err).Message(), tc.wantMsg)
				}
				if tc.wantReason != "" {
					wantRefusal(t, err, "a", tc.wantReason)
				} else if info := refusalInfo(err); info != nil {
					t.Errorf("stream ended with ErrorInfo %v, want none", info)
				}
			}
			c, ok := h.store.Get("a")
			inIndex := ok && len(c.Machines) == 1
			if inIndex != tc.wantInIndex {
				t.Errorf("machine in the index = %t, want %t", inIndex, tc.wantInIndex)
			}
		})
	}
}

func TestNewerStreamReplacesOlder(t *testing.T) {
	h := startTestHub(t)
	fed := h.client(t, h.certificate(t, "a", identity.SpokeOrganization))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func(epoch uint64) federationv1.Federation_ReportClient {
		stream, err := fed.Report(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(hello("a", epoch)); err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(snapshotMsg(1)); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatalf("waiting for the ack: %v", err)
		}
		return stream
	}
	old := open(1)
	open(2)
	if _, err := old.Recv(); status.Code(err) != codes.Aborted {
		t.Errorf("older stream ended with %v, want Aborted", err)
	}
	if c, _ := h.store.Get("a"); !c.Connected || c.Epoch != 2 {
		t.Errorf("cluster connected=%t epoch=%d, want true 2", c.Connected, c.Epoch)
	}
}

func TestEndSession(t *testing.T) {
	h := startTestHub(t)
	stream := h.reportingStream(t, "a")
	h.server.EndSession("a")
	h.store.Remove("a")
	_, err := stream.Recv()
	wantRefusal(t, err, "a", registry.RefusedNotRegistered)
	if _, ok := h.store.Get("a"); ok {
		t.Error("deregistered cluster came back into the store when its stream ended")
	}
}

func TestEndStaleSession(t *testing.T) {
	h := startTestHub(t)
	stream := h.reportingStream(t, "a")
	h.server.EndStaleSession("a")
	if _, err := stream.Recv(); status.Code(err) != codes.Aborted {
		t.Errorf("stream ended with %v, want Aborted", err)
	}
	// The spoke moved to another replica: its figures stay known here.
	if _, ok := h.store.Get("a"); !ok {
		t.Error("cluster left the store when its stale stream ended")
	}
	h.server.EndStaleSession("a") // no stream open any more: nothing to do
}

func TestConnectedSpokeOfAnEarlierRegistrationIsRefusedAtItsNextHeartbeat(t *testing.T) {
	h := startTestHub(t)
	stream := h.reportingStream(t, "a")
	h.mu.Lock()
	h.registeredAgain["a"] = true
	h.mu.Unlock()
	heartbeat := &federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Heartbeat{Heartbeat: &federationv1.Heartbeat{Generation: 1}}}
	if err := stream.Send(heartbeat); err != nil {
		t.Fatal(err)
	}
	_, err := stream.Recv()
	if !strings.Contains(status.Convert(err).Message(), "earlier registration") {
		t.Errorf("stream ended with %v, want a message about an earlier registration", err)
	}
	wantRefusal(t, err, "a", registry.RefusedEarlierRegistration)
}

func TestHoldRequestIsNotSentToASilentStreamOfAnEarlierRegistration(t *testing.T) {
	h := startTestHub(t)
	fed := h.client(t, h.certificate(t, "a", identity.SpokeOrganization))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := fed.Report(ctx)
	if err != nil {
		t.Fatal(err)
	}
	withHolds := hello("a", 1)
	withHolds.GetHello().Capabilities = []string{HoldCapability}
	for _, m := range []*federationv1.SpokeMessage{withHolds, snapshotMsg(1)} {
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("waiting for the ack: %v", err)
	}
	// Registered again while the stream stays silent: its certificate is
	// of the earlier registration.
	h.mu.Lock()
	h.registeredAgain["a"] = true
	h.mu.Unlock()
	holdCtx, holdCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer holdCancel()
	held := make(chan error, 1)
	go func() {
		_, err := h.server.RequestHold(holdCtx, "a", &federationv1.HoldRequest{Name: "team-x", Count: 2})
		held <- err
	}()
	msg, err := stream.Recv()
	if msg.GetHoldRequest() != nil {
		t.Fatalf("the hold request went to a certificate of an earlier registration: %v", msg)
	}
	wantRefusal(t, err, "a", registry.RefusedEarlierRegistration)
	select {
	case err := <-held:
		if !errors.Is(err, ErrStreamEnded) {
			t.Errorf("RequestHold = %v, want %v", err, ErrStreamEnded)
		}
	case <-holdCtx.Done():
		t.Error("RequestHold waited for an answer from a stream that had ended")
	}
}

func TestHealthWithoutClientCertificate(t *testing.T) {
	h := startTestHub(t)
	cfg, err := identity.ClientTLS(h.ca.CertPEM, nil, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: federationv1.Federation_ServiceDesc.ServiceName})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health check = %v, %v; want SERVING", resp, err)
	}
}

func TestJoinWithoutClientCertificate(t *testing.T) {
	h := startTestHub(t)
	_, err := h.client(t, nil).Join(context.Background(), &federationv1.JoinRequest{ClusterName: "a"})
	// The test joiner refuses: the call got past authentication to it.
	if status.Code(err) != codes.Unauthenticated || status.Convert(err).Message() != "test joiner refuses every token" {
		t.Errorf("Join = %v, want the joiner's refusal", err)
	}
}

func TestRenew(t *testing.T) {
	cases := map[string]struct {
		cert       func(h *testHub) *tls.Certificate
		rejected   bool
		wantCode   codes.Code
		wantReason registry.RefusalReason
		wantCert   string
	}{
		"spoke certificate renews its own cluster and registration": {
			cert:     func(h *testHub) *tls.Certificate { return h.certificate(t, "a", identity.SpokeOrganization) },
			wantCode: codes.OK, wantCert: "renewed a uid-a",
		},
		"certificate of an earlier registration": {
			cert: func(h *testHub) *tls.Certificate {
				return h.certificateWithURIs(t, "a", []string{identity.SpokeOrganization}, identity.RegistrationURI("a", "uid-earlier"))
			},
			wantCode: codes.PermissionDenied, wantReason: registry.RefusedEarlierRegistration,
		},
		"certificate without registration": {
			cert: func(h *testHub) *tls.Certificate {
				return h.certificateWithURIs(t, "a", []string{identity.SpokeOrganization})
			},
			wantCode: codes.PermissionDenied, wantReason: registry.RefusedNoRegistration,
		},
		"cluster no longer accepted": {
			cert:     func(h *testHub) *tls.Certificate { return h.certificate(t, "a", identity.SpokeOrganization) },
			rejected: true, wantCode: codes.PermissionDenied, wantReason: registry.RefusedNotAccepted,
		},
		"no client certificate": {
			cert:     func(*testHub) *tls.Certificate { return nil },
			wantCode: codes.Unauthenticated,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := startTestHub(t)
			h.mu.Lock()
			h.rejected["a"] = tc.rejected
			h.mu.Unlock()
			resp, err := h.client(t, tc.cert(h)).Renew(context.Background(), &federationv1.RenewRequest{Csr: []byte("csr")})
			if got := status.Code(err); got != tc.wantCode {
				t.Fatalf("Renew = %v, want code %v", err, tc.wantCode)
			}
			if tc.wantReason != "" {
				wantRefusal(t, err, "a", tc.wantReason)
			}
			if got := string(resp.GetCertificate()); got != tc.wantCert {
				t.Errorf("certificate = %q, want %q", got, tc.wantCert)
			}
		})
	}
}
