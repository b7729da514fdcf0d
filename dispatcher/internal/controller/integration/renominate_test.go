package integration

import (
	"context"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestRenominatesWhenTheNominatedClusterGoesOffline: a Workload nominated
// to the cluster with the most free units is nominated to the other one
// once that cluster stops heartbeating and the hub counts it offline.
func TestRenominatesWhenTheNominatedClusterGoesOffline(t *testing.T) {
	e := startEnv(t, map[string]int32{"spoke-a": 8, "spoke-b": 4})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createNamespace(ctx, t, e.c, "team-a")
	wl := workload("team-a", "train", 2)
	must(t, e.c.Create(ctx, wl))
	must(t, reserveQuota(ctx, e.c, wl))

	if got := waitNominated(ctx, t, e, "team-a", "train", []string{"spoke-a"}, 30*time.Second); !slices.Equal(got, []string{"spoke-a"}) {
		t.Fatalf("nominatedClusterNames = %q, want [spoke-a] (8 free, the most)", got)
	}
	must(t, e.spokes["spoke-a"].stop())
	// The hub counts spoke-a offline after gracePeriod without a heartbeat;
	// its Watch stream tells the dispatcher, which nominates spoke-b.
	if got := waitNominated(ctx, t, e, "team-a", "train", []string{"spoke-b"}, gracePeriod+30*time.Second); !slices.Equal(got, []string{"spoke-b"}) {
		t.Fatalf("after spoke-a went offline: nominatedClusterNames = %q, want [spoke-b]", got)
	}
}

// waitNominated polls the Workload's nominatedClusterNames until it is want
// or timeout passes, and returns the last value read.
func waitNominated(ctx context.Context, t *testing.T, e *env, namespace, name string, want []string, timeout time.Duration) []string {
	t.Helper()
	var got []string
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = nominated(ctx, e.c, namespace, name)
		if err != nil {
			t.Fatalf("reading Workload %s/%s: %v", namespace, name, err)
		}
		return slices.Equal(got, want), nil
	})
	return got
}
