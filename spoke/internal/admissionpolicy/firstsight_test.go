package admissionpolicy

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/controller/provisioningrequest"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

func TestNextStampStaysInTheCreationSecond(t *testing.T) {
	const second = int64(1_800_000_000)
	at := func(sec, nsec int64) time.Time { return time.Unix(sec, nsec).UTC() }
	cases := map[string]struct {
		stamps []time.Time
		want   time.Time
	}{
		"the first guest of its second": {want: at(second, 1)},
		"after the latest stamp of its second": {
			stamps: []time.Time{at(second, 3), at(second, 7), at(second, 5)}, want: at(second, 8),
		},
		"stamps of other seconds do not count": {
			stamps: []time.Time{at(second-1, 999_999_999), at(second+1, 40)}, want: at(second, 1),
		},
		"a stamp at the second's last nanosecond cannot push it out of the second": {
			stamps: []time.Time{at(second, 999_999_999)}, want: at(second, 999_999_999),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := NextStamp(second, tc.stamps)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("NextStamp (-want +got):\n%s", diff)
			}
			if got.Unix() != second {
				t.Errorf("NextStamp = %v, outside the creation second %d", got, second)
			}
		})
	}
}

func TestClaimsHoldIsAsStrictAsTheInjector(t *testing.T) {
	created := metav1.Unix(1_800_000_010, 0)
	hold := func(mutate func(*imperatorv1alpha1.CapacityHold)) *imperatorv1alpha1.CapacityHold {
		h := wrappers.MakeCapacityHold("team-a-hold", "general-machine", "compute-xlarge", 2).Namespaces("team-a").Obj()
		h.UID = "hold-uid"
		h.CreationTimestamp = metav1.Unix(1_800_000_000, 0)
		if mutate != nil {
			mutate(h)
		}
		return h
	}
	guest := func(namespace string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "g", CreationTimestamp: created, Labels: map[string]string{
			imperatorv1alpha1.MachineGroupKey: "general-machine", imperatorv1alpha1.MachineTypeKey: "compute-xlarge",
			imperatorv1alpha1.PodRoleKey: string(imperatorv1alpha1.PodRoleGuest), imperatorv1alpha1.HoldKey: "team-a-hold",
		}}}
	}
	cases := map[string]struct {
		hold       *imperatorv1alpha1.CapacityHold
		pod        *corev1.Pod
		forRequest string
		want       bool
	}{
		"a guest of an allowed namespace created after the hold": {hold: hold(nil), pod: guest("team-a"), want: true},
		"a hold open to every namespace": {
			hold: hold(func(h *imperatorv1alpha1.CapacityHold) { h.Spec.Namespaces = nil }), pod: guest("team-b"), want: true,
		},
		"a namespace the hold does not allow": {hold: hold(nil), pod: guest("team-b")},
		"another machine type": {
			hold: hold(func(h *imperatorv1alpha1.CapacityHold) { h.Spec.MachineType = "compute-medium" }), pod: guest("team-a"),
		},
		"another machine group": {
			hold: hold(func(h *imperatorv1alpha1.CapacityHold) { h.Spec.MachineGroup = "other" }), pod: guest("team-a"),
		},
		"a guest created before the hold": {
			hold: hold(func(h *imperatorv1alpha1.CapacityHold) { h.CreationTimestamp = metav1.Unix(1_800_000_020, 0) }), pod: guest("team-a"),
		},
		"a guest of the hold's own second: it may have come first": {
			hold: hold(func(h *imperatorv1alpha1.CapacityHold) { h.CreationTimestamp = created }), pod: guest("team-a"),
		},
		"a hold being deleted": {
			hold: hold(func(h *imperatorv1alpha1.CapacityHold) { h.DeletionTimestamp = &created }), pod: guest("team-a"),
		},
		"a hold not made for the ProvisioningRequest the guest consumes": {
			hold: hold(nil), pod: guest("team-a"), forRequest: "job-1",
		},
		"the hold made for the ProvisioningRequest the guest consumes": {
			hold: hold(func(h *imperatorv1alpha1.CapacityHold) {
				h.Labels = map[string]string{provisioningrequest.RequestNamespaceLabel: "team-a"}
				h.Annotations = map[string]string{provisioningrequest.RequestNameAnnotation: "job-1"}
			}),
			pod: guest("team-a"), forRequest: "job-1", want: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ClaimsHold(tc.hold, tc.pod, tc.forRequest); got != tc.want {
				t.Errorf("ClaimsHold = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestHeldNameReadsTheInjectorsKeys(t *testing.T) {
	pod := func(labels, annotations map[string]string) *corev1.Pod {
		l := map[string]string{imperatorv1alpha1.MachineGroupKey: "g", imperatorv1alpha1.MachineTypeKey: "t"}
		for k, v := range labels {
			l[k] = v
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Labels: l, Annotations: annotations}}
	}
	cases := map[string]struct {
		pod            *corev1.Pod
		wantName, want string
	}{
		"no hold":        {pod: pod(nil, nil)},
		"the hold label": {pod: pod(map[string]string{imperatorv1alpha1.HoldKey: "h"}, nil), wantName: "h"},
		"a ProvisioningRequest consumer": {
			pod: pod(nil, map[string]string{imperatorv1alpha1.ConsumeProvisioningRequestAnnotation: "job-1",
				imperatorv1alpha1.ProvisioningClassNameAnnotation: imperatorv1alpha1.CapacityHoldProvisioningClass}),
			wantName: provisioningrequest.HoldName("team-a", "job-1", "g", "t"), want: "job-1",
		},
		"the legacy class names the hold": {
			pod: pod(nil, map[string]string{imperatorv1alpha1.ConsumeProvisioningRequestAnnotation: "h",
				imperatorv1alpha1.ProvisioningClassNameAnnotation: imperatorv1alpha1.LegacyCapacityHoldProvisioningClass}),
			wantName: "h",
		},
		"another class": {
			pod: pod(nil, map[string]string{imperatorv1alpha1.ConsumeProvisioningRequestAnnotation: "h",
				imperatorv1alpha1.ProvisioningClassNameAnnotation: "check-capacity.autoscaling.x-k8s.io"}),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			name, forRequest := heldName(tc.pod)
			if name != tc.wantName || forRequest != tc.want {
				t.Errorf("heldName = %q, %q; want %q, %q", name, forRequest, tc.wantName, tc.want)
			}
		})
	}
}

func TestAmbiguousGroupBindingSelectsGroupsOfSeveralMachines(t *testing.T) {
	deleting := wrappers.MakeMachine("a3", "team-c").Obj()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	cases := map[string]struct {
		machines   []imperatorv1alpha1.Machine
		wantGroups []string
	}{
		"one Machine per group: no binding": {
			machines: []imperatorv1alpha1.Machine{*wrappers.MakeMachine("a", "team-a").Obj(), *wrappers.MakeMachine("b", "team-b").Obj()},
		},
		"the groups several Machines carry, sorted; a Machine being deleted does not count": {
			machines: []imperatorv1alpha1.Machine{
				*wrappers.MakeMachine("b1", "team-b").Obj(), *wrappers.MakeMachine("b2", "team-b").Obj(),
				*wrappers.MakeMachine("a1", "team-a").Obj(), *wrappers.MakeMachine("a2", "team-a").Obj(),
				*wrappers.MakeMachine("c1", "team-c").Obj(), *deleting,
			},
			wantGroups: []string{"team-a", "team-b"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			binding := AmbiguousGroupBinding(tc.machines)
			if tc.wantGroups == nil {
				if binding != nil {
					t.Fatalf("AmbiguousGroupBinding = %+v, want none", binding.Spec)
				}
				return
			}
			if binding == nil {
				t.Fatalf("AmbiguousGroupBinding = nil, want groups %v", tc.wantGroups)
			}
			want := &metav1.LabelSelector{MatchLabels: guests().MatchLabels, MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: imperatorv1alpha1.MachineGroupKey, Operator: metav1.LabelSelectorOpIn, Values: tc.wantGroups,
			}}}
			if diff := cmp.Diff(want, binding.Spec.MatchResources.ObjectSelector); diff != "" {
				t.Errorf("selector (-want +got):\n%s", diff)
			}
		})
	}
}
