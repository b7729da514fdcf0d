package machine

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/fleet"
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

func TestPriorityClassMessages(t *testing.T) {
	diffs := []string{"value is 1000, want 0", "preemptionPolicy is PreemptLowerPriority, want Never"}
	cases := map[string]struct {
		got, want string
	}{
		"missing, under the shipped name": {
			got: priorityClassMissingMessage(DefaultPriorityClassName),
			want: "PriorityClass imperator-reservation does not exist: the API server refuses reservation pods that name it, " +
				"so reservations are kept as they are and none is added until it exists. " +
				"deploy/spoke ships it (agent/priorityclass.yaml) with value 0, preemptionPolicy Never and globalDefault false: " +
				"kubectl apply -k deploy/spoke; the agent only reads it",
		},
		"missing, under a name of the agent's configuration": {
			got: priorityClassMissingMessage("gpu-placeholders"),
			want: "PriorityClass gpu-placeholders does not exist: the API server refuses reservation pods that name it, " +
				"so reservations are kept as they are and none is added until it exists. " +
				"deploy/spoke ships it (agent/priorityclass.yaml) as imperator-reservation with value 0, preemptionPolicy Never and globalDefault false: " +
				"create that manifest under the name gpu-placeholders; the agent only reads it",
		},
		"different, under the shipped name": {
			got: priorityClassMismatchMessage(DefaultPriorityClassName, diffs),
			want: "PriorityClass imperator-reservation is not the one reservations need " +
				"(value is 1000, want 0; preemptionPolicy is PreemptLowerPriority, want Never): " +
				"reservation pods running at it could keep guests out or preempt other pods, so every reservation is scaled to 0 until it is fixed. " +
				"deploy/spoke ships it (agent/priorityclass.yaml) with value 0, preemptionPolicy Never and globalDefault false, " +
				"and a value or preemptionPolicy cannot be changed: delete it (kubectl delete priorityclass imperator-reservation), " +
				"then kubectl apply -k deploy/spoke; the reservations come back",
		},
		"different, under a name of the agent's configuration": {
			got: priorityClassMismatchMessage("gpu-placeholders", diffs[:1]),
			want: "PriorityClass gpu-placeholders is not the one reservations need (value is 1000, want 0): " +
				"reservation pods running at it could keep guests out or preempt other pods, so every reservation is scaled to 0 until it is fixed. " +
				"deploy/spoke ships it (agent/priorityclass.yaml) as imperator-reservation with value 0, preemptionPolicy Never and globalDefault false, " +
				"and a value or preemptionPolicy cannot be changed: delete it (kubectl delete priorityclass gpu-placeholders), " +
				"then create that manifest under the name gpu-placeholders; the reservations come back",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("message\n got %q\nwant %q", tc.got, tc.want)
			}
		})
	}
}

// deploy/spoke ships the class the agent only reads: a manifest that drifts
// from what the agent checks would hold every reservation back.
func TestShippedPriorityClassIsWhatReservationsNeed(t *testing.T) {
	shipped, err := fleet.ReservationPriorityClass()
	if err != nil {
		t.Fatal(err)
	}
	if shipped.Name != DefaultPriorityClassName {
		t.Errorf("%s names PriorityClass %s, the agent's default is %s", fleet.ReservationPriorityClassFile, shipped.Name, DefaultPriorityClassName)
	}
	if diffs := priorityClassDifferences(shipped, reservationPriorityClass(DefaultPriorityClassName)); len(diffs) > 0 {
		t.Errorf("%s differs from what reservations need: %v", fleet.ReservationPriorityClassFile, diffs)
	}
}

func TestCheckPriorityClass(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := schedulingv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	wrong := reservationPriorityClass(DefaultPriorityClassName)
	wrong.Value = 1000
	cases := map[string]struct {
		objects   []client.Object
		getErr    error
		wantCheck priorityClassCheck
		wantErr   string
	}{
		"the shipped class": {
			objects: []client.Object{reservationPriorityClass(DefaultPriorityClassName)},
		},
		"no class": {
			wantCheck: priorityClassCheck{missing: true},
		},
		"another class only": {
			objects:   []client.Object{reservationPriorityClass("system-node-critical")},
			wantCheck: priorityClassCheck{missing: true},
		},
		"a class with another value": {
			objects:   []client.Object{wrong},
			wantCheck: priorityClassCheck{differences: []string{"value is 1000, want 0"}},
		},
		"the cache cannot read it": {
			getErr:  apierrors.NewForbidden(schedulingv1.Resource("priorityclasses"), DefaultPriorityClassName, errors.New("RBAC")),
			wantErr: `getting PriorityClass imperator-reservation: priorityclasses.scheduling.k8s.io "imperator-reservation" is forbidden: RBAC`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.objects...).WithInterceptorFuncs(interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if tc.getErr != nil {
						return tc.getErr
					}
					return c.Get(ctx, key, obj, opts...)
				},
				Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
					t.Error("the agent created an object: it only reads the PriorityClass")
					return nil
				},
			}).Build()
			r := &Reconciler{opts: Options{PriorityClassName: DefaultPriorityClassName}}
			got, err := r.checkPriorityClass(context.Background(), c)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Errorf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantCheck, got, cmp.AllowUnexported(priorityClassCheck{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("check (-want +got):\n%s", diff)
			}
		})
	}
}

// While the class is missing, reservations never grow (their pods would be
// refused) but still shrink for guests.
func TestKeepReservations(t *testing.T) {
	cases := map[string]struct {
		usage        map[string]*typeUsage
		current      map[string]int32
		wantReplicas map[string]int32
	}{
		"a new Machine, without StatefulSets, adds no reservation": {
			usage:        map[string]*typeUsage{"compute-xlarge": {replicas: 2, unschedulable: 1}},
			wantReplicas: map[string]int32{"compute-xlarge": 0},
		},
		"reservations in place stay": {
			usage:        map[string]*typeUsage{"compute-xlarge": {replicas: 2}, "compute-medium": {replicas: 4}},
			current:      map[string]int32{"compute-xlarge": 2, "compute-medium": 4},
			wantReplicas: map[string]int32{"compute-xlarge": 2, "compute-medium": 4},
		},
		"a guest that left does not bring its reservation back": {
			usage:        map[string]*typeUsage{"compute-medium": {replicas: 4}},
			current:      map[string]int32{"compute-medium": 3},
			wantReplicas: map[string]int32{"compute-medium": 3},
		},
		"a guest that arrives still gets a reservation's slot": {
			usage:        map[string]*typeUsage{"compute-medium": {replicas: 2}},
			current:      map[string]int32{"compute-medium": 3},
			wantReplicas: map[string]int32{"compute-medium": 2},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			keepReservations(tc.usage, tc.current)
			got := map[string]int32{}
			for name, u := range tc.usage {
				got[name] = u.replicas
				if u.unschedulable > u.replicas {
					t.Errorf("%s: %d unschedulable of %d replicas", name, u.unschedulable, u.replicas)
				}
			}
			if diff := cmp.Diff(tc.wantReplicas, got); diff != "" {
				t.Errorf("replicas (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReservationReplicas(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := errors.Join(appsv1.AddToScheme(scheme), imperatorv1alpha1.AddToScheme(scheme)); err != nil {
		t.Fatal(err)
	}
	machine := wrappers.GeneralMachine().Obj()
	machine.UID = "general-uid"
	other := machine.DeepCopy()
	other.Name, other.UID = "other-machine", "other-uid"
	reservation := func(machineType string, owner *imperatorv1alpha1.Machine, replicas *int32) *appsv1.StatefulSet {
		sts := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: agentNS, Name: imperatorv1alpha1.ReservationName(machineType, "general-machine")},
			Spec:       appsv1.StatefulSetSpec{Replicas: replicas},
		}
		if owner != nil {
			sts.OwnerReferences = []metav1.OwnerReference{{APIVersion: imperatorv1alpha1.GroupVersion.String(), Kind: "Machine",
				Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}
		}
		return sts
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		reservation("compute-xlarge", machine, ptr.To[int32](1)),
		reservation("compute-medium", other, ptr.To[int32](3)),
		reservation("compute-large", machine, nil),
		reservation("compute-small", nil, ptr.To[int32](2)),
	).Build()
	r := &Reconciler{opts: Options{Namespace: agentNS}}
	got, err := r.reservationReplicas(context.Background(), c, machine, "general-machine",
		[]string{"compute-xlarge", "compute-medium", "compute-large", "compute-small", "compute-tiny"})
	if err != nil {
		t.Fatal(err)
	}
	// Only the StatefulSets the Machine controls count; a conflicting one
	// is reported by applyReservation.
	want := map[string]int32{"compute-xlarge": 1, "compute-large": 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("replicas (-want +got):\n%s", diff)
	}
}

func TestPriorityClassEvent(t *testing.T) {
	mismatch := func(message string) *metav1.Condition {
		return &metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: imperatorv1alpha1.ReasonReservationPriorityClassMismatch, Message: message}
	}
	missing := &metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: imperatorv1alpha1.ReasonReservationPriorityClassMissing,
		Message: "PriorityClass imperator-reservation does not exist"}
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
				"PriorityClass imperator-reservation is in place again: reservations in place for compute-xlarge"},
		},
		"a ready Machine finds the class gone": {
			was:       ready,
			now:       missing,
			wantEvent: &transitionEvent{corev1.EventTypeWarning, "ReservationPriorityClassMissing", "PriorityClass imperator-reservation does not exist"},
		},
		"the class is still missing: no event": {
			was: missing,
			now: missing,
		},
		"a wrong class was deleted and not yet applied again": {
			was:       mismatch("value is 1000"),
			now:       missing,
			wantEvent: &transitionEvent{corev1.EventTypeWarning, "ReservationPriorityClassMissing", "PriorityClass imperator-reservation does not exist"},
		},
		"the missing class was applied": {
			was: missing,
			now: ready,
			wantEvent: &transitionEvent{corev1.EventTypeNormal, "ReservationsReconciled",
				"PriorityClass imperator-reservation is in place again: reservations in place for compute-xlarge"},
		},
		"the missing class was applied wrong": {
			was:       missing,
			now:       mismatch("value is 1000"),
			wantEvent: &transitionEvent{corev1.EventTypeWarning, "ReservationPriorityClassMismatch", "value is 1000"},
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
		{Type: "OverSubscribed", Status: "False", Reason: "WithinAvailable", Message: "no machine type has guests holding more units than available"},
		{Type: "StrayGuests", Status: "False", Reason: "NoStrayGuests", Message: "every pod labelled as a guest of the group was admitted by the pod injector"},
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
