package query

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// clusterView is what a user reads about a cluster in ListClusters and
// FindCapacity.
type clusterView struct {
	State        queryv1.ClusterState
	StateMessage string
	Candidate    bool
	Exclusion    queryv1.ExclusionReason
	Excluded     string
}

func TestClusterWhoseAgentCannotReachItsAPIServerIsShownStale(t *testing.T) {
	down := time.Date(2025, 5, 1, 11, 59, 0, 0, time.UTC)
	unreachable := "the spoke agent cannot reach its own cluster's API server since 2025-05-01T11:59:00Z: its figures come from its cache and may be out of date"
	cases := map[string]struct {
		heartbeats []*federationv1.Heartbeat
		want       clusterView
	}{
		"heartbeating with its API server reached: available, a candidate": {
			heartbeats: []*federationv1.Heartbeat{{Generation: 1}},
			want:       clusterView{State: queryv1.ClusterState_CLUSTER_STATE_AVAILABLE, Candidate: true},
		},
		"heartbeating from a stale cache: stale with the reason, excluded": {
			heartbeats: []*federationv1.Heartbeat{{Generation: 1, ApiServerUnreachableSince: timestamppb.New(down)}},
			want: clusterView{State: queryv1.ClusterState_CLUSTER_STATE_STALE, StateMessage: unreachable,
				Exclusion: queryv1.ExclusionReason_EXCLUSION_REASON_STALE, Excluded: unreachable},
		},
		"its API server reached again: available at the next heartbeat": {
			heartbeats: []*federationv1.Heartbeat{{Generation: 1, ApiServerUnreachableSince: timestamppb.New(down)}, {Generation: 1}},
			want:       clusterView{State: queryv1.ClusterState_CLUSTER_STATE_AVAILABLE, Candidate: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			env := startService(t)
			ctx := context.Background()
			env.report("a", gpuMachine("team-a", 4, 0))
			for _, hb := range tc.heartbeats {
				env.store.Heartbeat("a", 1, hb)
			}
			c := env.clients["viewer"]
			list, err := c.ListClusters(ctx, &queryv1.ListClustersRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.GetClusters()) != 1 {
				t.Fatalf("ListClusters = %v, want cluster a", list)
			}
			got := clusterView{State: list.GetClusters()[0].GetState(), StateMessage: list.GetClusters()[0].GetStateMessage()}
			found, err := c.FindCapacity(ctx, &queryv1.FindCapacityRequest{
				Target: &queryv1.FindCapacityRequest_MachineType{MachineType: &queryv1.MachineTypeRef{Type: "compute-xlarge"}}, Count: 1,
			})
			if err != nil {
				t.Fatal(err)
			}
			got.Candidate = len(found.GetCandidates()) == 1
			if ex := found.GetExcluded(); len(ex) == 1 {
				got.Exclusion, got.Excluded = ex[0].GetReason(), ex[0].GetMessage()
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("what a user sees of cluster a (-want +got):\n%s", diff)
			}
		})
	}
}
