package reporter

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	"github.com/imperator-federation/imperator/internal/identity"
)

// hubStatus is a status as the hub sends it: code and message, and an
// ErrorInfo of domain with reason when reason is not empty.
func hubStatus(t *testing.T, code codes.Code, domain, reason string) error {
	t.Helper()
	st := status.New(code, "refused")
	if reason == "" {
		return st.Err()
	}
	st, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: domain, Metadata: map[string]string{"cluster": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

func TestHubRefusal(t *testing.T) {
	const hubDomain = "imperator.tenzen-y.io"
	cases := map[string]struct {
		err           func(t *testing.T) error
		wantReason    identity.RefusalReason
		wantRefusal   bool
		wantJoinAgain bool
	}{
		"earlier registration": {
			err: func(t *testing.T) error {
				return hubStatus(t, codes.PermissionDenied, hubDomain, "EarlierRegistration")
			},
			wantReason: "EarlierRegistration", wantRefusal: true, wantJoinAgain: true,
		},
		"no registration": {
			err:        func(t *testing.T) error { return hubStatus(t, codes.PermissionDenied, hubDomain, "NoRegistration") },
			wantReason: "NoRegistration", wantRefusal: true, wantJoinAgain: true,
		},
		"not registered": {
			err:        func(t *testing.T) error { return hubStatus(t, codes.PermissionDenied, hubDomain, "NotRegistered") },
			wantReason: "NotRegistered", wantRefusal: true, wantJoinAgain: true,
		},
		"not accepted: the cluster is paused": {
			err:        func(t *testing.T) error { return hubStatus(t, codes.PermissionDenied, hubDomain, "NotAccepted") },
			wantReason: "NotAccepted", wantRefusal: true,
		},
		"reason of a newer hub": {
			err:        func(t *testing.T) error { return hubStatus(t, codes.PermissionDenied, hubDomain, "SomethingNew") },
			wantReason: "SomethingNew", wantRefusal: true,
		},
		"wrapped, as session returns it": {
			err: func(t *testing.T) error {
				return fmt.Errorf("hub ended the Report stream: %w", hubStatus(t, codes.PermissionDenied, hubDomain, "EarlierRegistration"))
			},
			wantReason: "EarlierRegistration", wantRefusal: true, wantJoinAgain: true,
		},
		"refusal without details: an older hub": {
			err: func(t *testing.T) error {
				return status.Error(codes.PermissionDenied, `certificate was issued for an earlier registration of cluster "a"; join again with a new token`)
			},
		},
		"ErrorInfo of another domain": {
			err: func(t *testing.T) error {
				return hubStatus(t, codes.PermissionDenied, "example.com", "EarlierRegistration")
			},
		},
		"ErrorInfo on another code": {
			err: func(t *testing.T) error { return hubStatus(t, codes.Unavailable, hubDomain, "EarlierRegistration") },
		},
		"other details only": {
			err: func(t *testing.T) error {
				st, err := status.New(codes.PermissionDenied, "refused").WithDetails(protoadapt.MessageV1Of(&errdetails.DebugInfo{Detail: "EarlierRegistration"}))
				if err != nil {
					t.Fatal(err)
				}
				return st.Err()
			},
		},
		"not a status":      {err: func(*testing.T) error { return errors.New("connection refused") }},
		"context cancelled": {err: func(*testing.T) error { return context.Canceled }},
		"no error":          {err: func(*testing.T) error { return nil }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			reason, ok := hubRefusal(tc.err(t))
			if reason != tc.wantReason || ok != tc.wantRefusal {
				t.Errorf("hubRefusal = %q, %t; want %q, %t", reason, ok, tc.wantReason, tc.wantRefusal)
			}
			if got := ok && joinAgainAfter(reason); got != tc.wantJoinAgain {
				t.Errorf("join again = %t, want %t", got, tc.wantJoinAgain)
			}
		})
	}
}

func TestRefusedCertificateIs(t *testing.T) {
	refused := &refusedCertificate{der: []byte("der-1"), reason: "EarlierRegistration"}
	cases := map[string]struct {
		refused *refusedCertificate
		cert    *tls.Certificate
		want    bool
	}{
		"the refused certificate": {refused: refused, cert: &tls.Certificate{Certificate: [][]byte{[]byte("der-1")}}, want: true},
		"another certificate":     {refused: refused, cert: &tls.Certificate{Certificate: [][]byte{[]byte("der-2")}}},
		"no certificate":          {refused: refused},
		"empty certificate":       {refused: refused, cert: &tls.Certificate{}},
		"nothing refused":         {cert: &tls.Certificate{Certificate: [][]byte{[]byte("der-1")}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.refused.is(tc.cert); got != tc.want {
				t.Errorf("is = %t, want %t", got, tc.want)
			}
		})
	}
}
