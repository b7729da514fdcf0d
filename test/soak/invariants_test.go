package soak

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// scene drives a checker by hand: pods and Machines as the watches would
// deliver them, a clock the test moves.
type scene struct {
	t     *testing.T
	c     *Checker
	s     *spokeState
	clock time.Time
	rv    int
	pods  map[string]*corev1.Pod
}

func newScene(t *testing.T) *scene {
	sc := &scene{t: t, c: NewChecker(), clock: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC), pods: map[string]*corev1.Pod{}}
	sc.c.now = func() time.Time { return sc.clock }
	sc.s = sc.c.addSpoke("spoke-a")
	return sc
}

func (sc *scene) nextRV() string { sc.rv += 10; return strconv.Itoa(sc.rv) }

func (sc *scene) tick(d time.Duration) { sc.clock = sc.clock.Add(d) }

func (sc *scene) available(n int32) {
	m := wrappers.MakeMachine("soak-a", "soak-a").Type("medium", "6", "48Gi", n).Obj()
	m.ResourceVersion = sc.nextRV()
	sc.s.machineChanged(m)
}

// queue creates a gated guest, admitted in the order of the calls.
func (sc *scene) queue(name string, labels ...string) {
	p := wrappers.MakePod("team", name).InjectedGuest("soak-a", "medium").Obj()
	for i := 0; i+1 < len(labels); i += 2 {
		p.Labels[labels[i]] = labels[i+1]
	}
	p.UID = types.UID("uid-" + name)
	p.CreationTimestamp = metav1.NewTime(sc.clock)
	p.Annotations[imperatorv1alpha1.AdmittedAtAnnotation] = sc.clock.Format(time.RFC3339Nano)
	p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: imperatorv1alpha1.SlotSchedulingGate}}
	p.ResourceVersion = sc.nextRV()
	sc.pods[name] = p
	sc.c.podChanged(sc.s, nil, p.DeepCopy())
	sc.tick(time.Second)
}

func (sc *scene) update(name string, mutate func(*corev1.Pod)) {
	old := sc.pods[name].DeepCopy()
	p := sc.pods[name]
	mutate(p)
	p.ResourceVersion = sc.nextRV()
	sc.c.podChanged(sc.s, old, p.DeepCopy())
}

// letThrough removes the slot gate and binds the guest, as the agent and
// the scheduler do.
func (sc *scene) letThrough(name string) {
	sc.update(name, func(p *corev1.Pod) { p.Spec.SchedulingGates = nil })
	sc.update(name, func(p *corev1.Pod) { p.Spec.NodeName = "utaha"; p.Status.Phase = corev1.PodRunning })
}

func (sc *scene) deleteBy(name string, soak bool) {
	if soak {
		sc.c.DeletedBySoak(sc.pods[name].UID)
	}
	now := metav1.NewTime(sc.clock)
	sc.update(name, func(p *corev1.Pod) { p.DeletionTimestamp = &now })
	sc.c.podDeleted(sc.s, sc.pods[name].DeepCopy())
}

// broken judges every let-through and returns the invariants broken, each
// with its object.
func (sc *scene) broken() []string {
	sc.c.Drain()
	var out []string
	for _, v := range sc.c.Violations() {
		out = append(out, v.Invariant+" "+v.Object)
	}
	slices.Sort(out)
	return out
}

func TestInvariantsFromWatches(t *testing.T) {
	medium := " (type soak-a/medium)"
	cases := map[string]struct {
		play func(sc *scene)
		want []string
	}{
		"guests let through up to available break nothing": {
			play: func(sc *scene) {
				sc.available(2)
				sc.queue("a")
				sc.queue("b")
				sc.tick(3 * time.Second)
				sc.letThrough("a")
				sc.letThrough("b")
			},
		},
		"a guest let through beyond available breaks the cap": {
			play: func(sc *scene) {
				sc.available(1)
				sc.queue("a")
				sc.queue("b")
				sc.letThrough("a")
				sc.deleteBy("a", true)
				sc.letThrough("b")
				sc.queue("c")
				sc.letThrough("c")
			},
			want: []string{InvariantCap + " spoke-a/team/c" + medium},
		},
		"guests that ran before a lowering keep running: no violation until another is let through": {
			play: func(sc *scene) {
				sc.available(2)
				sc.queue("a")
				sc.queue("b")
				sc.queue("c")
				sc.letThrough("a")
				sc.letThrough("b")
				sc.available(1)
				sc.deleteBy("a", true)
				sc.letThrough("c")
			},
			want: []string{InvariantCap + " spoke-a/team/c" + medium},
		},
		"a later guest let through while an earlier one waits breaks FIFO": {
			play: func(sc *scene) {
				sc.available(3)
				sc.queue("early")
				sc.queue("late")
				sc.tick(3 * time.Second)
				sc.letThrough("late")
			},
			want: []string{InvariantFIFO + " spoke-a/team/late" + medium},
		},
		"a guest claiming a hold goes ahead of the line": {
			play: func(sc *scene) {
				sc.available(3)
				sc.queue("early")
				sc.queue("holder", imperatorv1alpha1.HoldKey, "booked")
				sc.tick(3 * time.Second)
				sc.letThrough("holder")
			},
		},
		"a running guest deleted by someone else than the soak is reported, one the soak deleted is not": {
			play: func(sc *scene) {
				sc.available(2)
				sc.queue("ours")
				sc.queue("theirs")
				sc.letThrough("ours")
				sc.letThrough("theirs")
				sc.deleteBy("ours", true)
				sc.deleteBy("theirs", false)
			},
			want: []string{InvariantNoEvict + " spoke-a/team/theirs"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sc := newScene(t)
			tc.play(sc)
			if got := sc.broken(); !slices.Equal(got, tc.want) {
				t.Errorf("broken invariants:\n got %s\nwant %s\n%v", strings.Join(got, "; "), strings.Join(tc.want, "; "), sc.c.Violations())
			}
		})
	}
}
