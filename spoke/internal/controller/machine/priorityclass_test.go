package machine

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

func TestPriorityClassDifferences(t *testing.T) {
	classWith := func(mutate func(*schedulingv1.PriorityClass)) *schedulingv1.PriorityClass {
		pc := reservationPriorityClass(DefaultPriorityClassName)
		mutate(pc)
		return pc
	}
	cases := map[string]struct {
		existing  *schedulingv1.PriorityClass
		wantDiffs []string
	}{
		"the agent's own": {
			existing: reservationPriorityClass(DefaultPriorityClassName),
		},
		"another description and labels do not matter": {
			existing: classWith(func(pc *schedulingv1.PriorityClass) {
				pc.Description = "made by Helm"
				pc.Labels = map[string]string{"app.kubernetes.io/managed-by": "Helm"}
			}),
		},
		"a higher value": {
			existing:  classWith(func(pc *schedulingv1.PriorityClass) { pc.Value = 1000 }),
			wantDiffs: []string{"value is 1000, want 0"},
		},
		"a negative value": {
			existing:  classWith(func(pc *schedulingv1.PriorityClass) { pc.Value = -10 }),
			wantDiffs: []string{"value is -10, want 0"},
		},
		"preempting lower priority pods": {
			existing:  classWith(func(pc *schedulingv1.PriorityClass) { pc.PreemptionPolicy = ptr.To(corev1.PreemptLowerPriority) }),
			wantDiffs: []string{"preemptionPolicy is PreemptLowerPriority, want Never"},
		},
		"preemptionPolicy unset is what the API server defaults it to": {
			existing:  classWith(func(pc *schedulingv1.PriorityClass) { pc.PreemptionPolicy = nil }),
			wantDiffs: []string{"preemptionPolicy is PreemptLowerPriority, want Never"},
		},
		"the cluster's global default": {
			existing:  classWith(func(pc *schedulingv1.PriorityClass) { pc.GlobalDefault = true }),
			wantDiffs: []string{"globalDefault is true, want false"},
		},
		"everything wrong, as a system class would be": {
			existing: &schedulingv1.PriorityClass{
				ObjectMeta:    metav1.ObjectMeta{Name: DefaultPriorityClassName},
				Value:         2000000000,
				GlobalDefault: true,
			},
			wantDiffs: []string{
				"value is 2000000000, want 0",
				"preemptionPolicy is PreemptLowerPriority, want Never",
				"globalDefault is true, want false",
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := priorityClassDifferences(tc.existing, reservationPriorityClass(DefaultPriorityClassName))
			if diff := cmp.Diff(tc.wantDiffs, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("differences (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPriorityClassMismatchMessage(t *testing.T) {
	got := priorityClassMismatchMessage("imperator-reservation", []string{"value is 1000, want 0", "preemptionPolicy is PreemptLowerPriority, want Never"})
	want := "PriorityClass imperator-reservation is not the one the agent creates " +
		"(value is 1000, want 0; preemptionPolicy is PreemptLowerPriority, want Never): " +
		"reservation pods running at it could keep guests out or preempt other pods, so every reservation is scaled to 0 until it is fixed. " +
		"Its value and preemptionPolicy cannot be changed: delete PriorityClass imperator-reservation " +
		"(kubectl delete priorityclass imperator-reservation); the agent recreates it and restores the reservations"
	if got != want {
		t.Errorf("message\n got %q\nwant %q", got, want)
	}
}

func TestPriorityClassEvent(t *testing.T) {
	mismatch := func(message string) *metav1.Condition {
		return &metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: imperatorv1alpha1.ReasonReservationPriorityClassMismatch, Message: message}
	}
	ready := &metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: imperatorv1alpha1.ReasonReservationsReconciled,
		Message: "reservations in place for compute-xlarge"}
	failed := &metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: imperatorv1alpha1.ReasonReconcileFailed, Message: "boom"}
	cases := map[string]struct {
		was, now  *metav1.Condition
		wantEvent *transitionEvent
	}{
		"a new Machine finds a wrong class": {
			now:       mismatch("value is 1000"),
			wantEvent: &transitionEvent{corev1.EventTypeWarning, "ReservationPriorityClassMismatch", "value is 1000"},
		},
		"a ready Machine finds a wrong class": {
			was:       ready,
			now:       mismatch("value is 1000"),
			wantEvent: &transitionEvent{corev1.EventTypeWarning, "ReservationPriorityClassMismatch", "value is 1000"},
		},
		"the class is still as wrong as before: no event": {
			was: mismatch("value is 1000"),
			now: mismatch("value is 1000"),
		},
		"the class was replaced by another wrong one": {
			was:       mismatch("value is 1000"),
			now:       mismatch("globalDefault is true"),
			wantEvent: &transitionEvent{corev1.EventTypeWarning, "ReservationPriorityClassMismatch", "globalDefault is true"},
		},
		"the class is right again": {
			was: mismatch("value is 1000"),
			now: ready,
			wantEvent: &transitionEvent{corev1.EventTypeNormal, "ReservationsReconciled",
				"PriorityClass imperator-reservation is the agent's again: reservations in place for compute-xlarge"},
		},
		"the class is gone but the reconcile failed: nothing to announce yet": {
			was: mismatch("value is 1000"),
			now: failed,
		},
		"other Ready changes are not about the class": {
			was: failed,
			now: ready,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := priorityClassEvent(tc.was, tc.now, DefaultPriorityClassName)
			if tc.wantEvent == nil {
				if ok {
					t.Errorf("event %+v, want none", got)
				}
				return
			}
			if !ok {
				t.Fatalf("no event, want %+v", *tc.wantEvent)
			}
			if diff := cmp.Diff(*tc.wantEvent, got, cmp.AllowUnexported(transitionEvent{})); diff != "" {
				t.Errorf("event (-want +got):\n%s", diff)
			}
		})
	}
}

// A wrong PriorityClass holds every reservation at 0: no pod is reported
// unschedulable for it, the usage stays visible and Ready says why.
func TestSetStatusWithMismatchedPriorityClass(t *testing.T) {
	machine := wrappers.GeneralMachine().Available("compute-xlarge", 5).Obj()
	usage := map[string]*typeUsage{
		"compute-medium": {Usage: imperatorv1alpha1.Usage{Maximum: 4, Reserved: 3, Used: 1}, replicas: 3},
		"compute-xlarge": {Usage: imperatorv1alpha1.Usage{Maximum: 5, Reserved: 2}, replicas: 5, unschedulable: 3},
	}
	holdReservations(usage)
	for name, u := range usage {
		if u.replicas != 0 || u.unschedulable != 0 {
			t.Errorf("%s: replicas %d, unschedulable %d, want 0 and 0", name, u.replicas, u.unschedulable)
		}
	}
	state := &reconcileState{
		served:       []string{"compute-medium", "compute-xlarge"},
		usage:        usage,
		readyReason:  imperatorv1alpha1.ReasonReservationPriorityClassMismatch,
		readyMessage: "PriorityClass imperator-reservation is not the one the agent creates",
	}
	status := imperatorv1alpha1.MachineStatus{}
	setStatus(&status, machine, state, nil)
	want := []metav1.Condition{
		{Type: "Ready", Status: "False", Reason: "ReservationPriorityClassMismatch", Message: "PriorityClass imperator-reservation is not the one the agent creates"},
		{Type: "InsufficientCapacity", Status: "True", Reason: "NoNodePool", Message: "compute-large: no node of spec.nodePool serves it, 2 available cannot be reserved"},
		{Type: "OverSubscribed", Status: "False", Reason: "WithinAvailable", Message: "no machine type has more guests than available"},
	}
	if diff := cmp.Diff(want, status.Conditions, cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime", "ObservedGeneration")); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]imperatorv1alpha1.AvailableMachine{
		{Name: "compute-medium", Usage: imperatorv1alpha1.Usage{Maximum: 4, Reserved: 3, Used: 1}},
		{Name: "compute-xlarge", Usage: imperatorv1alpha1.Usage{Maximum: 5, Reserved: 2}},
		{Name: "compute-large", Usage: imperatorv1alpha1.Usage{Maximum: 2}},
	}, status.AvailableMachines); diff != "" {
		t.Errorf("availableMachines (-want +got):\n%s", diff)
	}
}

func TestIsReservationPriorityClass(t *testing.T) {
	p := isReservationPriorityClass("imperator-reservation")
	for name, want := range map[string]bool{"imperator-reservation": true, "system-node-critical": false, "imperator-reservation-old": false} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if got := p.Delete(event.DeleteEvent{Object: pc}); got != want {
			t.Errorf("%s: %t, want %t", name, got, want)
		}
	}
}
