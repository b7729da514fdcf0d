package machine

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// nativeWorker is a gated guest of compute-small created at second s that
// names the native PodGroup podGroup, without gang-size.
func nativeWorker(name string, s int, podGroup string) *corev1.Pod {
	pod := withUID(gatedGuest("team-a", name, s), name)
	pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(podGroup)}
	return pod
}

func TestPodGroupVerdicts(t *testing.T) {
	sizes := func(id gangID) int32 {
		if id.source == "podgroup" {
			return map[string]int32{"fits": 2, "waits": 3, "short": 3, "big": 9}[id.name]
		}
		return 0
	}
	plan := func(available, held int32, gated ...*corev1.Pod) (*typeUsage, slotPlan) {
		u := &typeUsage{Usage: imperatorv1alpha1.Usage{Maximum: available}, gated: gated}
		formGangs(u, "compute-small", sizes)
		return u, planSlots(line{machineType: "compute-small", available: available, held: held, gated: u.gated,
			placeable: func(*corev1.Pod) bool { return true }, gangs: u.gangs, parked: u.parked})
	}
	cases := map[string]struct {
		available, held int32
		gated           []*corev1.Pod
		want            map[string]gangVerdict
	}{
		"a gang let through whole is admitted": {
			available: 4, gated: []*corev1.Pod{nativeWorker("f0", 1, "fits"), nativeWorker("f1", 2, "fits")},
			want: map[string]gangVerdict{"fits": {admitted: true, reason: ReasonLetThrough,
				message: "gang team-a/fits: 2 of 2 let through the slot gate together to compute-small of Machine general-machine"}},
		},
		"a gang waiting whole is told its note, NotEnoughResources": {
			available: 4, held: 2, gated: []*corev1.Pod{nativeWorker("w0", 1, "waits"), nativeWorker("w1", 2, "waits"), nativeWorker("w2", 3, "waits")},
			want: map[string]gangVerdict{"waits": {reason: reasonNotEnoughResources,
				message: "gang team-a/waits: 3 of 3 needed, 2 free; Pending (NotEnoughResources): waiting whole for compute-small, 1st in line, 2 of 4 in use"}},
		},
		"parked gangs give their reason: members missing, bigger than the type": {
			available: 4, gated: []*corev1.Pod{nativeWorker("s0", 1, "short"), nativeWorker("b0", 2, "big")},
			want: map[string]gangVerdict{
				"short": {reason: reasonNotEnoughTasks,
					message: "gang team-a/short: 1 of 3 members here; Pending (NotEnoughTasks): it holds no unit until every member is created"},
				"big": {reason: reasonNotEnoughResources,
					message: "gang team-a/big: 9 needed at once, compute-small has 4 available; Unschedulable (NotEnoughResources): never let through while available is below its size, it holds no unit"},
			},
		},
		"gangs of other vocabularies and single guests say nothing to a PodGroup": {
			available: 4, held: 4, gated: append(members("ours", 2, 2, 1), withUID(gatedGuest("team-a", "single", 5), "single")),
			want: map[string]gangVerdict{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			u, p := plan(tc.available, tc.held, tc.gated...)
			got := map[string]gangVerdict{}
			for id, v := range podGroupVerdicts(u, p, "compute-small", "general-machine") {
				got[id.name] = v
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(gangVerdict{})); diff != "" {
				t.Errorf("verdicts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAdmittedCondition(t *testing.T) {
	earlier := metav1.NewTime(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	now := time.Date(2026, 11, 27, 11, 0, 0, 0, time.UTC)
	waiting := gangVerdict{reason: reasonNotEnoughResources, message: "gang team-a/pg: 3 of 3 needed, 2 free; ..."}
	podGroup := func(conditions ...metav1.Condition) *schedulingv1alpha2.PodGroup {
		return &schedulingv1alpha2.PodGroup{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "pg", UID: "pg-uid", Generation: 2},
			Status:     schedulingv1alpha2.PodGroupStatus{Conditions: conditions},
		}
	}
	theirs := metav1.Condition{Type: schedulingv1alpha2.PodGroupScheduled, Status: metav1.ConditionFalse, Reason: "Unschedulable", ObservedGeneration: 2, LastTransitionTime: earlier}
	cases := map[string]struct {
		podGroup  *schedulingv1alpha2.PodGroup
		verdict   gangVerdict
		wantWrite bool
		want      *metav1ac.ConditionApplyConfiguration
	}{
		"a PodGroup without it gets it, beside the scheduler's": {
			podGroup: podGroup(theirs), verdict: waiting, wantWrite: true,
			want: metav1ac.Condition().WithType(PodGroupAdmittedCondition).WithStatus(metav1.ConditionFalse).WithReason(reasonNotEnoughResources).
				WithMessage(waiting.message).WithObservedGeneration(2).WithLastTransitionTime(metav1.NewTime(now)),
		},
		"the same condition is not written again": {
			podGroup: podGroup(theirs, metav1.Condition{Type: PodGroupAdmittedCondition, Status: metav1.ConditionFalse, Reason: waiting.reason,
				Message: waiting.message, ObservedGeneration: 2, LastTransitionTime: earlier}),
			verdict: waiting,
		},
		"a new note keeps the transition time of the same status": {
			podGroup: podGroup(metav1.Condition{Type: PodGroupAdmittedCondition, Status: metav1.ConditionFalse, Reason: reasonNotEnoughTasks,
				Message: "gang team-a/pg: 2 of 3 members here; ...", ObservedGeneration: 2, LastTransitionTime: earlier}),
			verdict: waiting, wantWrite: true,
			want: metav1ac.Condition().WithType(PodGroupAdmittedCondition).WithStatus(metav1.ConditionFalse).WithReason(reasonNotEnoughResources).
				WithMessage(waiting.message).WithObservedGeneration(2).WithLastTransitionTime(earlier),
		},
		"let through: True, a new transition time": {
			podGroup: podGroup(metav1.Condition{Type: PodGroupAdmittedCondition, Status: metav1.ConditionFalse, Reason: waiting.reason,
				Message: waiting.message, ObservedGeneration: 2, LastTransitionTime: earlier}),
			verdict: gangVerdict{admitted: true, reason: ReasonLetThrough, message: "let through"}, wantWrite: true,
			want: metav1ac.Condition().WithType(PodGroupAdmittedCondition).WithStatus(metav1.ConditionTrue).WithReason(ReasonLetThrough).
				WithMessage("let through").WithObservedGeneration(2).WithLastTransitionTime(metav1.NewTime(now)),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			apply, write := admittedCondition(tc.podGroup, tc.verdict, now)
			if write != tc.wantWrite {
				t.Fatalf("write = %v, want %v", write, tc.wantWrite)
			}
			if !write {
				return
			}
			if *apply.Name != "pg" || *apply.Namespace != "team-a" || *apply.UID != "pg-uid" {
				t.Errorf("applied to %s/%s UID %s, want team-a/pg UID pg-uid", *apply.Namespace, *apply.Name, *apply.UID)
			}
			if diff := cmp.Diff([]metav1ac.ConditionApplyConfiguration{*tc.want}, apply.Status.Conditions); diff != "" {
				t.Errorf("applied conditions (-want +got): only the agent's own\n%s", diff)
			}
		})
	}
}
