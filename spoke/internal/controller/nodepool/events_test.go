package nodepool

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

func TestNodeEvents(t *testing.T) {
	const (
		ready       = imperatorv1alpha1.NodeConditionReady
		notReady    = imperatorv1alpha1.NodeConditionNotReady
		missing     = imperatorv1alpha1.NodeConditionMissing
		conflicting = imperatorv1alpha1.NodeConditionConflict
	)
	status := func(name string, condition imperatorv1alpha1.NodeCondition) imperatorv1alpha1.NodePoolStatus {
		return imperatorv1alpha1.NodePoolStatus{Name: name, MachineType: xlarge, Condition: condition}
	}
	result := func(name string, condition imperatorv1alpha1.NodeCondition) nodeResult {
		return nodeResult{status: status(name, condition)}
	}
	inFirst := func(r nodeResult) nodeResult {
		r.owner, r.ownerMachine = "first-node-pool", "first"
		return r
	}
	manyMissing := make([]nodeResult, 0, 12)
	for i := range 12 {
		manyMissing = append(manyMissing, result(fmt.Sprintf("n%02d", i), missing))
	}

	cases := map[string]struct {
		before  []imperatorv1alpha1.NodePoolStatus
		results []nodeResult
		want    []nodeEvent
	}{
		"steady state: nothing": {
			before:  []imperatorv1alpha1.NodePoolStatus{status("a", ready), status("b", missing), status("c", conflicting)},
			results: []nodeResult{result("a", ready), result("b", missing), inFirst(result("c", conflicting))},
		},
		"new pool with nodes in order: quiet": {
			results: []nodeResult{result("a", ready), result("b", notReady)},
		},
		"node listed but absent": {
			before:  []imperatorv1alpha1.NodePoolStatus{status("a", ready)},
			results: []nodeResult{result("a", ready), result("b", missing)},
			want: []nodeEvent{{
				eventType: corev1.EventTypeWarning, reason: "NodeMissing", node: "b",
				note: "node b listed in spec.nodePool does not exist",
			}},
		},
		"node deleted while in the pool": {
			before:  []imperatorv1alpha1.NodePoolStatus{status("a", ready)},
			results: []nodeResult{result("a", missing)},
			want: []nodeEvent{{
				eventType: corev1.EventTypeWarning, reason: "NodeMissing", node: "a",
				note: "node a listed in spec.nodePool does not exist",
			}},
		},
		"node owned by an older pool": {
			results: []nodeResult{inFirst(result("a", conflicting))},
			want: []nodeEvent{{
				eventType: corev1.EventTypeWarning, reason: "NodeConflict", node: "a",
				note: "node a is left alone: Machine first (MachineNodePool first-node-pool) listed it first and owns it",
			}},
		},
		"node owned by a pool without Machine": {
			results: []nodeResult{{status: status("a", conflicting), owner: "by-hand"}},
			want: []nodeEvent{{
				eventType: corev1.EventTypeWarning, reason: "NodeConflict", node: "a",
				note: "node a is left alone: MachineNodePool by-hand listed it first and owns it",
			}},
		},
		"missing node appears, conflicting node handed over": {
			before:  []imperatorv1alpha1.NodePoolStatus{status("a", missing), status("b", conflicting)},
			results: []nodeResult{result("a", ready), result("b", notReady)},
			want: []nodeEvent{
				{eventType: corev1.EventTypeNormal, reason: "NodeJoined", node: "a", note: "node a joined the pool"},
				{eventType: corev1.EventTypeNormal, reason: "NodeJoined", node: "b", note: "node b joined the pool"},
			},
		},
		"health changes are not events": {
			before:  []imperatorv1alpha1.NodePoolStatus{status("a", ready)},
			results: []nodeResult{result("a", notReady)},
		},
		"a node that could not be read is not reported missing": {
			before:  []imperatorv1alpha1.NodePoolStatus{status("a", ready)},
			results: []nodeResult{{status: status("a", missing), failed: true}},
		},
		"many nodes alike: one event naming them": {
			results: manyMissing,
			want: []nodeEvent{{
				eventType: corev1.EventTypeWarning, reason: "NodeMissing",
				note: "12 listed nodes do not exist: n00, n01, n02, n03, n04, n05, n06, n07, n08, n09 and 2 more",
			}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := nodeEvents(tc.before, tc.results)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(nodeEvent{})); diff != "" {
				t.Errorf("nodeEvents (-want +got):\n%s", diff)
			}
		})
	}
}
