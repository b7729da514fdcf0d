package capacity

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/imperator-federation/imperator/hub/internal/store"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

func TestMachines(t *testing.T) {
	clusters := []*store.Cluster{
		makeCluster("a").Machine("gpu", "team-a",
			makeType("xlarge").GPU(2, "NVIDIA-GeForce-RTX-3090", "ampere").Usage(4, 1, 0).Obj(),
			makeType("large").GPU(1, "NVIDIA-GeForce-RTX-3090", "ampere").Usage(2, 0, 0).Obj(),
		).Obj(),
		makeCluster("b").Offline(time.Hour).Machine("gpu", "team-b",
			makeType("xlarge").GPU(2, "NVIDIA-A100", "ampere").Usage(4, 0, 0).Obj(),
		).Machine("cpu", "team-b", makeType("small").Usage(8, 8, 0).Obj()).Obj(),
	}
	type row struct {
		Cluster, Group, Type string
		Free                 int32
		State                queryv1.ClusterState
	}
	cases := map[string]struct {
		filter Filter
		want   []row
	}{
		"everything, sorted by cluster, Machine, type": {
			want: []row{
				{"a", "team-a", "large", 2, queryv1.ClusterState_CLUSTER_STATE_AVAILABLE},
				{"a", "team-a", "xlarge", 3, queryv1.ClusterState_CLUSTER_STATE_AVAILABLE},
				{"b", "team-b", "small", 0, queryv1.ClusterState_CLUSTER_STATE_OFFLINE},
				{"b", "team-b", "xlarge", 4, queryv1.ClusterState_CLUSTER_STATE_OFFLINE},
			},
		},
		"by cluster":      {filter: Filter{Cluster: "b"}, want: []row{{"b", "team-b", "small", 0, queryv1.ClusterState_CLUSTER_STATE_OFFLINE}, {"b", "team-b", "xlarge", 4, queryv1.ClusterState_CLUSTER_STATE_OFFLINE}}},
		"by group":        {filter: Filter{Group: "team-a", Type: "xlarge"}, want: []row{{"a", "team-a", "xlarge", 3, queryv1.ClusterState_CLUSTER_STATE_AVAILABLE}}},
		"by GPU product":  {filter: Filter{GPUProduct: "nvidia-a100"}, want: []row{{"b", "team-b", "xlarge", 4, queryv1.ClusterState_CLUSTER_STATE_OFFLINE}}},
		"by GPU family":   {filter: Filter{GPUFamily: "Ampere", Cluster: "a"}, want: []row{{"a", "team-a", "large", 2, queryv1.ClusterState_CLUSTER_STATE_AVAILABLE}, {"a", "team-a", "xlarge", 3, queryv1.ClusterState_CLUSTER_STATE_AVAILABLE}}},
		"nothing matches": {filter: Filter{Cluster: "zzz"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got []row
			for _, m := range Machines(clusters, tc.filter) {
				got = append(got, row{m.Cluster, m.Group, m.Type, m.Free, m.ClusterState})
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Machines (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	clusters := []*store.Cluster{
		makeCluster("a").Machine("gpu", "g", makeType("xlarge").Usage(4, 1, 1).Obj()).Obj(),
		makeCluster("b").Machine("gpu", "g", makeType("xlarge").Usage(2, 0, 0).Obj()).
			Machine("gpu-2", "g", makeType("xlarge").Usage(1, 1, 2).Queued(2).Obj()).Obj(),
		makeCluster("c").Restored().Machine("gpu", "g", makeType("xlarge").Usage(100, 0, 5).Queued(5).Obj()).Obj(),
	}
	got := Usage(clusters, nil)
	// Cluster c is stale: its queued guests are in its own row, not the fleet's.
	wantFleet := []*queryv1.TypeUsage{{Group: "g", Type: "xlarge", Maximum: 7, Reserved: 4, Used: 2, Waiting: 3, Queued: 2, Free: 4}}
	if diff := cmp.Diff(wantFleet, got.Fleet, protoTransform()); diff != "" {
		t.Errorf("fleet (-want +got):\n%s", diff)
	}
	wantB := []*queryv1.TypeUsage{{Group: "g", Type: "xlarge", Maximum: 3, Reserved: 2, Used: 1, Waiting: 2, Queued: 2, Free: 2}}
	if len(got.Clusters) != 3 {
		t.Fatalf("got %d clusters, want 3", len(got.Clusters))
	}
	if diff := cmp.Diff(wantB, got.Clusters[1].Types, protoTransform()); diff != "" {
		t.Errorf("cluster b (-want +got):\n%s", diff)
	}
	if got.Clusters[2].State != queryv1.ClusterState_CLUSTER_STATE_STALE || got.Clusters[2].Types[0].Queued != 5 {
		t.Errorf("cluster c = %v, want STALE with its 5 queued guests", got.Clusters[2])
	}
}

func TestClusterInfo(t *testing.T) {
	c := makeCluster("a").Machine("gpu", "g", makeType("x").Obj(), makeType("y").Obj()).Machine("cpu", "g", makeType("z").Obj()).Obj()
	got := ClusterInfo(c, now)
	if got.MachineCount != 2 || got.MachineTypeCount != 3 || got.HeartbeatAge.AsDuration() != 2*time.Second || got.State != queryv1.ClusterState_CLUSTER_STATE_AVAILABLE {
		t.Errorf("ClusterInfo = %v", got)
	}
}
