package conditions

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTheFirstPresentProblemNamesTheReasonAndEveryProblemIsInTheMessage(t *testing.T) {
	cases := map[string]struct {
		in   FirstFailing
		want metav1.Condition
	}{
		"no problem: the positive condition is True": {
			in: FirstFailing{Type: "Ready", ObservedGeneration: 3, Failing: metav1.ConditionFalse,
				Problems: []Problem{{Reason: "A"}, {Reason: "B", Parts: nil}}, OKReason: "Fine", OKMessage: "all good"},
			want: metav1.Condition{Type: "Ready", ObservedGeneration: 3, Status: metav1.ConditionTrue, Reason: "Fine", Message: "all good"},
		},
		"no problem: the negative condition is False": {
			in:   FirstFailing{Type: "Short", Failing: metav1.ConditionTrue, OKReason: "Enough", OKMessage: "enough"},
			want: metav1.Condition{Type: "Short", Status: metav1.ConditionFalse, Reason: "Enough", Message: "enough"},
		},
		"a later problem alone gives its reason": {
			in: FirstFailing{Type: "Ready", Failing: metav1.ConditionFalse,
				Problems: []Problem{{Reason: "A"}, {Reason: "B", Parts: []string{"b1", "b2"}}}, OKReason: "Fine"},
			want: metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "B", Message: "b1; b2"},
		},
		"the first present problem wins, the message keeps the order": {
			in: FirstFailing{Type: "Short", Failing: metav1.ConditionTrue,
				Problems: []Problem{{Reason: "A", Parts: []string{"a"}}, {Reason: "B"}, {Reason: "C", Parts: []string{"c"}}}},
			want: metav1.Condition{Type: "Short", Status: metav1.ConditionTrue, Reason: "A", Message: "a; c"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.in.Condition()); diff != "" {
				t.Errorf("condition (-want +got):\n%s", diff)
			}
		})
	}
}
