package holds

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/testing/protocmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// HubHoldReports of one replica: the holds of the spokes streaming to it.
func (r replicaSpokes) HubHoldReports() map[string][]*federationv1.HubHold {
	r.fleet.mu.Lock()
	defer r.fleet.mu.Unlock()
	out := map[string][]*federationv1.HubHold{}
	for cluster, replica := range r.fleet.stream {
		if replica != r.replica {
			continue
		}
		s := r.fleet.spokes[cluster]
		s.mu.Lock()
		out[cluster] = []*federationv1.HubHold{}
		for name, booking := range s.holds {
			out[cluster] = append(out[cluster], &federationv1.HubHold{Name: name, FleetHold: "imperator-system/" + name, Booking: booking})
		}
		s.mu.Unlock()
	}
	return out
}

func TestFindMismatches(t *testing.T) {
	fleetHold := func(name, uid string, phase imperatorv1alpha1.FleetHoldPhase, parts ...imperatorv1alpha1.FleetHoldCluster) imperatorv1alpha1.FleetHold {
		return imperatorv1alpha1.FleetHold{ObjectMeta: metav1.ObjectMeta{Name: name, UID: typesUID(uid)}, Status: imperatorv1alpha1.FleetHoldStatus{Phase: phase, Clusters: parts}}
	}
	part := func(cluster, result string) imperatorv1alpha1.FleetHoldCluster {
		return imperatorv1alpha1.FleetHoldCluster{Cluster: cluster, Result: result}
	}
	hold := func(name, booking string) *federationv1.HubHold {
		return &federationv1.HubHold{Name: name, FleetHold: "imperator-system/" + name, Booking: booking}
	}
	cases := map[string]struct {
		reports     map[string][]*federationv1.HubHold
		list        []imperatorv1alpha1.FleetHold
		wantOrphans map[string][]*federationv1.HubHold
		wantLost    map[string][]string
	}{
		"a held part, reported: nothing to do": {
			reports: map[string][]*federationv1.HubHold{"a": {hold("train", "u1")}},
			list:    []imperatorv1alpha1.FleetHold{fleetHold("train", "u1", imperatorv1alpha1.FleetHoldHeld, part("a", ResultHeld))},
		},
		"a hold whose FleetHold is gone is an orphan": {
			reports:     map[string][]*federationv1.HubHold{"a": {hold("train", "u1")}},
			wantOrphans: map[string][]*federationv1.HubHold{"a": {hold("train", "u1")}},
		},
		"a hold of an earlier booking of the name is an orphan": {
			reports:     map[string][]*federationv1.HubHold{"a": {hold("train", "u0")}},
			list:        []imperatorv1alpha1.FleetHold{fleetHold("train", "u1", imperatorv1alpha1.FleetHoldPending, part("a", ""))},
			wantOrphans: map[string][]*federationv1.HubHold{"a": {hold("train", "u0")}},
		},
		"a part confirmed released but still held (a late answer) is an orphan": {
			reports:     map[string][]*federationv1.HubHold{"a": {hold("train", "u1")}},
			list:        []imperatorv1alpha1.FleetHold{fleetHold("train", "u1", imperatorv1alpha1.FleetHoldReleased, part("a", ResultReleased))},
			wantOrphans: map[string][]*federationv1.HubHold{"a": {hold("train", "u1")}},
		},
		"a part being released is the Deliverer's": {
			reports: map[string][]*federationv1.HubHold{"a": {hold("train", "u1")}},
			list:    []imperatorv1alpha1.FleetHold{fleetHold("train", "u1", imperatorv1alpha1.FleetHoldFailed, part("a", ResultHeld))},
		},
		"a pending part is being asked for": {
			reports: map[string][]*federationv1.HubHold{"a": {hold("train", "u1")}},
			list:    []imperatorv1alpha1.FleetHold{fleetHold("train", "u1", imperatorv1alpha1.FleetHoldPending, part("a", ""))},
		},
		"another hub's hold is left alone": {
			reports: map[string][]*federationv1.HubHold{"a": {{Name: "x", FleetHold: "other-hub/x", Booking: "u9"}}},
		},
		"a held part its spoke no longer reports is lost": {
			reports:  map[string][]*federationv1.HubHold{"a": {}, "b": {hold("train", "u1")}},
			list:     []imperatorv1alpha1.FleetHold{fleetHold("train", "u1", imperatorv1alpha1.FleetHoldHeld, part("a", ResultHeld), part("b", ResultHeld))},
			wantLost: map[string][]string{"train": {"a"}},
		},
		"a part on a spoke not reporting here is not judged": {
			reports: map[string][]*federationv1.HubHold{"b": {hold("train", "u1")}},
			list:    []imperatorv1alpha1.FleetHold{fleetHold("train", "u1", imperatorv1alpha1.FleetHoldHeld, part("a", ResultHeld), part("b", ResultHeld))},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := findMismatches("imperator-system", tc.reports, tc.list)
			if diff := cmp.Diff(tc.wantOrphans, got.orphans, protocmp.Transform(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("orphans (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantLost, got.lost, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("lost (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTheHubReleasesAnOrphanAndFailsAHoldWithALostPart: spoke-a keeps a
// hold no FleetHold owns (a late answer after its hold was deleted), and
// spoke-b lost its part of a Held hold. Within two passes the orphan is
// released and the hold Failed, its other part released.
func TestTheHubReleasesAnOrphanAndFailsAHoldWithALostPart(t *testing.T) {
	h := newTwoReplicas(t)
	ctx := context.Background()
	if fh, err := h.replicas["a"].Create(ctx, spreadSpec("train", 4)); err != nil || fh.Status.Phase != imperatorv1alpha1.FleetHoldHeld {
		t.Fatalf("Create = %v, %v; want Held", fh, err)
	}
	spokeA, spokeB := h.fleet.spokes["spoke-a"], h.fleet.spokes["spoke-b"]
	spokeA.mu.Lock()
	spokeA.holds["ghost"] = "uid-of-nothing"
	spokeA.mu.Unlock()
	spokeB.mu.Lock()
	delete(spokeB.holds, "train")
	spokeB.mu.Unlock()

	clk := clocktesting.NewFakeClock(time.Now())
	reconcilers := map[string]*Reconciler{}
	for name, c := range h.replicas {
		on := New(Options{Client: h.api, Namespace: "imperator-system", Store: c.opts.Store, Spokes: c.opts.Spokes, Deadline: time.Second, Clock: clk})
		reconcilers[name] = &Reconciler{Coordinator: on, Reports: c.opts.Spokes.(replicaSpokes)}
	}
	pass := func() {
		for _, r := range reconcilers {
			if err := r.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	pass()
	if spokeA.held() != 2 {
		t.Fatalf("spoke-a keeps %d holds after one pass, want both still (a mismatch is acted on once confirmed)", spokeA.held())
	}
	clk.Step(confirmAfter)
	pass()
	spokeA.mu.Lock()
	_, ghost := spokeA.holds["ghost"]
	spokeA.mu.Unlock()
	if ghost {
		t.Errorf("the orphaned hold ghost is still held on spoke-a")
	}
	fh, err := h.replicas["b"].Get(ctx, "train")
	if err != nil {
		t.Fatal(err)
	}
	if fh.Status.Phase != imperatorv1alpha1.FleetHoldFailed {
		t.Fatalf("the hold with a lost part is %s, want Failed", fh.Status.Phase)
	}
	for _, cl := range fh.Status.Clusters {
		if cl.Cluster == "spoke-b" && cl.Reason != ReasonNoLongerHeld {
			t.Errorf("spoke-b's part says %s, want %s", cl.Reason, ReasonNoLongerHeld)
		}
	}
	eventually(t, 5*time.Second, "spoke-a's part of the failed hold released", func() bool { return spokeA.held() == 0 })
}

func typesUID(s string) types.UID { return types.UID(s) }
