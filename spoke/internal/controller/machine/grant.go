package machine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	// ReasonNotLetThrough: a guest at the slot gate that the queue will not
	// let through as things are (its namespace is not opted in, its machine
	// type is no longer offered); the note says why and what to do.
	ReasonNotLetThrough = "NotLetThrough"
)

// grantPatch removes the slot gate from spec.schedulingGates (the API
// allows removing gates, never adding them), leaving any other gate, and the
// queue annotation, in one write. It carries the guest's UID: the API server
// refuses the patch (422, metadata.uid is immutable) when the pod of that
// name is another one, a guest deleted and created again under the same name
// since the cache saw it, which has its own place in line.
func grantPatch(uid types.UID) client.Patch {
	return client.RawPatch(types.StrategicMergePatchType,
		fmt.Appendf(nil, `{"metadata":{"uid":%q,"annotations":{%q:null}},"spec":{"schedulingGates":[{"$patch":"delete","name":%q}]}}`,
			uid, imperatorv1alpha1.QueueAnnotation, imperatorv1alpha1.SlotSchedulingGate))
}

// queuePatch sets the queue annotation of a waiting guest, that guest only
// (its UID, as grantPatch).
func queuePatch(uid types.UID, note string) (client.Patch, error) {
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         uid,
		"annotations": map[string]string{imperatorv1alpha1.QueueAnnotation: note},
	}})
	if err != nil {
		return nil, fmt.Errorf("encoding the queue annotation: %w", err)
	}
	return client.RawPatch(types.MergePatchType, data), nil
}

// replaced tells whether a patch carrying a pod's UID failed because the pod
// of that name is gone or is another one.
func replaced(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsInvalid(err) || apierrors.IsConflict(err)
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=patch

// grantSlots runs the line of every machine type of the Machine: it removes
// the gate of the guests planSlots lets through and tells the others where
// they stand, in their queue annotation, written only when its text
// changes. A guest gets a Queued event when it first waits in line and a
// SlotGranted event when its gate is removed. usage must hold the replicas
// the reservations were just applied with, and the grants the cache does not
// show yet (grantExpectations.observe). Every grant is remembered in
// expectations under key. The native PodGroups of the gangs at the gate
// are told where they stand (podgroup_status.go).
//
// Each gate is opened only while fence confirms that the Machine the plan
// was made from is still in force (grantfence.go); when it is not, the
// remaining grants are held back and errGrantStale returned among errors.
func (r *Reconciler) grantSlots(ctx context.Context, c client.Client, recorder events.EventRecorder,
	machine *imperatorv1alpha1.Machine, usage map[string]*typeUsage, key string, podGroups *groupSizes, fence *grantFence) error {
	log := ctrl.LoggerFrom(ctx)
	var errs []error
	var held error
	for _, t := range machine.Spec.MachineTypes {
		u := usage[t.Name]
		if u == nil || len(u.gated)+len(u.unplaceable)+len(u.parked) == 0 {
			continue
		}
		// Whether a node can take a guest is what podCounts found: the
		// replicas were set from it, and a guest it found unplaceable has
		// no reservation pod scaled away for it.
		unplaceable := make(map[*corev1.Pod]bool, len(u.unplaceable))
		for _, pod := range u.unplaceable {
			unplaceable[pod] = true
		}
		placeable := func(pod *corev1.Pod) bool { return !unplaceable[pod] }
		if u.noReadyNode {
			placeable = nil
		}
		plan := planSlots(line{
			machineType: t.Name,
			available:   t.Available,
			held:        u.held(),
			releasing:   u.releasing(),
			stuck:       u.stuck,
			gated:       append(slices.Clip(u.gated), u.unplaceable...),
			placeable:   placeable,
			holds:       u.holds,
			gangs:       u.gangs,
			parked:      u.parked,
		})
		for _, pod := range plan.grant {
			if held != nil {
				break
			}
			if held = fence.allow(ctx); held != nil {
				errs = append(errs, held)
				break
			}
			// The pod comes from the cache: patch a copy of its key only.
			guest := &corev1.Pod{}
			guest.Namespace, guest.Name = pod.Namespace, pod.Name
			// Expected before the write: a reconcile that starts as soon as
			// the write lands must count the grant, even if the cache shows
			// the guest gated still.
			r.expectations.expect(key, pod.UID)
			if err := c.Patch(ctx, guest, grantPatch(pod.UID)); err != nil {
				r.expectations.forget(key, pod.UID)
				if !replaced(err) {
					errs = append(errs, fmt.Errorf("removing the slot gate of guest %s: %w", klog.KObj(pod), err))
					continue
				}
				log.V(1).Info("Guest is gone or was created again under its name, no slot granted", "pod", klog.KObj(pod), "reason", err.Error())
				continue
			}
			if g := u.gangs[pod.UID]; g != nil {
				log.V(1).Info("Granted a slot to a gang member", "pod", klog.KObj(pod), "machineType", t.Name, "gang", g.id.String())
				recorder.Eventf(pod, machine, corev1.EventTypeNormal, ReasonSlotGranted, "Grant",
					"gang %s: %d of %d let through together, Running: granted a unit of %s of Machine %s, the scheduler places the guest now",
					g.id, g.need, g.size, t.Name, machine.Name)
				continue
			}
			log.V(1).Info("Granted a slot to a guest", "pod", klog.KObj(pod), "machineType", t.Name)
			recorder.Eventf(pod, machine, corev1.EventTypeNormal, ReasonSlotGranted, "Grant",
				"granted a unit of %s of Machine %s: the scheduler places the guest now", t.Name, machine.Name)
		}
		errs = append(errs, tellWaiting(ctx, c, recorder, machine, plan.queued))
		if r.podGroups.native {
			errs = append(errs, tellPodGroups(ctx, c, podGroups, podGroupVerdicts(u, plan, t.Name, machine.Name), time.Now()))
		}
	}
	return errors.Join(errs...)
}

// tellWaiting writes each guest's note into its queue annotation when its
// text changed, with a Queued event the first time.
func tellWaiting(ctx context.Context, c client.Client, recorder events.EventRecorder, machine *imperatorv1alpha1.Machine, queued []queuedGuest) error {
	var errs []error
	for _, q := range queued {
		previous, told := q.pod.Annotations[imperatorv1alpha1.QueueAnnotation]
		if previous == q.note {
			continue
		}
		patch, err := queuePatch(q.pod.UID, q.note)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		guest := &corev1.Pod{}
		guest.Namespace, guest.Name = q.pod.Namespace, q.pod.Name
		if err := c.Patch(ctx, guest, patch); err != nil {
			if !replaced(err) {
				errs = append(errs, fmt.Errorf("annotating waiting guest %s: %w", klog.KObj(q.pod), err))
			}
			continue
		}
		ctrl.LoggerFrom(ctx).V(2).Info("Told a waiting guest its place", "pod", klog.KObj(q.pod), "note", q.note)
		if !told {
			// Later notes go to the annotation only: the event recorder
			// folds events of one reason about one pod into a series that
			// keeps the first note.
			recorder.Eventf(q.pod, machine, corev1.EventTypeNormal, ReasonQueued, "Queue", "%s", q.note)
		}
	}
	return errors.Join(errs...)
}

// tellNotOwner tells every guest at the gate of a Machine that does not
// control its reservations why none is let through: the conflict, in its
// queue annotation.
func tellNotOwner(ctx context.Context, c client.Client, recorder events.EventRecorder, machine *imperatorv1alpha1.Machine,
	usage map[string]*typeUsage, conflict *conflictError) error {
	var queued []queuedGuest
	for _, t := range machine.Spec.MachineTypes {
		u := usage[t.Name]
		if u == nil {
			continue
		}
		note := fmt.Sprintf("waiting for %s: %s; Machine %s lets no guest through until it controls its reservations", t.Name, conflict.Error(), machine.Name)
		for _, pod := range slices.Concat(u.gated, u.unplaceable) {
			queued = append(queued, queuedGuest{pod: pod, note: note})
		}
		for _, q := range u.parked {
			queued = append(queued, queuedGuest{pod: q.pod, note: note})
		}
	}
	return tellWaiting(ctx, c, recorder, machine, queued)
}

// readyNodesOf lists, from the cache, the nodes a guest of the type may be
// placed on: node-pool=ready nodes carrying every label of the type's
// placement (the guest's injected affinity), not cordoned.
func readyNodesOf(ctx context.Context, c client.Reader, group string, t *imperatorv1alpha1.MachineType) ([]*corev1.Node, error) {
	selector := client.MatchingLabels{}
	for _, req := range machinetype.Placement(group, t) {
		selector[req.Key] = req.Values[0]
	}
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes, selector, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the ready nodes of %s: %w", t.Name, err)
	}
	var ready []*corev1.Node
	for i := range nodes.Items {
		if !nodes.Items[i].Spec.Unschedulable {
			ready = append(ready, &nodes.Items[i])
		}
	}
	return ready, nil
}

// grantExpectationsTTL bounds how long a grant the cache does not show is
// counted: a watch event arrives in milliseconds; after that long without
// one the cache is trusted again (as the ReplicaSet controller's
// expectations expire after five minutes).
const grantExpectationsTTL = 2 * time.Minute

// grantExpectations remembers, per Machine, the guests whose gate the
// controller removed until its cache shows them without the gate (or gone):
// a reconcile right after a grant reads the cache before the watch event of
// the write arrived, sees the guest gated still, and would otherwise not
// count its unit as held, and could let a second guest into it (a guest
// admitted earlier by creation time, or one that no node could take before).
// This costs no API call: reading the pods live before every grant instead
// would cost a LIST of the group's pods per reconcile with waiting guests.
type grantExpectations struct {
	mu sync.Mutex
	// pending maps a Machine's key to the UIDs granted and when.
	pending map[string]map[types.UID]time.Time
	now     func() time.Time
}

func (e *grantExpectations) expect(key string, uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pending == nil {
		e.pending = map[string]map[types.UID]time.Time{}
	}
	if e.pending[key] == nil {
		e.pending[key] = map[types.UID]time.Time{}
	}
	e.pending[key][uid] = e.clock()
}

func (e *grantExpectations) forget(key string, uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.pending[key], uid)
}

// forgetMachine drops every expectation of a Machine that is gone.
func (e *grantExpectations) forgetMachine(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.pending, key)
}

func (e *grantExpectations) clock() time.Time {
	if e.now != nil {
		return e.now()
	}
	return time.Now()
}

// observe counts the granted guests that usage, read from the cache, still
// shows gated as granted (held, no longer queued), and forgets the grants
// the cache shows: a guest not gated any more, or gone, or expired.
func (e *grantExpectations) observe(key string, usage map[string]*typeUsage) {
	e.mu.Lock()
	defer e.mu.Unlock()
	pending := e.pending[key]
	if len(pending) == 0 {
		return
	}
	now := e.clock()
	stillGated := map[types.UID]bool{}
	for _, u := range usage {
		granted := func(pod *corev1.Pod) bool {
			at, ok := pending[pod.UID]
			if !ok || now.Sub(at) > grantExpectationsTTL {
				return false
			}
			stillGated[pod.UID] = true
			u.Queued--
			u.granted++
			u.addHolding(pod)
			if id, _, _, ok := gangMembership(pod); ok {
				if u.gangHolding == nil {
					u.gangHolding = map[gangID]int32{}
				}
				u.gangHolding[id]++
			}
			return true
		}
		u.gated = slices.DeleteFunc(u.gated, granted)
		// A granted guest that no node can take now (a node left the pool
		// since) holds its unit like any granted guest: the replicas must
		// leave it out again.
		if n := len(u.unplaceable); n > 0 {
			u.unplaceable = slices.DeleteFunc(u.unplaceable, granted)
			if moved := int32(n - len(u.unplaceable)); moved > 0 {
				u.Unplaceable -= moved
				u.replicas = reservationReplicas(u.Maximum, u.Usage)
			}
		}
	}
	for uid := range pending {
		if !stillGated[uid] {
			delete(pending, uid)
		}
	}
	if len(pending) == 0 {
		delete(e.pending, key)
	}
}

// tellStranded tells the guests at the slot gate that the queue does not
// let through why, in their queue annotation (written only when its text
// changes) and a Warning event when it does: the gated guests of a
// namespace that is not opted in (any more), and typeGone, those whose
// machine type the Machine no longer offers. They stay gated: the API does
// not allow adding the gate back, and letting them through would hand out a
// unit nobody offers. They count nowhere.
func (r *Reconciler) tellStranded(ctx context.Context, c client.Client, recorder events.EventRecorder,
	machine *imperatorv1alpha1.Machine, usage map[string]*typeUsage, typeGone []*corev1.Pod) error {
	type told struct {
		pod  *corev1.Pod
		note string
	}
	var all []told
	for _, t := range machine.Spec.MachineTypes {
		if u := usage[t.Name]; u != nil {
			for _, pod := range u.stranded {
				all = append(all, told{pod, fmt.Sprintf("not let through to %s: namespace %s is not opted in to Imperator (label %s=%s); label it again or delete the pod",
					t.Name, pod.Namespace, imperatorv1alpha1.InjectResourceKey, imperatorv1alpha1.InjectResourceEnabled)})
			}
		}
	}
	for _, pod := range typeGone {
		all = append(all, told{pod, fmt.Sprintf("not let through: Machine %s no longer offers machine type %s; delete the pod",
			machine.Name, pod.Labels[imperatorv1alpha1.MachineTypeKey])})
	}
	var errs []error
	for _, s := range all {
		if s.pod.Annotations[imperatorv1alpha1.QueueAnnotation] == s.note {
			continue
		}
		patch, err := queuePatch(s.pod.UID, s.note)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		guest := &corev1.Pod{}
		guest.Namespace, guest.Name = s.pod.Namespace, s.pod.Name
		if err := c.Patch(ctx, guest, patch); err != nil {
			if !replaced(err) {
				errs = append(errs, fmt.Errorf("annotating guest %s: %w", klog.KObj(s.pod), err))
			}
			continue
		}
		ctrl.LoggerFrom(ctx).V(1).Info("Guest is not let through", "pod", klog.KObj(s.pod), "note", s.note)
		recorder.Eventf(s.pod, machine, corev1.EventTypeWarning, ReasonNotLetThrough, "Queue", "%s", s.note)
	}
	return errors.Join(errs...)
}

// maxNodesWithoutGPUs bounds the nodes nodesWithoutGPUs names per type.
const maxNodesWithoutGPUs = 10

// nodesWithoutGPUs returns, per served machine type that asks for GPUs and
// has reservation pods that cannot be scheduled, its ready pool nodes
// (readyNodesOf) whose allocatable has none of the type's GPU resource, in
// name order, at most maxNodesWithoutGPUs each. Such a node is in the pool
// but its GPU driver or device plugin does not run (a node agent kept off a
// tainted pool node, docs/gpu-operator.md): the reservations wait forever.
// Types without unschedulable reservations cost nothing.
func nodesWithoutGPUs(ctx context.Context, c client.Reader, machine *imperatorv1alpha1.Machine, group string,
	usage map[string]*typeUsage, served []string) (map[string][]string, error) {
	var out map[string][]string
	for _, name := range served {
		t := machine.MachineType(name)
		u := usage[name]
		if t == nil || t.Spec.GPU == nil || u == nil || u.unschedulable == 0 {
			continue
		}
		nodes, err := readyNodesOf(ctx, c, group, t)
		if err != nil {
			return nil, err
		}
		resource := corev1.ResourceName(t.Spec.GPU.Type)
		var names []string
		for _, n := range nodes {
			if q, ok := n.Status.Allocatable[resource]; !ok || q.IsZero() {
				names = append(names, n.Name)
			}
		}
		if len(names) == 0 {
			continue
		}
		slices.Sort(names)
		if len(names) > maxNodesWithoutGPUs {
			names = append(names[:maxNodesWithoutGPUs], fmt.Sprintf("and %d more", len(names)-maxNodesWithoutGPUs))
		}
		if out == nil {
			out = map[string][]string{}
		}
		out[name] = names
	}
	return out, nil
}
