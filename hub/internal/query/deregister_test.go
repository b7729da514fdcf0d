package query

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/holds"
	"github.com/imperator-federation/imperator/hub/internal/store"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

func fleetHold(name string, phase imperatorv1alpha1.FleetHoldPhase, parts ...imperatorv1alpha1.FleetHoldCluster) imperatorv1alpha1.FleetHold {
	return imperatorv1alpha1.FleetHold{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: imperatorv1alpha1.FleetHoldStatus{Phase: phase, Clusters: parts}}
}

func part(cluster, result string) imperatorv1alpha1.FleetHoldCluster {
	return imperatorv1alpha1.FleetHoldCluster{Cluster: cluster, Type: "compute-xlarge", Count: 1, Result: result}
}

// The holds that keep a cluster from being deregistered: those that may
// still hold units there.
func TestPlacingOn(t *testing.T) {
	cases := map[string]struct {
		list []imperatorv1alpha1.FleetHold
		want []string
	}{
		"a held hold with a part there": {
			list: []imperatorv1alpha1.FleetHold{fleetHold("train", imperatorv1alpha1.FleetHoldHeld, part("spoke-a", holds.ResultHeld), part("spoke-b", holds.ResultHeld))},
			want: []string{"train"},
		},
		"a pending hold not yet answered there": {
			list: []imperatorv1alpha1.FleetHold{fleetHold("train", imperatorv1alpha1.FleetHoldPending, part("spoke-a", ""))},
			want: []string{"train"},
		},
		"a pending hold whose answer timed out there (the spoke may hold it)": {
			list: []imperatorv1alpha1.FleetHold{fleetHold("train", imperatorv1alpha1.FleetHoldPending, part("spoke-a", holds.ResultTimedOut))},
			want: []string{"train"},
		},
		"a hold placed elsewhere": {
			list: []imperatorv1alpha1.FleetHold{fleetHold("train", imperatorv1alpha1.FleetHoldHeld, part("spoke-b", holds.ResultHeld))},
		},
		"a pending hold the cluster refused": {
			list: []imperatorv1alpha1.FleetHold{fleetHold("train", imperatorv1alpha1.FleetHoldPending, part("spoke-a", holds.ResultRefused), part("spoke-b", ""))},
		},
		"ended holds": {
			list: []imperatorv1alpha1.FleetHold{
				fleetHold("released", imperatorv1alpha1.FleetHoldReleased, part("spoke-a", holds.ResultHeld)),
				fleetHold("expired", imperatorv1alpha1.FleetHoldExpired, part("spoke-a", holds.ResultHeld)),
				fleetHold("failed", imperatorv1alpha1.FleetHoldFailed, part("spoke-a", holds.ResultHeld)),
			},
		},
		"several, sorted": {
			list: []imperatorv1alpha1.FleetHold{
				fleetHold("zeta", imperatorv1alpha1.FleetHoldHeld, part("spoke-a", holds.ResultHeld)),
				fleetHold("alpha", imperatorv1alpha1.FleetHoldHeld, part("spoke-a", holds.ResultHeld)),
			},
			want: []string{"alpha", "zeta"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, placingOn(tc.list, "spoke-a")); diff != "" {
				t.Errorf("holds placing units on spoke-a (-want +got):\n%s", diff)
			}
		})
	}
}

// DeregisterCluster is for admins only and checks its request before it
// reads anything.
func TestDeregisterClusterRefusals(t *testing.T) {
	env := startService(t)
	cases := map[string]struct {
		client   string
		name     string
		wantCode codes.Code
		wantMsg  string
	}{
		"a viewer":                               {client: "viewer", name: "spoke-a", wantCode: codes.PermissionDenied, wantMsg: "admin"},
		"a spoke listing the admin organization": {client: "spoke", name: "spoke-a", wantCode: codes.PermissionDenied},
		"no certificate":                         {client: "anonymous", name: "spoke-a", wantCode: codes.Unauthenticated},
		"no name":                                {client: "admin", wantCode: codes.InvalidArgument, wantMsg: "name"},
		"an invalid name":                        {client: "admin", name: "Spoke_A", wantCode: codes.InvalidArgument, wantMsg: "name"},
		"a hub without a registry client":        {client: "admin", name: "spoke-a", wantCode: codes.Unimplemented, wantMsg: "does not deregister"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := env.clients[tc.client].DeregisterCluster(ctx, &queryv1.DeregisterClusterRequest{Name: tc.name})
			st := status.Convert(err)
			if st.Code() != tc.wantCode || !strings.Contains(st.Message(), tc.wantMsg) {
				t.Errorf("got %v %q, want %v containing %q", st.Code(), st.Message(), tc.wantCode, tc.wantMsg)
			}
		})
	}
}

// ListClusters (and Watch) carry the skew policy's verdict on each agent
// against the answering hub's version.
func TestClusterInfoCarriesVersionSkew(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	cases := map[string]struct {
		hub, agent string
		wantSkew   string
	}{
		"agent newer than its hub":      {hub: "v0.2.0", agent: "v0.3.0", wantSkew: "upgrade the hub first"},
		"agent two minors behind":       {hub: "v0.4.1", agent: "v0.2.0", wantSkew: "upgrade the agent to v0.3 or v0.4"},
		"agent one minor behind":        {hub: "v0.3.0", agent: "v0.2.7"},
		"a development hub":             {hub: "(devel)", agent: "v0.3.0"},
		"an agent that said no version": {hub: "v0.3.0", agent: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			st := store.New(clk, time.Minute)
			svc := New(st, nil, clk)
			svc.hubVersion = tc.hub
			st.Connect("spoke-a", &federationv1.Hello{ClusterName: "spoke-a", AgentVersion: tc.agent, Epoch: 1})
			c, ok := st.Get("spoke-a")
			if !ok {
				t.Fatal("cluster not in the store")
			}
			got := svc.clusterInfo(c, clk.Now()).GetVersionSkew()
			if tc.wantSkew == "" && got != "" || tc.wantSkew != "" && !strings.Contains(got, tc.wantSkew) {
				t.Errorf("version_skew %q, want %q", got, tc.wantSkew)
			}
		})
	}
}
