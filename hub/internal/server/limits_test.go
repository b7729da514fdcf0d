package server

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/imperator-federation/imperator/internal/identity"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

func TestLimitsValidate(t *testing.T) {
	cases := map[string]struct {
		change     func(*Limits)
		wantFields []string
	}{
		"defaults": {change: func(*Limits) {}},
		"zero join rate": {
			change:     func(l *Limits) { l.JoinRatePerSource = 0 },
			wantFields: []string{"JoinRatePerSource"},
		},
		"no connection age and no idle": {
			change:     func(l *Limits) { l.MaxConnectionAge, l.MaxConnectionIdle = 0, -time.Second },
			wantFields: []string{"MaxConnectionIdle", "MaxConnectionAge"},
		},
		"more anonymous connections than connections": {
			change:     func(l *Limits) { l.MaxConnections, l.MaxAnonymousConnections = 10, 11 },
			wantFields: []string{"MaxAnonymousConnections"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			l := DefaultLimits()
			tc.change(&l)
			err := l.Validate()
			if len(tc.wantFields) == 0 && err != nil {
				t.Fatalf("Validate = %v, want nil", err)
			}
			if len(tc.wantFields) > 0 && err == nil {
				t.Fatalf("Validate = nil, want an error naming %v", tc.wantFields)
			}
			for _, f := range tc.wantFields {
				if !strings.Contains(err.Error(), f) {
					t.Errorf("Validate = %v, want it to name %s", err, f)
				}
			}
		})
	}
}

func fromSource(ip string) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}})
}

func TestJoinLimiterIsPerSource(t *testing.T) {
	l := DefaultLimits()
	l.JoinRatePerSource, l.JoinBurstPerSource = 0.001, 3
	j := newJoinLimiter(l)
	var allowedA int
	for range 10 {
		if j.allow(fromSource("192.0.2.1")) {
			allowedA++
		}
	}
	if allowedA != 3 {
		t.Errorf("one source got %d of 10 joins through, want its burst of 3", allowedA)
	}
	if !j.allow(fromSource("192.0.2.2")) {
		t.Error("another source was limited by the first one's joins")
	}
}

func TestAnonymousConnectionsBeyondTheLimitAreClosedWhileSpokesAreServed(t *testing.T) {
	cases := map[string]func(*Limits){
		"anonymous connections":                func(l *Limits) { l.MaxAnonymousConnections = 2 },
		"unverified connections of one source": func(l *Limits) { l.MaxAnonymousConnectionsPerSource = 2 },
	}
	for name, limit := range cases {
		t.Run(name, func(t *testing.T) {
			h := startTestHubWith(t, func(o *Options) {
				o.Limits = DefaultLimits()
				limit(&o.Limits)
			})
			cfg, err := identity.ClientTLS(h.ca.CertPEM, nil, "127.0.0.1")
			if err != nil {
				t.Fatal(err)
			}
			var open []*tls.Conn
			t.Cleanup(func() {
				for _, c := range open {
					_ = c.Close()
				}
			})
			for range 2 {
				c, err := tls.Dial("tcp", h.addr, cfg)
				if err != nil {
					t.Fatal(err)
				}
				open = append(open, c)
			}
			third, err := tls.Dial("tcp", h.addr, cfg)
			if err == nil {
				defer func() { _ = third.Close() }()
				_ = third.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, err = io.ReadAll(third)
			}
			var netErr net.Error
			if errors.As(err, &netErr) && netErr.Timeout() {
				t.Error("the third connection is still open, want it closed at once (limit 2)")
			}
			// Spokes, with certificates, are not counted against either limit.
			h.reportingStream(t, "a")
		})
	}
}

func TestAnonymousCallersReachOnlyJoinAndTheHealthCheck(t *testing.T) {
	h := startTestHub(t)
	fed := h.client(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := fed.Renew(ctx, &federationv1.RenewRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("anonymous Renew = %v, want Unauthenticated", err)
	}
	// An oversized anonymous request is refused before it is decoded.
	_, err := fed.Join(ctx, &federationv1.JoinRequest{Token: strings.Repeat("x", anonymousMaxRecvMsgBytes+1)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("anonymous Join of %d bytes = %v, want ResourceExhausted", anonymousMaxRecvMsgBytes+1, err)
	}
	// The same size is fine on an authenticated connection (spoke Snapshots are large).
	authed := h.client(t, h.certificate(t, "a", identity.SpokeOrganization))
	_, err = authed.Join(ctx, &federationv1.JoinRequest{Token: strings.Repeat("x", anonymousMaxRecvMsgBytes+1)})
	if status.Code(err) == codes.ResourceExhausted {
		t.Errorf("authenticated Join of %d bytes = %v, want it read (and refused by the joiner)", anonymousMaxRecvMsgBytes+1, err)
	}
}
