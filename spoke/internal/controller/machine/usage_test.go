package machine

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

const (
	agentNS = "imperator-system"
	guestNS = "team-a"
	group   = "general-machine"
)

// reservationPod is reservation pod <ordinal> of machineType's StatefulSet,
// controlled by it, as the StatefulSet controller creates it.
func reservationPod(machineType, ordinal string) *wrappers.PodWrapper {
	name := imperatorv1alpha1.ReservationName(machineType, group)
	return controlledBy(labelledReservation(name+"-"+ordinal, machineType), name, ourSetUID(machineType))
}

// labelledReservation is a pod of the agent's namespace labelled as a
// reservation of machineType, without an owner.
func labelledReservation(name, machineType string) *wrappers.PodWrapper {
	return wrappers.MakePod(agentNS, name).
		Label(imperatorv1alpha1.MachineGroupKey, group).
		Label(imperatorv1alpha1.MachineTypeKey, machineType).
		Label(imperatorv1alpha1.PodRoleKey, string(imperatorv1alpha1.PodRoleReservation))
}

// controlledBy makes the StatefulSet statefulSet of uid the pod's controller.
func controlledBy(w *wrappers.PodWrapper, statefulSet string, uid types.UID) *wrappers.PodWrapper {
	w.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: statefulSet, UID: uid,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	return w
}

// ourSetUID is the UID of the Machine's reservation StatefulSet of
// machineType in ourSets.
func ourSetUID(machineType string) types.UID { return types.UID("sts-" + machineType) }

// ourSets are the reservation StatefulSets the Machine controls, as
// controlledReservationSets finds them.
var ourSets = func() map[types.UID]string {
	sets := map[types.UID]string{}
	for _, machineType := range []string{"compute-small", "compute-medium", "compute-large", "compute-xlarge"} {
		sets[ourSetUID(machineType)] = imperatorv1alpha1.ReservationName(machineType, group)
	}
	return sets
}()

// originalReservation is reservation pod <ordinal> of the original
// Imperator's StatefulSet of machineType (<machine-group>-<machine-type>,
// package migrate's OriginalReservationName): the same labels in the same
// namespace as the agent's, the Machine no longer its StatefulSet's
// controller (migrate detaches it).
func originalReservation(machineType, ordinal string) *wrappers.PodWrapper {
	name := group + "-" + machineType
	return controlledBy(labelledReservation(name+"-"+ordinal, machineType), name, types.UID("original-"+machineType))
}

func withUnschedulable(pod *corev1.Pod) *corev1.Pod {
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
	})
	return pod
}

func deleting(pod *corev1.Pod) *corev1.Pod {
	pod.DeletionTimestamp = &metav1.Time{}
	return pod
}

func withPhase(pod *corev1.Pod, phase corev1.PodPhase) *corev1.Pod {
	pod.Status.Phase = phase
	return pod
}

// anywhere is a node cache in which every type has one ready node, with no
// taint and no label a guest could select against.
func anywhere(string) []*corev1.Node { return []*corev1.Node{wrappers.MakeNode("kasumi").Obj()} }

func TestPodCounts(t *testing.T) {
	enabled := func(ns string) bool { return ns == guestNS }
	// The node cache: ghost is missing from it.
	nodes := map[string]string{
		"eriri":   string(imperatorv1alpha1.NodePoolReady),
		"michiru": string(imperatorv1alpha1.NodePoolReady),
		"utaha":   string(imperatorv1alpha1.NodePoolMaintenance),
		"sayaka":  string(imperatorv1alpha1.NodePoolNotReady),
		"bare":    "",
	}
	nodeState := func(name string) string {
		if state, ok := nodes[name]; ok {
			return state
		}
		return nodeStateMissing
	}
	type counts struct {
		Usage                   imperatorv1alpha1.Usage
		Replicas, Unschedulable int32
		OffPool                 int32
		OffPoolNodes            []string
	}
	cases := map[string]struct {
		pods      []*corev1.Pod
		available map[string]int32
		want      map[string]counts
	}{
		"bound reservations are reserved, bound guests used, unbound guests waiting": {
			pods: []*corev1.Pod{
				reservationPod("compute-medium", "0").NodeName("eriri").Obj(),
				reservationPod("compute-medium", "1").NodeName("eriri").Obj(),
				wrappers.MakePod(guestNS, "g1").InjectedGuest(group, "compute-medium").NodeName("eriri").Obj(),
				wrappers.MakePod(guestNS, "g2").InjectedGuest(group, "compute-medium").Obj(),
			},
			available: map[string]int32{"compute-medium": 4},
			want: map[string]counts{
				"compute-medium": {Usage: imperatorv1alpha1.Usage{Maximum: 4, Reserved: 2, Used: 1, Waiting: 1}, Replicas: 2},
			},
		},
		"terminating and finished pods do not count": {
			pods: []*corev1.Pod{
				deleting(reservationPod("compute-medium", "0").NodeName("eriri").Obj()),
				withPhase(wrappers.MakePod(guestNS, "done").InjectedGuest(group, "compute-medium").NodeName("eriri").Obj(), corev1.PodSucceeded),
				withPhase(wrappers.MakePod(guestNS, "failed").InjectedGuest(group, "compute-medium").NodeName("eriri").Obj(), corev1.PodFailed),
				deleting(wrappers.MakePod(guestNS, "leaving").InjectedGuest(group, "compute-medium").Obj()),
			},
			available: map[string]int32{"compute-medium": 4},
			want:      map[string]counts{"compute-medium": {Usage: imperatorv1alpha1.Usage{Maximum: 4}, Replicas: 4}},
		},
		"a guest of a namespace opted out since it was admitted still holds its unit (bound, or let through and not bound yet)": {
			pods: []*corev1.Pod{
				wrappers.MakePod("team-off", "bound").InjectedGuest(group, "compute-medium").NodeName("eriri").Obj(),
				wrappers.MakePod("team-off", "granted").InjectedGuest(group, "compute-medium").Obj(),
			},
			available: map[string]int32{"compute-medium": 4},
			want:      map[string]counts{"compute-medium": {Usage: imperatorv1alpha1.Usage{Maximum: 4, Used: 1, Waiting: 1}, Replicas: 2}},
		},
		"guests of other groups, unknown types and reservations elsewhere are ignored": {
			pods: []*corev1.Pod{
				wrappers.MakePod(guestNS, "other").InjectedGuest("other-group", "compute-medium").NodeName("eriri").Obj(),
				wrappers.MakePod(guestNS, "unknown").InjectedGuest(group, "compute-huge").NodeName("eriri").Obj(),
				func() *corev1.Pod {
					p := reservationPod("compute-medium", "0").NodeName("eriri").Obj()
					p.Namespace = guestNS
					return p
				}(),
			},
			available: map[string]int32{"compute-medium": 4},
			want:      map[string]counts{"compute-medium": {Usage: imperatorv1alpha1.Usage{Maximum: 4}, Replicas: 4}},
		},
		"more guests than available: no reservations, never negative": {
			pods: []*corev1.Pod{
				wrappers.MakePod(guestNS, "g1").InjectedGuest(group, "compute-xlarge").NodeName("michiru").Obj(),
				wrappers.MakePod(guestNS, "g2").InjectedGuest(group, "compute-xlarge").Obj(),
				wrappers.MakePod(guestNS, "g3").InjectedGuest(group, "compute-xlarge").Obj(),
			},
			available: map[string]int32{"compute-xlarge": 1},
			want: map[string]counts{
				"compute-xlarge": {Usage: imperatorv1alpha1.Usage{Maximum: 1, Used: 1, Waiting: 2}},
			},
		},
		"unschedulable reservations count below the replicas only and never change them": {
			pods: []*corev1.Pod{
				reservationPod("compute-xlarge", "0").NodeName("michiru").Obj(),
				reservationPod("compute-xlarge", "1").NodeName("michiru").Obj(),
				withUnschedulable(reservationPod("compute-xlarge", "2").Obj()),
				withUnschedulable(reservationPod("compute-xlarge", "3").Label("apps.kubernetes.io/pod-index", "3").Obj()),
				// Being scaled away: ordinal 4 is not below the 4 replicas.
				withUnschedulable(reservationPod("compute-xlarge", "4").Obj()),
				// Not tried by the scheduler yet.
				reservationPod("compute-xlarge", "5").Obj(),
			},
			available: map[string]int32{"compute-xlarge": 4},
			want: map[string]counts{
				"compute-xlarge": {Usage: imperatorv1alpha1.Usage{Maximum: 4, Reserved: 2}, Replicas: 4, Unschedulable: 2},
			},
		},
		"reservations are reserved on ready nodes only; not-ready, maintenance, unlabelled and missing nodes hold none": {
			pods: []*corev1.Pod{
				reservationPod("compute-medium", "0").NodeName("eriri").Obj(),
				reservationPod("compute-medium", "1").NodeName("sayaka").Obj(),
				reservationPod("compute-medium", "2").NodeName("sayaka").Obj(),
				reservationPod("compute-medium", "3").NodeName("utaha").Obj(),
				reservationPod("compute-medium", "4").NodeName("ghost").Obj(),
				reservationPod("compute-medium", "5").NodeName("bare").Obj(),
				// Guests are used wherever they run, and terminating
				// reservations hold their node whatever its state.
				wrappers.MakePod(guestNS, "g1").InjectedGuest(group, "compute-medium").NodeName("sayaka").Obj(),
				deleting(reservationPod("compute-medium", "6").NodeName("sayaka").Obj()),
			},
			available: map[string]int32{"compute-medium": 8},
			want: map[string]counts{
				"compute-medium": {
					Usage:    imperatorv1alpha1.Usage{Maximum: 8, Reserved: 1, Used: 1},
					Replicas: 7, OffPool: 5,
					OffPoolNodes: []string{"bare (no imperator.tenzen-y.io/node-pool label)", "ghost (missing)", "sayaka (not-ready)", "utaha (maintenance)"},
				},
			},
		},
		"the original Imperator's reservation pods, labelled alike beside the agent's, count nowhere: not reserved, off the pool, unschedulable, nor guests": {
			pods: []*corev1.Pod{
				reservationPod("compute-medium", "0").NodeName("eriri").Obj(),
				reservationPod("compute-medium", "1").NodeName("eriri").Obj(),
				withUnschedulable(reservationPod("compute-medium", "2").Obj()),
				originalReservation("compute-medium", "0").NodeName("eriri").Obj(),
				originalReservation("compute-medium", "1").NodeName("sayaka").Obj(),
				withUnschedulable(originalReservation("compute-medium", "2").Obj()),
				deleting(originalReservation("compute-medium", "3").NodeName("eriri").Obj()),
			},
			available: map[string]int32{"compute-medium": 3},
			want: map[string]counts{
				"compute-medium": {Usage: imperatorv1alpha1.Usage{Maximum: 3, Reserved: 2}, Replicas: 3, Unschedulable: 1},
			},
		},
		"the replicas do not depend on where reservations are bound": {
			pods: []*corev1.Pod{
				reservationPod("compute-medium", "0").NodeName("sayaka").Obj(),
				reservationPod("compute-medium", "1").NodeName("sayaka").Obj(),
				reservationPod("compute-medium", "2").NodeName("sayaka").Obj(),
				reservationPod("compute-medium", "3").NodeName("sayaka").Obj(),
			},
			available: map[string]int32{"compute-medium": 4},
			want: map[string]counts{
				"compute-medium": {Usage: imperatorv1alpha1.Usage{Maximum: 4}, Replicas: 4, OffPool: 4, OffPoolNodes: []string{"sayaka (not-ready)"}},
			},
		},
		"a leaving guest still holds its slot: the reservation taking it back waits without lacking capacity": {
			pods: []*corev1.Pod{
				reservationPod("compute-xlarge", "0").NodeName("michiru").Obj(),
				withUnschedulable(reservationPod("compute-xlarge", "1").Obj()),
				withUnschedulable(reservationPod("compute-xlarge", "2").Obj()),
				deleting(wrappers.MakePod(guestNS, "leaving").InjectedGuest(group, "compute-xlarge").NodeName("michiru").Obj()),
			},
			available: map[string]int32{"compute-xlarge": 3},
			want: map[string]counts{
				"compute-xlarge": {Usage: imperatorv1alpha1.Usage{Maximum: 3, Reserved: 1}, Replicas: 3, Unschedulable: 1},
			},
		},
		"a guest deleted before it was bound or after it finished holds no slot: the reservation lacks capacity": {
			pods: []*corev1.Pod{
				reservationPod("compute-xlarge", "0").NodeName("michiru").Obj(),
				withUnschedulable(reservationPod("compute-xlarge", "1").Obj()),
				deleting(wrappers.MakePod(guestNS, "cancelled").InjectedGuest(group, "compute-xlarge").Obj()),
				deleting(withPhase(wrappers.MakePod(guestNS, "done").InjectedGuest(group, "compute-xlarge").NodeName("michiru").Obj(), corev1.PodSucceeded)),
			},
			available: map[string]int32{"compute-xlarge": 2},
			want: map[string]counts{
				"compute-xlarge": {Usage: imperatorv1alpha1.Usage{Maximum: 2, Reserved: 1}, Replicas: 2, Unschedulable: 1},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pods := make([]corev1.Pod, 0, len(tc.pods))
			for _, p := range tc.pods {
				pods = append(pods, *p)
			}
			got := map[string]counts{}
			for typeName, u := range podCounts(pods, group, agentNS, lookups{enabled: enabled, nodeState: nodeState, readyNodes: anywhere, reservationSets: ourSets}, tc.available, time.Time{}) {
				got[typeName] = counts{Usage: u.Usage, Replicas: u.replicas, Unschedulable: u.unschedulable,
					OffPool: u.offPool, OffPoolNodes: u.offPoolNodes}
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("podCounts() (-want +got):\n%s", diff)
			}
		})
	}
}

// Only pods the Machine's own reservation StatefulSets control are its
// reservation pods: not the original Imperator's, not another Machine's,
// not a pod that merely carries the labels.
func TestOwnReservation(t *testing.T) {
	cases := map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"a pod of the Machine's StatefulSet": {
			pod: reservationPod("compute-medium", "0").Obj(), want: true,
		},
		"a pod of the original Imperator's StatefulSet <machine-group>-<machine-type>": {
			pod: originalReservation("compute-medium", "0").Obj(),
		},
		"a pod of a StatefulSet with the Machine's name that the Machine does not control (another Machine's, or the original's under a colliding name)": {
			pod: controlledBy(labelledReservation("compute-medium-general-machine-0", "compute-medium"), "compute-medium-general-machine", "someone-else").Obj(),
		},
		"a pod labelled as a reservation with no controller": {
			pod: labelledReservation("compute-medium-general-machine-0", "compute-medium").Obj(),
		},
		"a pod controlled by something else than a StatefulSet, with the UID of the Machine's": {
			pod: func() *corev1.Pod {
				p := reservationPod("compute-medium", "0").Obj()
				p.OwnerReferences[0].Kind = "ReplicaSet"
				return p
			}(),
		},
		"a pod only owned, not controlled, by the Machine's StatefulSet": {
			pod: func() *corev1.Pod {
				p := reservationPod("compute-medium", "0").Obj()
				p.OwnerReferences[0].Controller = nil
				return p
			}(),
		},
		"a pod of the Machine's StatefulSet of another type, labelled with this one": {
			pod: controlledBy(labelledReservation("compute-xlarge-general-machine-0", "compute-medium"),
				"compute-xlarge-general-machine", ourSetUID("compute-xlarge")).Obj(),
		},
		"a pod of the Machine's StatefulSet outside the agent's namespace": {
			pod: func() *corev1.Pod {
				p := reservationPod("compute-medium", "0").Obj()
				p.Namespace = guestNS
				return p
			}(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ownReservation(tc.pod, group, agentNS, ourSets); got != tc.want {
				t.Errorf("ownReservation() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestInjectionEnabled(t *testing.T) {
	cases := map[string]struct {
		labels map[string]string
		want   bool
	}{
		"canonical":     {labels: map[string]string{imperatorv1alpha1.InjectResourceKey: "enabled"}, want: true},
		"seed spelling": {labels: map[string]string{imperatorv1alpha1.LegacyInjectResourceKey: "enabled"}, want: true},
		"disabled":      {labels: map[string]string{imperatorv1alpha1.InjectResourceKey: "disabled"}},
		"no labels":     {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := injectionEnabled(tc.labels); got != tc.want {
				t.Errorf("injectionEnabled(%v) = %v, want %v", tc.labels, got, tc.want)
			}
		})
	}
}

func TestPodCountsGuestQueue(t *testing.T) {
	enabled := func(ns string) bool { return ns == guestNS }
	nodeState := func(string) string { return string(imperatorv1alpha1.NodePoolReady) }
	gate := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: imperatorv1alpha1.SlotSchedulingGate})
		return p
	}
	type counts struct {
		Usage                                      imperatorv1alpha1.Usage
		Replicas, Held, Granted, Leaving, Reserved int32
		ReservationPods                            int32
		Gated, Stranded                            []string
	}
	cases := map[string]struct {
		pods []*corev1.Pod
		want counts
	}{
		"gated guests are waiting and queued; ungated unbound ones waiting and granted; both keep the reservation down": {
			pods: []*corev1.Pod{
				wrappers.MakePod(guestNS, "running").InjectedGuest(group, "compute-small").NodeName("kasumi").Obj(),
				wrappers.MakePod(guestNS, "granted").InjectedGuest(group, "compute-small").Obj(),
				gate(wrappers.MakePod(guestNS, "first").InjectedGuest(group, "compute-small").Obj()),
				gate(wrappers.MakePod(guestNS, "second").InjectedGuest(group, "compute-small").Obj()),
				// Another gate only: the agent does not hold it, it counts as granted.
				func() *corev1.Pod {
					p := wrappers.MakePod(guestNS, "foreign-gate").InjectedGuest(group, "compute-small").Obj()
					p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/quota"}}
					return p
				}(),
				// At the gate in a namespace not opted in: stranded, neither
				// counted nor queued.
				gate(wrappers.MakePod("team-off", "stranded").InjectedGuest(group, "compute-small").Obj()),
			},
			want: counts{
				Usage:    imperatorv1alpha1.Usage{Maximum: 6, Used: 1, Waiting: 4, Queued: 2},
				Replicas: 1, Held: 3, Granted: 2, Gated: []string{"first", "second"}, Stranded: []string{"stranded"},
			},
		},
		"a leaving guest holds its unit until it is gone; every reservation pod that still exists is counted": {
			pods: []*corev1.Pod{
				deleting(wrappers.MakePod(guestNS, "leaving").InjectedGuest(group, "compute-small").NodeName("kasumi").Obj()),
				reservationPod("compute-small", "0").NodeName("kasumi").Obj(),
				deleting(reservationPod("compute-small", "1").NodeName("kasumi").Obj()),
				reservationPod("compute-small", "2").Obj(),
				withPhase(reservationPod("compute-small", "3").NodeName("kasumi").Obj(), corev1.PodSucceeded),
				gate(wrappers.MakePod(guestNS, "next").InjectedGuest(group, "compute-small").Obj()),
			},
			want: counts{
				Usage:    imperatorv1alpha1.Usage{Maximum: 6, Reserved: 1, Waiting: 1, Queued: 1},
				Replicas: 5, Held: 1, Leaving: 1, Reserved: 1, ReservationPods: 3, Gated: []string{"next"},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pods := make([]corev1.Pod, 0, len(tc.pods))
			for _, p := range tc.pods {
				pods = append(pods, *p)
			}
			u := podCounts(pods, group, agentNS, lookups{enabled: enabled, nodeState: nodeState, readyNodes: anywhere, reservationSets: ourSets}, map[string]int32{"compute-small": 6}, time.Time{})["compute-small"]
			got := counts{Usage: u.Usage, Replicas: u.replicas, Held: u.held(), Granted: u.granted, Leaving: u.leaving,
				Reserved: u.Reserved, ReservationPods: u.reservationPods}
			for _, p := range u.gated {
				got.Gated = append(got.Gated, p.Name)
			}
			for _, p := range u.stranded {
				got.Stranded = append(got.Stranded, p.Name)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("podCounts() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPodCountsStuckReservation(t *testing.T) {
	enabled := func(ns string) bool { return ns == guestNS }
	nodeState := func(string) string { return string(imperatorv1alpha1.NodePoolReady) }
	now := time.Unix(1_800_000_000, 0)
	deletedAt := func(pod *corev1.Pod, ago time.Duration) *corev1.Pod {
		pod.DeletionTimestamp = &metav1.Time{Time: now.Add(-ago)}
		pod.UID = types.UID(pod.Name)
		return pod
	}
	gatedNext := wrappers.MakePod(guestNS, "next").InjectedGuest(group, "compute-small").Obj()
	gatedNext.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: imperatorv1alpha1.SlotSchedulingGate}}
	type counts struct {
		Replicas, ReservationPods int32
		Releasing                 bool
		Stuck                     []string
		NextStuck                 time.Time
	}
	cases := map[string]struct {
		pods []*corev1.Pod
		want counts
	}{
		"a reservation pod scaled away for a guest, deleted a moment ago: the queue waits for it": {
			pods: []*corev1.Pod{
				deletedAt(reservationPod("compute-small", "0").NodeName("kasumi").Obj(), 2*time.Second),
				gatedNext,
			},
			want: counts{ReservationPods: 1, Releasing: true, NextStuck: now.Add(-2 * time.Second)},
		},
		"the same pod still terminating past the threshold (a finalizer, a lost kubelet): it is stuck, the queue does not wait": {
			pods: []*corev1.Pod{
				deletedAt(reservationPod("compute-small", "0").NodeName("kasumi").Obj(), stuckReservationAfter+time.Second),
				gatedNext,
			},
			want: counts{ReservationPods: 1, Stuck: []string{"imperator-system/compute-small-general-machine-0"}},
		},
		"the original Imperator's reservation pod stuck terminating is not the Machine's: neither stuck nor waited for": {
			pods: []*corev1.Pod{
				deletedAt(originalReservation("compute-small", "0").NodeName("kasumi").Obj(), time.Hour),
				deletedAt(originalReservation("compute-small", "1").NodeName("kasumi").Obj(), time.Second),
				gatedNext,
			},
			want: counts{},
		},
		"a stuck pod and one just deleted: the queue waits for the second": {
			pods: []*corev1.Pod{
				deletedAt(reservationPod("compute-small", "0").NodeName("kasumi").Obj(), time.Hour),
				deletedAt(reservationPod("compute-small", "1").NodeName("kasumi").Obj(), time.Second),
				gatedNext,
			},
			want: counts{ReservationPods: 2, Releasing: true, Stuck: []string{"imperator-system/compute-small-general-machine-0"}, NextStuck: now.Add(-time.Second)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pods := make([]corev1.Pod, 0, len(tc.pods))
			for _, p := range tc.pods {
				pods = append(pods, *p)
			}
			u := podCounts(pods, group, agentNS, lookups{enabled: enabled, nodeState: nodeState, readyNodes: anywhere, reservationSets: ourSets}, map[string]int32{"compute-small": 1}, now.Add(-stuckReservationAfter))["compute-small"]
			got := counts{Replicas: u.replicas, ReservationPods: u.reservationPods, Releasing: u.releasing(), Stuck: u.stuck, NextStuck: u.nextStuck}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("podCounts() (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("the controller looks again once the pending pod would be stuck", func(t *testing.T) {
		u := &typeUsage{nextStuck: now.Add(-2 * time.Second)}
		if got, want := untilNextStuck(map[string]*typeUsage{"compute-small": u}, now), stuckReservationAfter-time.Second; got != want {
			t.Errorf("untilNextStuck = %s, want %s", got, want)
		}
		if got := untilNextStuck(map[string]*typeUsage{"compute-small": {}}, now); got != 0 {
			t.Errorf("untilNextStuck with nothing terminating = %s, want 0", got)
		}
	})
}

// Only pods the injector admitted are guests, and only waiting guests a
// ready node can take hold a unit: pods anyone may create cannot empty a
// type's reservation.
func TestPodCountsOnlyAdmittedGuestsANodeCanTakeHoldUnits(t *testing.T) {
	enabled := func(ns string) bool { return ns == guestNS }
	nodeState := func(string) string { return string(imperatorv1alpha1.NodePoolReady) }
	// One ready node, in zone a: a guest whose nodeSelector names zone
	// "nowhere" fits on none.
	zoneA := wrappers.MakeNode("kasumi").Label("zone", "a").Obj()
	readyNodes := func(string) []*corev1.Node { return []*corev1.Node{zoneA} }
	gate := func(w *wrappers.PodWrapper) *wrappers.PodWrapper {
		w.Spec.SchedulingGates = append(w.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: imperatorv1alpha1.SlotSchedulingGate})
		return w
	}
	nowhere := func(w *wrappers.PodWrapper) *wrappers.PodWrapper {
		w.Spec.NodeSelector = map[string]string{"zone": "nowhere"}
		return w
	}
	record := func(w *wrappers.PodWrapper, value string) *wrappers.PodWrapper {
		w.Annotations = map[string]string{imperatorv1alpha1.InjectedAnnotation: value}
		return w
	}
	reserved := func(n int) []*corev1.Pod {
		var out []*corev1.Pod
		for i := range n {
			out = append(out, reservationPod("compute-small", strconv.Itoa(i)).NodeName("kasumi").Obj())
		}
		return out
	}
	type counts struct {
		Usage                  imperatorv1alpha1.Usage
		Replicas, Held, Strays int32
		StrayNamespaces        []string
		Gated, Unplaceable     []string
	}
	cases := map[string]struct {
		pods []*corev1.Pod
		want counts
	}{
		"four Pending pods with the guest labels in a namespace that never opted in: the reservation stays, they are strays": {
			pods: append(reserved(4),
				nowhere(wrappers.MakePod("squat", "s1").Guest(group, "compute-small")).Obj(),
				nowhere(wrappers.MakePod("squat", "s2").Guest(group, "compute-small")).Obj(),
				nowhere(wrappers.MakePod("squat", "s3").Guest(group, "compute-small")).Obj(),
				nowhere(wrappers.MakePod("squat", "s4").Guest(group, "compute-small")).Obj(),
			),
			want: counts{Usage: imperatorv1alpha1.Usage{Maximum: 4, Reserved: 4}, Replicas: 4, Strays: 4, StrayNamespaces: []string{"squat"}},
		},
		"labelled pods without the injector's record count as nothing wherever they are: bound, at the gate of an opted-in namespace, let through": {
			pods: append(reserved(2),
				wrappers.MakePod(guestNS, "bound").Guest(group, "compute-small").NodeName("kasumi").Obj(),
				gate(wrappers.MakePod(guestNS, "gated").Guest(group, "compute-small")).Obj(),
				wrappers.MakePod("team-b", "ungated").Guest(group, "compute-small").Obj(),
			),
			want: counts{Usage: imperatorv1alpha1.Usage{Maximum: 4, Reserved: 2}, Replicas: 4, Strays: 3, StrayNamespaces: []string{"team-a", "team-b"}},
		},
		"terminating and finished labelled pods without the record are neither leaving nor reported": {
			pods: []*corev1.Pod{
				deleting(wrappers.MakePod(guestNS, "leaving").Guest(group, "compute-small").NodeName("kasumi").Obj()),
				withPhase(wrappers.MakePod(guestNS, "done").Guest(group, "compute-small").NodeName("kasumi").Obj(), corev1.PodSucceeded),
			},
			want: counts{Usage: imperatorv1alpha1.Usage{Maximum: 4}, Replicas: 4},
		},
		"a record for another type or group, an unreadable one or one too long to be the injector's: strays": {
			pods: []*corev1.Pod{
				// Admitted as compute-medium, relabelled compute-small since.
				record(wrappers.MakePod(guestNS, "relabelled").Guest(group, "compute-small"),
					`{"machine":"general-machine","machineGroup":"general-machine","machineType":"compute-medium","container":"main"}`).NodeName("kasumi").Obj(),
				record(wrappers.MakePod(guestNS, "other-group").Guest(group, "compute-small"),
					`{"machineGroup":"other","machineType":"compute-small"}`).NodeName("kasumi").Obj(),
				record(wrappers.MakePod(guestNS, "garbled").Guest(group, "compute-small"), `{"machineGroup":`).NodeName("kasumi").Obj(),
				record(wrappers.MakePod(guestNS, "empty").Guest(group, "compute-small"), `{}`).NodeName("kasumi").Obj(),
				record(wrappers.MakePod(guestNS, "huge").Guest(group, "compute-small"),
					`{"machineGroup":"general-machine","machineType":"compute-small","container":"`+strings.Repeat("x", maxRecordBytes)+`"}`).NodeName("kasumi").Obj(),
				wrappers.MakePod(guestNS, "admitted").InjectedGuest(group, "compute-small").NodeName("kasumi").Obj(),
			},
			want: counts{Usage: imperatorv1alpha1.Usage{Maximum: 4, Used: 1}, Replicas: 3, Held: 1, Strays: 5, StrayNamespaces: []string{"team-a"}},
		},
		"guests at the gate that no ready node can take wait in line, unplaceable, and keep no unit from the reservation": {
			pods: append(reserved(4),
				gate(nowhere(wrappers.MakePod(guestNS, "n1").InjectedGuest(group, "compute-small"))).Obj(),
				gate(nowhere(wrappers.MakePod(guestNS, "n2").InjectedGuest(group, "compute-small"))).Obj(),
				gate(nowhere(wrappers.MakePod(guestNS, "n3").InjectedGuest(group, "compute-small"))).Obj(),
				gate(nowhere(wrappers.MakePod(guestNS, "n4").InjectedGuest(group, "compute-small"))).Obj(),
			),
			want: counts{
				Usage:    imperatorv1alpha1.Usage{Maximum: 4, Reserved: 4, Waiting: 4, Queued: 4, Unplaceable: 4},
				Replicas: 4, Unplaceable: []string{"n1", "n2", "n3", "n4"},
			},
		},
		"a guest a node can take lowers the replicas, one no node can take beside it does not": {
			pods: append(reserved(4),
				gate(nowhere(wrappers.MakePod(guestNS, "nowhere").InjectedGuest(group, "compute-small"))).Obj(),
				gate(wrappers.MakePod(guestNS, "fits").InjectedGuest(group, "compute-small")).Obj(),
			),
			want: counts{
				Usage:    imperatorv1alpha1.Usage{Maximum: 4, Reserved: 4, Waiting: 2, Queued: 2, Unplaceable: 1},
				Replicas: 3, Gated: []string{"fits"}, Unplaceable: []string{"nowhere"},
			},
		},
		"a guest let through holds its unit whether or not a node can take it now": {
			pods: append(reserved(4),
				nowhere(wrappers.MakePod(guestNS, "granted").InjectedGuest(group, "compute-small")).Obj(),
			),
			want: counts{Usage: imperatorv1alpha1.Usage{Maximum: 4, Reserved: 4, Waiting: 1}, Replicas: 3, Held: 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pods := make([]corev1.Pod, 0, len(tc.pods))
			for _, p := range tc.pods {
				pods = append(pods, *p)
			}
			u := podCounts(pods, group, agentNS, lookups{enabled: enabled, nodeState: nodeState, readyNodes: readyNodes, reservationSets: ourSets},
				map[string]int32{"compute-small": 4}, time.Time{})["compute-small"]
			got := counts{Usage: u.Usage, Replicas: u.replicas, Held: u.held(), Strays: u.strays}
			for ns := range u.strayNamespaces {
				got.StrayNamespaces = append(got.StrayNamespaces, ns)
			}
			slices.Sort(got.StrayNamespaces)
			for _, p := range u.gated {
				got.Gated = append(got.Gated, p.Name)
			}
			for _, p := range u.unplaceable {
				got.Unplaceable = append(got.Unplaceable, p.Name)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("podCounts() (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("no ready node at all (not ready, maintenance, cordoned): the guests keep their claim for when one comes back, and none is let through", func(t *testing.T) {
		pods := []corev1.Pod{
			*gate(nowhere(wrappers.MakePod(guestNS, "picky").InjectedGuest(group, "compute-small"))).Obj(),
			*gate(wrappers.MakePod(guestNS, "plain").InjectedGuest(group, "compute-small")).Obj(),
		}
		u := podCounts(pods, group, agentNS, lookups{enabled: enabled, nodeState: nodeState, readyNodes: func(string) []*corev1.Node { return nil }, reservationSets: ourSets},
			map[string]int32{"compute-small": 4}, time.Time{})["compute-small"]
		if diff := cmp.Diff(imperatorv1alpha1.Usage{Maximum: 4, Waiting: 2, Queued: 2}, u.Usage); diff != "" {
			t.Errorf("usage (-want +got):\n%s", diff)
		}
		if u.replicas != 2 || !u.noReadyNode || len(u.gated) != 2 {
			t.Errorf("replicas %d, noReadyNode %v, %d gated; want 2, true, 2", u.replicas, u.noReadyNode, len(u.gated))
		}
	})
}
