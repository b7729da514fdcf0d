package machine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

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

// grantPatch removes the slot gate from spec.schedulingGates (the API
// allows removing gates, never adding them), leaving any other gate, and the
// queue annotation, in one write.
var grantPatch = client.RawPatch(types.StrategicMergePatchType,
	fmt.Appendf(nil, `{"metadata":{"annotations":{%q:null}},"spec":{"schedulingGates":[{"$patch":"delete","name":%q}]}}`,
		imperatorv1alpha1.QueueAnnotation, imperatorv1alpha1.SlotSchedulingGate))

// queuePatch sets the queue annotation of a waiting guest.
func queuePatch(note string) (client.Patch, error) {
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{imperatorv1alpha1.QueueAnnotation: note}}})
	if err != nil {
		return nil, fmt.Errorf("encoding the queue annotation: %w", err)
	}
	return client.RawPatch(types.MergePatchType, data), nil
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=patch

// grantSlots runs the line of every machine type of the Machine: it removes
// the gate of the guests planSlots lets through and tells the others where
// they stand, in their queue annotation, written only when its text
// changes. A guest gets a Queued event when it first waits in line and a
// SlotGranted event when its gate is removed. usage must hold the replicas
// the reservations were just applied with.
func (r *Reconciler) grantSlots(ctx context.Context, c client.Client, recorder events.EventRecorder,
	machine *imperatorv1alpha1.Machine, group string, usage map[string]*typeUsage) error {
	log := ctrl.LoggerFrom(ctx)
	var errs []error
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
			if err := c.Patch(ctx, guest, grantPatch); err != nil {
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
			previous, told := q.pod.Annotations[imperatorv1alpha1.QueueAnnotation]
			if previous == q.note {
				continue
			}
			patch, err := queuePatch(q.note)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			guest := &corev1.Pod{}
			guest.Namespace, guest.Name = q.pod.Namespace, q.pod.Name
			if err := c.Patch(ctx, guest, patch); err != nil {
				if client.IgnoreNotFound(err) != nil {
					errs = append(errs, fmt.Errorf("annotating waiting guest %s: %w", klog.KObj(q.pod), err))
				}
				continue
			}
			log.V(2).Info("Told a waiting guest its place", "pod", klog.KObj(q.pod), "note", q.note)
			if !told {
				// Later notes go to the annotation only: the event recorder
				// folds events of one reason about one pod into a series that
				// keeps the first note.
				recorder.Eventf(q.pod, machine, corev1.EventTypeNormal, ReasonQueued, "Queue", "%s", q.note)
			}
		}
	}
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
