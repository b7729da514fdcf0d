package machine

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

func TestSetStatus(t *testing.T) {
	machine := wrappers.GeneralMachine().Available("compute-xlarge", 5).Obj()
	machine.Generation = 7
	counted := func(u imperatorv1alpha1.Usage, replicas, unschedulable int32) *typeUsage {
		return &typeUsage{Usage: u, replicas: replicas, unschedulable: unschedulable}
	}
	served := []string{"compute-medium", "compute-xlarge"}
	noStrays := metav1.Condition{Type: "StrayGuests", Status: "False", Reason: "NoStrayGuests",
		Message: "every pod labelled as a guest of the group was admitted by the pod injector"}
	strays := func(n int32, namespaces ...string) *typeUsage {
		u := &typeUsage{Usage: imperatorv1alpha1.Usage{Maximum: 4}, replicas: 4, strays: n, strayNamespaces: map[string]struct{}{}}
		for _, ns := range namespaces {
			u.strayNamespaces[ns] = struct{}{}
		}
		return u
	}
	cases := map[string]struct {
		state reconcileState
		err   error
		// conditions are the conditions before; none when nil.
		conditions     []metav1.Condition
		wantUsage      []imperatorv1alpha1.AvailableMachine
		wantConditions []metav1.Condition
	}{
		"reservations in place, compute-large has no node": {
			state: reconcileState{served: served, usage: map[string]*typeUsage{
				"compute-medium": counted(imperatorv1alpha1.Usage{Maximum: 4, Reserved: 3, Used: 1}, 3, 0),
				"compute-xlarge": counted(imperatorv1alpha1.Usage{Maximum: 5, Reserved: 5}, 5, 0),
			}},
			wantUsage: []imperatorv1alpha1.AvailableMachine{
				{Name: "compute-medium", Usage: imperatorv1alpha1.Usage{Maximum: 4, Reserved: 3, Used: 1}},
				{Name: "compute-xlarge", Usage: imperatorv1alpha1.Usage{Maximum: 5, Reserved: 5}},
				{Name: "compute-large", Usage: imperatorv1alpha1.Usage{Maximum: 2}},
			},
			wantConditions: []metav1.Condition{
				{Type: "Ready", Status: "True", Reason: "ReservationsReconciled", Message: "reservations in place for compute-medium, compute-xlarge"},
				{Type: "InsufficientCapacity", Status: "True", Reason: "NoNodePool", Message: "compute-large: no node of spec.nodePool serves it, 2 available cannot be reserved"},
				{Type: "OverSubscribed", Status: "False", Reason: "WithinAvailable", Message: "no machine type has guests holding more units than available"},
				noStrays,
			},
		},
		"unschedulable reservations and guests waiting at the gate beyond available: a queue, not an oversubscription": {
			state: reconcileState{served: served, usage: map[string]*typeUsage{
				"compute-medium": counted(imperatorv1alpha1.Usage{Maximum: 4, Used: 4, Waiting: 2}, 0, 0),
				"compute-xlarge": counted(imperatorv1alpha1.Usage{Maximum: 5, Reserved: 2}, 5, 3),
			}},
			wantUsage: []imperatorv1alpha1.AvailableMachine{
				{Name: "compute-medium", Usage: imperatorv1alpha1.Usage{Maximum: 4, Used: 4, Waiting: 2}},
				{Name: "compute-xlarge", Usage: imperatorv1alpha1.Usage{Maximum: 5, Reserved: 2}},
				{Name: "compute-large", Usage: imperatorv1alpha1.Usage{Maximum: 2}},
			},
			wantConditions: []metav1.Condition{
				{Type: "Ready", Status: "True", Reason: "ReservationsReconciled", Message: "reservations in place for compute-medium, compute-xlarge"},
				{Type: "InsufficientCapacity", Status: "True", Reason: "ReservationsUnschedulable",
					Message: "compute-xlarge: 3 of 5 reservation pods cannot be scheduled; compute-large: no node of spec.nodePool serves it, 2 available cannot be reserved"},
				{Type: "OverSubscribed", Status: "False", Reason: "WithinAvailable", Message: "no machine type has guests holding more units than available"},
				noStrays,
			},
		},
		"available lowered below the guests in place: OverSubscribed counts bound, being placed and leaving guests, not the queued ones": {
			state: reconcileState{served: served, usage: map[string]*typeUsage{
				"compute-medium": {Usage: imperatorv1alpha1.Usage{Maximum: 4, Used: 3, Waiting: 3, Queued: 2}, granted: 1, leaving: 1},
				"compute-xlarge": {Usage: imperatorv1alpha1.Usage{Maximum: 5, Used: 5, Waiting: 4, Queued: 4}},
			}},
			wantUsage: []imperatorv1alpha1.AvailableMachine{
				{Name: "compute-medium", Usage: imperatorv1alpha1.Usage{Maximum: 4, Used: 3, Waiting: 3, Queued: 2}},
				{Name: "compute-xlarge", Usage: imperatorv1alpha1.Usage{Maximum: 5, Used: 5, Waiting: 4, Queued: 4}},
				{Name: "compute-large", Usage: imperatorv1alpha1.Usage{Maximum: 2}},
			},
			wantConditions: []metav1.Condition{
				{Type: "Ready", Status: "True", Reason: "ReservationsReconciled", Message: "reservations in place for compute-medium, compute-xlarge"},
				{Type: "InsufficientCapacity", Status: "True", Reason: "NoNodePool", Message: "compute-large: no node of spec.nodePool serves it, 2 available cannot be reserved"},
				{Type: "OverSubscribed", Status: "True", Reason: "GuestsExceedAvailable",
					Message: "compute-medium: guests hold 5 units of 4 available (3 bound, 1 being placed, 1 leaving), 2 queued"},
				noStrays,
			},
		},
		"reservations on nodes that are not ready": {
			state: reconcileState{served: served, usage: map[string]*typeUsage{
				"compute-medium": {Usage: imperatorv1alpha1.Usage{Maximum: 4}, replicas: 4, offPool: 4, offPoolNodes: []string{"eriri (not-ready)"}},
				"compute-xlarge": counted(imperatorv1alpha1.Usage{Maximum: 5, Reserved: 5}, 5, 0),
			}},
			wantUsage: []imperatorv1alpha1.AvailableMachine{
				{Name: "compute-medium", Usage: imperatorv1alpha1.Usage{Maximum: 4}},
				{Name: "compute-xlarge", Usage: imperatorv1alpha1.Usage{Maximum: 5, Reserved: 5}},
				{Name: "compute-large", Usage: imperatorv1alpha1.Usage{Maximum: 2}},
			},
			wantConditions: []metav1.Condition{
				{Type: "Ready", Status: "True", Reason: "ReservationsReconciled", Message: "reservations in place for compute-medium, compute-xlarge"},
				{Type: "InsufficientCapacity", Status: "True", Reason: "ReservationsOnUnreadyNodes",
					Message: "compute-medium: 4 reservation pods on nodes that are not ready, not reserved: eriri (not-ready); compute-large: no node of spec.nodePool serves it, 2 available cannot be reserved"},
				{Type: "OverSubscribed", Status: "False", Reason: "WithinAvailable", Message: "no machine type has guests holding more units than available"},
				noStrays,
			},
		},
		"pods labelled as guests that the injector did not admit: StrayGuests names per type how many and a few namespaces, the usage leaves them out": {
			state: reconcileState{served: served, usage: map[string]*typeUsage{
				"compute-medium": strays(1000, "squat-e", "squat-b", "squat-d", "squat-a", "squat-c"),
				"compute-xlarge": func() *typeUsage { u := strays(4, "squat"); u.Maximum, u.Reserved = 5, 5; return u }(),
			}},
			conditions: []metav1.Condition{noStrays},
			wantUsage: []imperatorv1alpha1.AvailableMachine{
				{Name: "compute-medium", Usage: imperatorv1alpha1.Usage{Maximum: 4}},
				{Name: "compute-xlarge", Usage: imperatorv1alpha1.Usage{Maximum: 5, Reserved: 5}},
				{Name: "compute-large", Usage: imperatorv1alpha1.Usage{Maximum: 2}},
			},
			wantConditions: []metav1.Condition{
				{Type: "StrayGuests", Status: "True", Reason: "GuestsNotAdmitted",
					Message: "compute-medium: 1000 pods labelled as its guests were not admitted by the pod injector (no imperator.tenzen-y.io/injected record for this group and type) " +
						"and count as nothing (namespaces squat-a, squat-b, squat-c and 2 more); " +
						"compute-xlarge: 4 pods labelled as its guests were not admitted by the pod injector (no imperator.tenzen-y.io/injected record for this group and type) " +
						"and count as nothing (namespaces squat)"},
				{Type: "Ready", Status: "True", Reason: "ReservationsReconciled", Message: "reservations in place for compute-medium, compute-xlarge"},
				{Type: "InsufficientCapacity", Status: "True", Reason: "NoNodePool", Message: "compute-large: no node of spec.nodePool serves it, 2 available cannot be reserved"},
				{Type: "OverSubscribed", Status: "False", Reason: "WithinAvailable", Message: "no machine type has guests holding more units than available"},
			},
		},
		"a conflicting StatefulSet": {
			state: reconcileState{served: served, usage: map[string]*typeUsage{}},
			err:   errors.Join(errors.New("other"), &conflictError{kind: "StatefulSet", namespace: "imperator-system", name: "compute-xlarge-general-machine", machine: "general-machine"}),
			wantUsage: []imperatorv1alpha1.AvailableMachine{
				{Name: "compute-medium", Usage: imperatorv1alpha1.Usage{Maximum: 4}},
				{Name: "compute-xlarge", Usage: imperatorv1alpha1.Usage{Maximum: 5}},
				{Name: "compute-large", Usage: imperatorv1alpha1.Usage{Maximum: 2}},
			},
			wantConditions: []metav1.Condition{
				{Type: "Ready", Status: "False", Reason: "ReservationConflict",
					Message: "StatefulSet imperator-system/compute-xlarge-general-machine exists and is not controlled by Machine general-machine"},
				{Type: "InsufficientCapacity", Status: "True", Reason: "NoNodePool", Message: "compute-large: no node of spec.nodePool serves it, 2 available cannot be reserved"},
				{Type: "OverSubscribed", Status: "False", Reason: "WithinAvailable", Message: "no machine type has guests holding more units than available"},
				noStrays,
			},
		},
		"pods could not be counted: the usage stays as it was": {
			state: reconcileState{},
			err:   errors.New("listing pods of machine group general-machine: boom"),
			wantUsage: []imperatorv1alpha1.AvailableMachine{
				{Name: "compute-xlarge", Usage: imperatorv1alpha1.Usage{Maximum: 1, Reserved: 1}},
			},
			wantConditions: []metav1.Condition{
				{Type: "Ready", Status: "False", Reason: "ReconcileFailed", Message: "listing pods of machine group general-machine: boom"},
			},
		},
		"no machine group: the usage and the capacity conditions go": {
			state: reconcileState{readyReason: imperatorv1alpha1.ReasonMachineGroupMissing, readyMessage: "label missing"},
			conditions: []metav1.Condition{
				{Type: "Ready", Status: "True", Reason: "ReservationsReconciled", Message: "reservations in place for compute-xlarge"},
				{Type: "InsufficientCapacity", Status: "True", Reason: "ReservationsUnschedulable", Message: "compute-xlarge: 1 of 1 reservation pods cannot be scheduled"},
				{Type: "OverSubscribed", Status: "True", Reason: "GuestsExceedAvailable", Message: "compute-xlarge: guests hold 2 units of 1 available (2 bound, 0 being placed, 0 leaving), 0 queued"},
				{Type: "StrayGuests", Status: "True", Reason: "GuestsNotAdmitted", Message: "compute-xlarge: 4 pods labelled as its guests were not admitted"},
			},
			wantConditions: []metav1.Condition{
				{Type: "Ready", Status: "False", Reason: "MachineGroupMissing", Message: "label missing"},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			status := imperatorv1alpha1.MachineStatus{
				AvailableMachines: []imperatorv1alpha1.AvailableMachine{{Name: "compute-xlarge", Usage: imperatorv1alpha1.Usage{Maximum: 1, Reserved: 1}}},
				Conditions:        tc.conditions,
			}
			setStatus(&status, machine, &tc.state, tc.err)
			if status.ObservedGeneration != 7 {
				t.Errorf("observedGeneration %d, want 7", status.ObservedGeneration)
			}
			if diff := cmp.Diff(tc.wantUsage, status.AvailableMachines, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("availableMachines (-want +got):\n%s", diff)
			}
			for i := range tc.wantConditions {
				tc.wantConditions[i].ObservedGeneration = 7
			}
			if diff := cmp.Diff(tc.wantConditions, status.Conditions, cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSetStatusIsStable(t *testing.T) {
	machine := wrappers.GeneralMachine().Obj()
	state := &reconcileState{served: []string{"compute-medium", "compute-xlarge"}, usage: map[string]*typeUsage{}}
	first := imperatorv1alpha1.MachineStatus{}
	setStatus(&first, machine, state, nil)
	second := *first.DeepCopy()
	setStatus(&second, machine, state, nil)
	if diff := cmp.Diff(first, second); diff != "" {
		t.Errorf("a second reconcile with nothing new changed the status (-first +second):\n%s", diff)
	}
}
