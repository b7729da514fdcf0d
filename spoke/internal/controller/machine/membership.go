package machine

import (
	"context"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// Which pods labelled with a Machine's group are the Machine's: guests the
// agent's admission path admitted (admittedGuest), and reservation pods of
// the StatefulSets the Machine controls (ownReservation). The others count
// nowhere (podCounts).

// maxRecordBytes bounds the injector's record a guest may carry: the
// injector writes a few hundred bytes, and a longer value is not one it
// wrote, so it is not parsed.
const maxRecordBytes = 16 << 10

// injectionRecord is the part of the Pod Resource Injector's record
// (imperatorv1alpha1.InjectedAnnotation, written as the podinjector
// package's Record) that the count reads.
type injectionRecord struct {
	MachineGroup string `json:"machineGroup"`
	MachineType  string `json:"machineType"`
}

// admittedGuest tells whether a pod labelled as a guest went through the
// agent's admission path: it carries the injector's record, naming the
// machine group and type of its labels. The API server lets only a guest
// the injector held at the slot gate in an opted-in namespace carry the
// record at creation, and only the agent change it later
// (docs/contract.md), so a pod without it was never made a guest: anyone
// who may create pods can put the three labels on one, in any namespace.
// A record naming another group or type is one whose labels were changed
// after admission: the unit it was admitted for is not the one its labels
// now ask for.
func admittedGuest(pod *corev1.Pod) bool {
	raw, ok := pod.Annotations[imperatorv1alpha1.InjectedAnnotation]
	if !ok || len(raw) > maxRecordBytes {
		return false
	}
	var record injectionRecord
	if err := json.Unmarshal([]byte(raw), &record); err != nil {
		return false
	}
	return record.MachineGroup != "" && record.MachineGroup == pod.Labels[imperatorv1alpha1.MachineGroupKey] &&
		record.MachineType == pod.Labels[imperatorv1alpha1.MachineTypeKey]
}

// ownReservation tells whether a pod labelled as a reservation of group is
// one of the Machine's: in the agent's namespace and controlled by the
// reservation StatefulSet of its machine type, <machine-type>-<machine-group>,
// that the Machine controls (statefulSets, by UID). The original Imperator's
// reservation pods carry the same labels in the same namespace (its default
// one is the agent's), but their StatefulSet is <machine-group>-<machine-type>
// and the Machine is not its controller (package migrate detaches it), so
// they hold units the agent does not: counted, they would make the Machine
// report the original's units as its own while its own reservation pods
// wait for them. The StatefulSet controller sets the controller reference
// when it creates a pod (k8s.io/kubernetes pkg/controller/statefulset
// newStatefulSetPod), so none of the Machine's pods is ever seen without
// it, and it only adopts orphans named after the StatefulSet (isMemberOf).
func ownReservation(pod *corev1.Pod, group, agentNamespace string, statefulSets map[types.UID]string) bool {
	if pod.Namespace != agentNamespace {
		return false
	}
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil || ref.Kind != "StatefulSet" {
		return false
	}
	name, ok := statefulSets[ref.UID]
	return ok && ref.Name == name && name == imperatorv1alpha1.ReservationName(pod.Labels[imperatorv1alpha1.MachineTypeKey], group)
}

// controlledReservationSets are the reservation StatefulSets of group in
// namespace that the Machine controls, or takes over from an earlier
// Machine of its name (getControlled), name by UID: those whose pods are
// its reservation pods. They are read from the cache without copies: only
// their names and owners are read.
func controlledReservationSets(ctx context.Context, c client.Client, namespace, group string, machine *imperatorv1alpha1.Machine) (map[types.UID]string, error) {
	statefulSets := &appsv1.StatefulSetList{}
	if err := c.List(ctx, statefulSets, client.InNamespace(namespace), client.MatchingLabels{
		imperatorv1alpha1.MachineGroupKey: group,
		imperatorv1alpha1.PodRoleKey:      string(imperatorv1alpha1.PodRoleReservation),
	}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing reservation StatefulSets of machine group %s: %w", group, err)
	}
	controlled := make(map[types.UID]string, len(statefulSets.Items))
	for i := range statefulSets.Items {
		sts := &statefulSets.Items[i]
		if metav1.IsControlledBy(sts, machine) || ownedByEarlier(sts, machine) {
			controlled[sts.UID] = sts.Name
		}
	}
	return controlled, nil
}
