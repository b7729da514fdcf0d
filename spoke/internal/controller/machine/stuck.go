package machine

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// untilNextStuck is how long until a terminating reservation pod of usage
// that is not stuck yet will be (no event tells), 0 when there is none.
func untilNextStuck(usage map[string]*typeUsage, now time.Time) time.Duration {
	var next time.Duration
	for _, u := range usage {
		if u.nextStuck.IsZero() {
			continue
		}
		// A second past the threshold: the pod is stuck by then.
		if d := max(u.nextStuck.Add(stuckReservationAfter+time.Second).Sub(now), time.Second); next == 0 || d < next {
			next = d
		}
	}
	return next
}

// ReasonReservationPodStuck is the Warning event a Machine gets once per
// reservation pod that stays terminating stuckReservationAfter past its
// deletion time.
const ReasonReservationPodStuck = "ReservationPodStuck"

// stuckWarnings remembers, per Machine, the stuck reservation pods it was
// warned about, so that each gets one event.
type stuckWarnings struct {
	mu     sync.Mutex
	warned map[string]map[types.UID]bool
}

// newlyStuck records the stuck pods of a Machine and returns those not seen
// stuck before; pods no longer stuck are forgotten.
func (w *stuckWarnings) newlyStuck(key string, stuck []types.UID) []types.UID {
	w.mu.Lock()
	defer w.mu.Unlock()
	before := w.warned[key]
	now := make(map[types.UID]bool, len(stuck))
	var fresh []types.UID
	for _, uid := range stuck {
		now[uid] = true
		if !before[uid] {
			fresh = append(fresh, uid)
		}
	}
	if w.warned == nil {
		w.warned = map[string]map[types.UID]bool{}
	}
	if len(now) == 0 {
		delete(w.warned, key)
	} else {
		w.warned[key] = now
	}
	return fresh
}

func (w *stuckWarnings) forgetMachine(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.warned, key)
}

// warnStuckReservations sends the Machine a Warning event for every
// reservation pod that turned stuck since the last reconcile.
func (r *Reconciler) warnStuckReservations(key string, recorder events.EventRecorder, machine *imperatorv1alpha1.Machine, usage map[string]*typeUsage) {
	var all []types.UID
	names := map[types.UID]string{}
	machineType := map[types.UID]string{}
	for name, u := range usage {
		for i, uid := range u.stuckUIDs {
			all = append(all, uid)
			names[uid], machineType[uid] = u.stuckPodNames[i], name
		}
	}
	for _, uid := range r.stuckWarned.newlyStuck(key, all) {
		recorder.Eventf(machine, nil, corev1.EventTypeWarning, ReasonReservationPodStuck, "Reconcile",
			"reservation pod %s is still terminating more than %s after its deletion time (a finalizer, or a kubelet that does not answer): "+
				"the %s queue no longer waits for it, and the capacity it holds on its node stays taken until it is gone",
			names[uid], stuckReservationAfter, machineType[uid])
	}
}
