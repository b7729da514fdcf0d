package machine

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

func TestGrantExpectations(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := now
	e := &grantExpectations{now: func() time.Time { return clock }}
	const machine = "cluster/general-machine"
	a := withUID(gatedGuest("team-a", "a", 1), "a")
	b := withUID(gatedGuest("team-a", "b", 2), "b")
	// usage as the cache shows it: a and b at the gate, 1 unit available,
	// none held.
	stale := func() map[string]*typeUsage {
		return map[string]*typeUsage{"compute-small": {
			Usage: imperatorv1alpha1.Usage{Maximum: 1, Waiting: 2, Queued: 2},
			gated: []*corev1.Pod{a, b},
		}}
	}
	type view struct {
		Held, Queued int32
		Gated        []string
		Grant        []string
	}
	look := func(usage map[string]*typeUsage) view {
		u := usage["compute-small"]
		plan := planSlots(line{machineType: "compute-small", available: 1, held: u.held(), gated: u.gated,
			placeable: func(p *corev1.Pod) bool { return true }})
		return view{Held: u.held(), Queued: u.Queued, Gated: names(u.gated), Grant: names(plan.grant)}
	}

	e.expect(machine, a.UID)
	t.Run("a reconcile before the cache shows the grant counts it held and grants nobody else", func(t *testing.T) {
		usage := stale()
		e.observe(machine, usage)
		if diff := cmp.Diff(view{Held: 1, Queued: 1, Gated: []string{"team-a/b"}}, look(usage)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("another Machine is not affected", func(t *testing.T) {
		usage := stale()
		e.observe("cluster/other", usage)
		if diff := cmp.Diff(view{Queued: 2, Gated: []string{"team-a/a", "team-a/b"}, Grant: []string{"team-a/a"}}, look(usage)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("once the cache shows the guest without its gate, the grant is forgotten", func(t *testing.T) {
		usage := map[string]*typeUsage{"compute-small": {
			Usage: imperatorv1alpha1.Usage{Maximum: 1, Waiting: 2, Queued: 1}, granted: 1, gated: []*corev1.Pod{b},
		}}
		e.observe(machine, usage)
		if _, ok := e.pending[machine]; ok {
			t.Errorf("expectations of %s kept after the cache showed the grant: %v", machine, e.pending[machine])
		}
	})
	t.Run("a grant the cache never shows expires", func(t *testing.T) {
		e.expect(machine, types.UID("a"))
		clock = now.Add(grantExpectationsTTL + time.Second)
		usage := stale()
		e.observe(machine, usage)
		if diff := cmp.Diff(view{Queued: 2, Gated: []string{"team-a/a", "team-a/b"}, Grant: []string{"team-a/a"}}, look(usage)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
}

// A guest let through and then found unplaceable (a node left the pool
// before the cache showed the grant) holds its unit: the reservation must
// not grow back into it.
func TestGrantExpectationsOfAnUnplaceableGuest(t *testing.T) {
	e := &grantExpectations{}
	const machine = "cluster/general-machine"
	a := withUID(gatedGuest("team-a", "a", 1), "a")
	e.expect(machine, a.UID)
	u := &typeUsage{Usage: imperatorv1alpha1.Usage{Maximum: 2, Reserved: 2, Waiting: 1, Queued: 1, Unplaceable: 1}, replicas: 2,
		unplaceable: []*corev1.Pod{a}}
	e.observe(machine, map[string]*typeUsage{"compute-small": u})
	type view struct {
		Usage             imperatorv1alpha1.Usage
		Replicas, Granted int32
		Unplaceable       []string
	}
	want := view{Usage: imperatorv1alpha1.Usage{Maximum: 2, Reserved: 2, Waiting: 1}, Replicas: 1, Granted: 1}
	if diff := cmp.Diff(want, view{u.Usage, u.replicas, u.granted, names(u.unplaceable)}); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestStuckWarningsOncePerPod(t *testing.T) {
	w := &stuckWarnings{}
	const machine = "cluster/general-machine"
	steps := []struct {
		stuck, want []types.UID
	}{
		{stuck: []types.UID{"r0"}, want: []types.UID{"r0"}},
		{stuck: []types.UID{"r0"}},
		{stuck: []types.UID{"r0", "r1"}, want: []types.UID{"r1"}},
		// r0 is gone; should a pod of that UID come back stuck, it is new.
		{stuck: []types.UID{"r1"}},
		{stuck: []types.UID{"r0", "r1"}, want: []types.UID{"r0"}},
	}
	for i, s := range steps {
		if diff := cmp.Diff(s.want, w.newlyStuck(machine, s.stuck)); diff != "" {
			t.Errorf("reconcile %d: warned about (-want +got):\n%s", i, diff)
		}
	}
}
