package machine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/machinetype"
)

// Reasons of the events a guest gets from the queue.
const (
	// ReasonQueued: the guest waits at the slot gate; the note says its
	// place in line and the type's figures.
	ReasonQueued = "Queued"
	// ReasonSlotGranted: the gate is removed, the scheduler places the guest.
	ReasonSlotGranted = "SlotGranted"
)

// removeSlotGate deletes the slot gate from spec.schedulingGates (the API
// allows removing gates, never adding them) and leaves any other gate.
var removeSlotGate = client.RawPatch(types.StrategicMergePatchType,
	fmt.Appendf(nil, `{"spec":{"schedulingGates":[{"$patch":"delete","name":%q}]}}`, imperatorv1alpha1.SlotSchedulingGate))

// queueNotes remembers the last note each gated guest was sent, so that a
// guest gets an event only when its place or the figures change.
type queueNotes struct {
	mu    sync.Mutex
	notes map[types.UID]queueNote
}

type queueNote struct{ machine, note string }

// changed records note for uid and tells whether it differs from the last.
func (q *queueNotes) changed(uid types.UID, machine, note string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.notes == nil {
		q.notes = map[types.UID]queueNote{}
	}
	if q.notes[uid].note == note {
		return false
	}
	q.notes[uid] = queueNote{machine: machine, note: note}
	return true
}

// forget drops the notes of machine's guests that are not in keep.
func (q *queueNotes) forget(machine string, keep map[types.UID]bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for uid, n := range q.notes {
		if n.machine == machine && !keep[uid] {
			delete(q.notes, uid)
		}
	}
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=patch

// grantSlots runs the line of every machine type of the Machine: it removes
// the gate of the guests planSlots lets through and tells the others where
// they stand. usage must hold the replicas the reservations were just
// applied with.
func (r *Reconciler) grantSlots(ctx context.Context, c client.Client, recorder events.EventRecorder, key string,
	machine *imperatorv1alpha1.Machine, group string, usage map[string]*typeUsage) error {
	log := ctrl.LoggerFrom(ctx)
	var errs []error
	keep := map[types.UID]bool{}
	for _, t := range machine.Spec.MachineTypes {
		u := usage[t.Name]
		if u == nil || len(u.gated) == 0 {
			continue
		}
		placeable, err := readyNodesFor(ctx, c, group, &t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		plan := planSlots(line{
			machineType: t.Name,
			available:   t.Available,
			held:        u.held(),
			releasing:   u.reservationPods > u.replicas,
			gated:       u.gated,
			placeable:   placeable,
		})
		for _, pod := range plan.grant {
			// The pod comes from the cache: patch a copy of its key only.
			guest := &corev1.Pod{}
			guest.Namespace, guest.Name = pod.Namespace, pod.Name
			if err := c.Patch(ctx, guest, removeSlotGate); err != nil {
				if client.IgnoreNotFound(err) != nil {
					errs = append(errs, fmt.Errorf("removing the slot gate of guest %s: %w", klog.KObj(pod), err))
				}
				continue
			}
			log.V(1).Info("Granted a slot to a guest", "pod", klog.KObj(pod), "machineType", t.Name)
			recorder.Eventf(pod, machine, corev1.EventTypeNormal, ReasonSlotGranted, "Grant",
				"granted a unit of %s of Machine %s: the scheduler places the guest now", t.Name, machine.Name)
		}
		for _, q := range plan.queued {
			keep[q.pod.UID] = true
			if r.notes.changed(q.pod.UID, key, q.note) {
				recorder.Eventf(q.pod, machine, corev1.EventTypeNormal, ReasonQueued, "Queue", "%s", q.note)
			}
		}
	}
	r.notes.forget(key, keep)
	return errors.Join(errs...)
}

// readyNodesFor returns whether a guest of the type can be placed on a
// node-pool=ready node of the type, read from the cache: the node must
// carry every label of the type's placement (the guest's injected
// affinity) and not be cordoned. nil when no node qualifies.
func readyNodesFor(ctx context.Context, c client.Reader, group string, t *imperatorv1alpha1.MachineType) (func(*corev1.Pod) bool, error) {
	selector := client.MatchingLabels{}
	for _, req := range machinetype.Placement(group, t) {
		selector[req.Key] = req.Values[0]
	}
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes, selector, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the ready nodes of %s: %w", t.Name, err)
	}
	for i := range nodes.Items {
		if !nodes.Items[i].Spec.Unschedulable {
			return func(*corev1.Pod) bool { return true }, nil
		}
	}
	return nil, nil
}
