package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/internal/identity"
)

// TestAWatchOfASpokeCertificateEndsWithinASecondOfItsRegistrationEnding:
// a long-lived watch opened with a spoke certificate (the query service's
// Watch goes through the same interceptor as health's) ends, with the
// refusal a new call would get, within a second of the cluster's
// deregistration or re-join, not at the connection's max age.
func TestAWatchOfASpokeCertificateEndsWithinASecondOfItsRegistrationEnding(t *testing.T) {
	cases := map[string]struct {
		end        func(h *testHub)
		wantReason registry.RefusalReason
	}{
		"deregistered": {end: func(h *testHub) { h.deregistered["a"] = true }, wantReason: identity.RefusedNotRegistered},
		"joined again": {end: func(h *testHub) { h.registeredAgain["a"] = true }, wantReason: identity.RefusedEarlierRegistration},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := startTestHub(t)
			cert := h.certificate(t, "a", identity.SpokeOrganization)
			cfg, err := identity.ClientTLS(h.ca.CertPEM, cert, "127.0.0.1")
			if err != nil {
				t.Fatal(err)
			}
			conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			watch, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := watch.Recv(); err != nil {
				t.Fatalf("first status of the watch: %v", err)
			}
			h.mu.Lock()
			tc.end(h)
			h.mu.Unlock()
			ended := time.Now()
			for {
				if _, err = watch.Recv(); err != nil {
					break
				}
			}
			if took := time.Since(ended); took > time.Second {
				t.Errorf("the watch ended %s after the registration did, want within a second", took)
			}
			wantRefusal(t, err, "a", tc.wantReason)
		})
	}
}
