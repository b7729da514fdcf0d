package persist

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/imperator-federation/imperator/hub/internal/store"
)

const hubNamespace = "imperator-system"

// replicaLease is the replica Lease of holder renewed at renewed (by the
// holder's clock); no renewal time when renewed is zero.
func replicaLease(holder string, renewed time.Time) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: hubNamespace, Name: ReplicaLeaseName(holder), Labels: map[string]string{ReplicaLabel: "true"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)},
	}
	if !renewed.IsZero() {
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(renewed))
	}
	return l
}

// restoredFromHubB is a store of replica hub-a that restored cluster x,
// served by hub-b, from an inventory and Lease written an hour before start.
func restoredFromHubB(clk *clocktesting.FakePassiveClock, start time.Time) *store.Store {
	st := store.New(clk, 40*time.Second)
	st.SetReplica("hub-a")
	st.Observe("x", store.Peer{Inventory: store.Cluster{Generation: 1, LastHeartbeat: start.Add(-time.Hour)}, Replica: "hub-b", RenewTime: start.Add(-time.Hour)})
	return st
}

// leaseEvent is what a replica's Follower sees of hub-b's replica Lease at
// a time after it started: a renewal written at renewed (hub-b's clock,
// relative to start), or the Lease deleted.
type leaseEvent struct {
	at      time.Duration
	renewed time.Duration
	deleted bool
}

// What a replica (leader or not) makes of another replica's Lease: the
// clusters that replica serves stay live while it is seen renewing, and go
// Unknown a grace period (40 s) after the last renewal seen.
func TestFollowerJudgesAnotherReplicaByItsLease(t *testing.T) {
	cases := map[string]struct {
		events  []leaseEvent
		checkAt time.Duration
		// wantLive: hub-b counts as running; wantLiveness and wantStale are
		// what queries show of cluster x, which hub-b serves.
		wantLive     bool
		wantLiveness store.Liveness
		wantStale    bool
	}{
		"renewed after this replica started: its clusters are live and current": {
			events:  []leaseEvent{{at: time.Second, renewed: time.Second}},
			checkAt: time.Second, wantLive: true, wantLiveness: store.LivenessAvailable,
		},
		"renewed only before this replica started: its clusters stay restored": {
			events:  []leaseEvent{{at: 0, renewed: -2 * time.Second}},
			checkAt: time.Second, wantLiveness: store.LivenessUnknown, wantStale: true,
		},
		"renewed before this replica started, then again: live from the renewal seen": {
			events:  []leaseEvent{{at: 0, renewed: -2 * time.Second}, {at: 5 * time.Second, renewed: 5 * time.Second}},
			checkAt: 5 * time.Second, wantLive: true, wantLiveness: store.LivenessAvailable,
		},
		"renewed every 30s: live past the grace period": {
			events:  []leaseEvent{{at: time.Second, renewed: time.Second}, {at: 31 * time.Second, renewed: 31 * time.Second}, {at: 61 * time.Second, renewed: 61 * time.Second}},
			checkAt: 100 * time.Second, wantLive: true, wantLiveness: store.LivenessAvailable,
		},
		// The holder's clock runs an hour behind: renewals count when seen.
		"renewals by a clock an hour behind: live while seen": {
			events:  []leaseEvent{{at: time.Second, renewed: time.Second}, {at: 31 * time.Second, renewed: -time.Hour}, {at: 61 * time.Second, renewed: -time.Hour + time.Second}},
			checkAt: 100 * time.Second, wantLive: true, wantLiveness: store.LivenessAvailable,
		},
		// A cache resync hands the same renewal again: it is no new sighting.
		"no renewal for longer than the grace period: Unknown, although the cache resynced": {
			events:  []leaseEvent{{at: time.Second, renewed: time.Second}, {at: 30 * time.Second, renewed: time.Second}},
			checkAt: 42 * time.Second, wantLiveness: store.LivenessUnknown, wantStale: true,
		},
		"deleted (the replica stopped): not live at once, its clusters still on their last sighting": {
			events:  []leaseEvent{{at: time.Second, renewed: time.Second}, {at: 10 * time.Second, deleted: true}},
			checkAt: 20 * time.Second, wantLiveness: store.LivenessAvailable,
		},
		"deleted: its clusters Unknown a grace period after the last renewal seen": {
			events:  []leaseEvent{{at: time.Second, renewed: time.Second}, {at: 10 * time.Second, deleted: true}},
			checkAt: 42 * time.Second, wantLiveness: store.LivenessUnknown, wantStale: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			api := newFailingAPI(t)
			start := time.Unix(10_000, 0)
			clk := clocktesting.NewFakePassiveClock(start)
			st := restoredFromHubB(clk, start)
			f := &Follower{Client: api, Store: st, Started: start}
			req := reconcile.Request{NamespacedName: client.ObjectKey{Namespace: hubNamespace, Name: ReplicaLeaseName("hub-b")}}
			for _, ev := range tc.events {
				clk.SetTime(start.Add(ev.at))
				lease := replicaLease("hub-b", start.Add(ev.renewed))
				switch {
				case ev.deleted:
					if err := api.Delete(ctx, lease); err != nil {
						t.Fatal(err)
					}
				default:
					cur := &coordinationv1.Lease{}
					err := api.Get(ctx, client.ObjectKeyFromObject(lease), cur)
					if err == nil {
						lease.ResourceVersion = cur.ResourceVersion
						err = api.Update(ctx, lease)
					} else {
						err = api.Create(ctx, lease)
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				if _, err := f.Reconcile(ctx, req); err != nil {
					t.Fatalf("reconciling hub-b's Lease %s in: %v", ev.at, err)
				}
				st.EvaluateLiveness()
			}
			clk.SetTime(start.Add(tc.checkAt))
			st.EvaluateLiveness()
			x, _ := st.Get("x")
			if got := st.ReplicaLive("hub-b"); got != tc.wantLive {
				t.Errorf("%s in: hub-b live = %t, want %t", tc.checkAt, got, tc.wantLive)
			}
			if x.Liveness != tc.wantLiveness || x.Stale() != tc.wantStale {
				t.Errorf("%s in: cluster x %s stale=%t (phase %s), want %s stale=%t", tc.checkAt, x.Liveness, x.Stale(), x.Phase, tc.wantLiveness, tc.wantStale)
			}
		})
	}
}

// A replica that starts counts as seen the replicas whose Leases say they
// renewed within the grace period, and no other Lease.
func TestRestoreCountsOnlyFreshReplicaLeasesAsSeen(t *testing.T) {
	start := time.Unix(10_000, 0)
	cases := map[string]struct {
		lease    *coordinationv1.Lease
		wantLive bool
	}{
		"renewed 10s ago by its clock": {
			lease: replicaLease("hub-b", start.Add(-10*time.Second)), wantLive: true,
		},
		"renewed 41s ago, longer than the grace period": {
			lease: replicaLease("hub-b", start.Add(-41*time.Second)),
		},
		"never renewed": {
			lease: replicaLease("hub-b", time.Time{}),
		},
		"not labelled as a replica Lease": {
			lease: func() *coordinationv1.Lease {
				l := replicaLease("hub-b", start.Add(-10*time.Second))
				l.Labels = nil
				return l
			}(),
		},
		"in another namespace than the hub's": {
			lease: func() *coordinationv1.Lease {
				l := replicaLease("hub-b", start.Add(-10*time.Second))
				l.Namespace = "default"
				return l
			}(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			api := newFailingAPI(t)
			if err := api.Create(ctx, tc.lease); err != nil {
				t.Fatal(err)
			}
			clk := clocktesting.NewFakePassiveClock(start)
			st := store.New(clk, 40*time.Second)
			st.SetReplica("hub-a")
			if err := New(api, st, Options{Namespace: hubNamespace, Clock: clk}).Restore(ctx, api); err != nil {
				t.Fatalf("Restore: %v", err)
			}
			if got := st.ReplicaLive("hub-b"); got != tc.wantLive {
				t.Errorf("hub-b live after Restore = %t, want %t", got, tc.wantLive)
			}
		})
	}
}
