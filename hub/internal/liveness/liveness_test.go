package liveness

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/imperator-federation/imperator/hub/internal/store"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// TestASilentClusterTurnsUnknownWhenItsGracePeriodRunsOut: the reconcile of a
// heartbeating cluster asks to look again just when its grace period runs
// out, and that look turns it Unknown; a message makes it Available again.
func TestASilentClusterTurnsUnknownWhenItsGracePeriodRunsOut(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	st := store.New(clk, 15*time.Second)
	st.Connect("a", &federationv1.Hello{Epoch: 1})
	r := &Reconciler{Store: st}
	ctx := context.Background()

	clk.SetTime(clk.Now().Add(5 * time.Second))
	res, err := r.Reconcile(ctx, store.Request("a"))
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter < 10*time.Second || res.RequeueAfter > 11*time.Second {
		t.Fatalf("RequeueAfter = %s 5s after the last message with a 15s grace period, want about 10s", res.RequeueAfter)
	}
	if c, _ := st.Get("a"); c.Liveness != store.LivenessAvailable {
		t.Fatalf("liveness %s within the grace period, want Available", c.Liveness)
	}

	clk.SetTime(clk.Now().Add(res.RequeueAfter))
	res, err = r.Reconcile(ctx, store.Request("a"))
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := st.Get("a"); c.Liveness != store.LivenessUnknown || res.RequeueAfter != 0 {
		t.Fatalf("liveness %s, RequeueAfter %s once the grace period ran out, want Unknown and no requeue (a message revives it)", c.Liveness, res.RequeueAfter)
	}

	st.Heartbeat("a", 1, &federationv1.Heartbeat{})
	if c, _ := st.Get("a"); c.Liveness != store.LivenessAvailable {
		t.Errorf("liveness %s after a heartbeat, want Available", c.Liveness)
	}
	if res, _ := r.Reconcile(ctx, store.Request("gone")); res.RequeueAfter != 0 {
		t.Errorf("a cluster not in the store is looked at again after %s, want never", res.RequeueAfter)
	}
}
