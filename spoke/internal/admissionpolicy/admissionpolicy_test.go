package admissionpolicy

import (
	"strings"
	"time"

	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

func guests() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{imperatorv1alpha1.PodRoleKey: string(imperatorv1alpha1.PodRoleGuest)}}
}

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
			wantSelector: guests(),
		},
		"groups sorted and once each, whatever the Machines' order": {
			machines: []imperatorv1alpha1.Machine{
				*wrappers.MakeMachine("b", "team-b").Obj(), *wrappers.MakeMachine("a", "team-a").Obj(), *wrappers.MakeMachine("a2", "team-a").Obj(),
			},
			wantSelector: &metav1.LabelSelector{MatchLabels: guests().MatchLabels, MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: imperatorv1alpha1.MachineGroupKey, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"team-a", "team-b"},
			}}},
		},
		"a Machine being deleted or without a group offers no group": {
			machines:     []imperatorv1alpha1.Machine{*deleting, *unlabelled},
			wantSelector: guests(),
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

func TestEachMachineBindsTheInjectionToItsOwnGroup(t *testing.T) {
	deleting := wrappers.MakeMachine("leaving", "leaving").Obj()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	machines := []imperatorv1alpha1.Machine{*wrappers.MakeMachine("gpu-a", "team-a").Obj(), *deleting, *wrappers.MakeMachine("gpu-b", "team-b").Obj()}
	got := map[string][2]string{}
	for _, b := range InjectionBindings(machines, "") {
		if b.Spec.PolicyName != InjectionPolicy || b.Labels[ManagedByLabel] != "true" {
			t.Errorf("binding %s: policy %s, labels %v", b.Name, b.Spec.PolicyName, b.Labels)
		}
		got[b.Name] = [2]string{b.Spec.ParamRef.Name, b.Spec.MatchResources.ObjectSelector.MatchLabels[imperatorv1alpha1.MachineGroupKey]}
	}
	want := map[string][2]string{
		"imperator-guest-injection-gpu-a":        {"gpu-a", "team-a"},
		"imperator-guest-injection-legacy-gpu-a": {"gpu-a", "team-a"},
		"imperator-guest-injection-gpu-b":        {"gpu-b", "team-b"},
		"imperator-guest-injection-legacy-gpu-b": {"gpu-b", "team-b"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("bindings: name -> (paramRef, group) (-want +got):\n%s", diff)
	}

	for namespace, want := range map[string]string{"": AgentNamespace, "gpu-agent": "gpu-agent"} {
		for _, b := range InjectionBindings(machines[:1], namespace) {
			excluded := b.Spec.MatchResources.NamespaceSelector.MatchExpressions[len(b.Spec.MatchResources.NamespaceSelector.MatchExpressions)-1]
			if diff := cmp.Diff([]string{metav1.NamespaceSystem, want}, excluded.Values); excluded.Operator != metav1.LabelSelectorOpNotIn || diff != "" {
				t.Errorf("binding %s with the agent in %q: namespaces %s not in (-want +got):\n%s", b.Name, namespace, excluded.Operator, diff)
			}
		}
	}

	long := strings.Repeat("m", 253)
	name := InjectionBindingName(long, true)
	if len(name) > 253 || name == InjectionBindingName(long[:252]+"n", true) {
		t.Errorf("InjectionBindingName of a 253-character Machine = %q (%d characters), want at most 253 and distinct per Machine", name, len(name))
	}
}

func TestAutoInjectsByPolicyWhereTheAPIServerServesMutatingAdmissionPolicies(t *testing.T) {
	served := func(resources ...string) *fakediscovery.FakeDiscovery {
		d := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}
		list := &metav1.APIResourceList{GroupVersion: "admissionregistration.k8s.io/v1"}
		for _, r := range resources {
			list.APIResources = append(list.APIResources, metav1.APIResource{Name: r})
		}
		d.Resources = []*metav1.APIResourceList{list}
		return d
	}
	cases := map[string]struct {
		mode       string
		disc       *fakediscovery.FakeDiscovery
		wantPolicy bool
		wantErr    bool
	}{
		"auto on 1.36: policy":               {mode: ModeAuto, disc: served("validatingadmissionpolicies", "mutatingadmissionpolicies"), wantPolicy: true},
		"auto before 1.36: webhook":          {mode: ModeAuto, disc: served("validatingadmissionpolicies")},
		"policy whatever the server serves":  {mode: ModePolicy, disc: served(), wantPolicy: true},
		"webhook whatever the server serves": {mode: ModeWebhook, disc: served("mutatingadmissionpolicies")},
		"an unknown mode is an error, named": {mode: "cel", disc: served(), wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := UsePolicy(tc.mode, tc.disc)
			if (err != nil) != tc.wantErr || got != tc.wantPolicy {
				t.Errorf("UsePolicy(%q) = %v, %v; want %v, error %v", tc.mode, got, err, tc.wantPolicy, tc.wantErr)
			}
		})
	}
}
