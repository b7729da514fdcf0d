package admissionpolicy

import (
	"time"

	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

func TestTheBindingSelectsGuestsOfGroupsNoMachineHas(t *testing.T) {
	deleting := wrappers.MakeMachine("leaving", "leaving").Obj()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	unlabelled := wrappers.MakeMachine("unlabelled", "x").Obj()
	unlabelled.Labels = nil
	cases := map[string]struct {
		machines     []imperatorv1alpha1.Machine
		wantSelector *metav1.LabelSelector
	}{
		"no Machine: every guest is of an unknown group": {
			wantSelector: &metav1.LabelSelector{},
		},
		"groups sorted and once each, whatever the Machines' order": {
			machines: []imperatorv1alpha1.Machine{
				*wrappers.MakeMachine("b", "team-b").Obj(), *wrappers.MakeMachine("a", "team-a").Obj(), *wrappers.MakeMachine("a2", "team-a").Obj(),
			},
			wantSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: imperatorv1alpha1.MachineGroupKey, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"team-a", "team-b"},
			}}},
		},
		"a Machine being deleted or without a group offers no group": {
			machines:     []imperatorv1alpha1.Machine{*deleting, *unlabelled},
			wantSelector: &metav1.LabelSelector{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Binding(tc.machines)
			if got.Name != UnknownGroupPolicy || got.Spec.PolicyName != UnknownGroupPolicy {
				t.Errorf("binding %s binds %s, want both %s", got.Name, got.Spec.PolicyName, UnknownGroupPolicy)
			}
			if diff := cmp.Diff(tc.wantSelector, got.Spec.MatchResources.ObjectSelector); diff != "" {
				t.Errorf("object selector (-want +got):\n%s", diff)
			}
		})
	}
}
