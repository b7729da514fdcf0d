package holds

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/imperator-federation/imperator/hub/internal/capacity"
	"github.com/imperator-federation/imperator/hub/internal/store"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// cluster is an Available cluster with one Machine of group whose types
// have the given free units (maximum = reserved = free, nothing used) and
// held units.
func cluster(name, group string, types ...*federationv1.MachineType) *store.Cluster {
	return &store.Cluster{
		Name: name, Liveness: store.LivenessAvailable, LastHeartbeat: now, ObservedAt: now,
		Machines: []*federationv1.Machine{{Name: "m-" + group, Group: group, Types: types}},
	}
}

func unitType(name string, gpus, free, held int32) *federationv1.MachineType {
	return &federationv1.MachineType{
		Name: name, Cpu: "8", Memory: "32Gi", Available: free,
		Gpu:   &federationv1.GPU{Type: "nvidia.com/gpu", Num: gpus},
		Usage: &federationv1.Usage{Maximum: free, Reserved: free, Held: held},
	}
}

func TestPlan(t *testing.T) {
	cases := map[string]struct {
		clusters  []*store.Cluster
		req       capacity.Request
		wantParts []part
		wantWhy   string
	}{
		"same cluster: the cluster with the most free units": {
			clusters:  []*store.Cluster{cluster("a", "g", unitType("x", 1, 3, 0)), cluster("b", "g", unitType("x", 1, 5, 0))},
			req:       capacity.Request{Type: "x", Count: 3},
			wantParts: []part{{cluster: "b", group: "g", typ: "x", count: 3}},
		},
		"spread: most free first, the rest on the next": {
			clusters:  []*store.Cluster{cluster("a", "g", unitType("x", 1, 3, 0)), cluster("b", "g", unitType("x", 1, 5, 0))},
			req:       capacity.Request{Type: "x", Count: 7, Spread: true},
			wantParts: []part{{cluster: "b", group: "g", typ: "x", count: 5}, {cluster: "a", group: "g", typ: "x", count: 2}},
		},
		"held units are not placed again": {
			clusters: []*store.Cluster{cluster("a", "g", unitType("x", 1, 4, 3))},
			req:      capacity.Request{Type: "x", Count: 2, Spread: true},
			wantWhy:  "1 of 2 units fit across the fleet",
		},
		"same cluster needs the units in one type: a shape matching two types of 2 free each does not fit 3": {
			clusters: []*store.Cluster{cluster("a", "g", unitType("x", 1, 2, 0), unitType("y", 2, 2, 0))},
			req:      capacity.Request{Shape: &capacity.Shape{GPUs: 1}, Count: 3},
			wantWhy:  "no cluster has 3 free units of one machine type",
		},
		"a shape takes the matching type with the most free units": {
			clusters:  []*store.Cluster{cluster("a", "g", unitType("x", 1, 2, 0), unitType("y", 2, 6, 0))},
			req:       capacity.Request{Shape: &capacity.Shape{GPUs: 1}, Count: 4},
			wantParts: []part{{cluster: "a", group: "g", typ: "y", count: 4}},
		},
		"offline clusters are never chosen, and the reason says so": {
			clusters: []*store.Cluster{func() *store.Cluster {
				c := cluster("a", "g", unitType("x", 1, 8, 0))
				c.Liveness = store.LivenessUnknown
				return c
			}()},
			req:     capacity.Request{Type: "x", Count: 1},
			wantWhy: "a: offline",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			parts, why := plan(tc.clusters, tc.req, now)
			if diff := cmp.Diff(tc.wantParts, parts, cmp.AllowUnexported(part{})); diff != "" {
				t.Errorf("plan() parts (-want +got):\n%s", diff)
			}
			if tc.wantWhy == "" && why != "" || !strings.Contains(why, tc.wantWhy) {
				t.Errorf("plan() why = %q, want it to contain %q", why, tc.wantWhy)
			}
		})
	}
}
