// Package conditions builds the status conditions the spoke's controllers
// write when several problems can hold at once: the condition names the most
// pressing problem in its reason, every problem in its message, and says all
// is well otherwise. The Machine controller (InsufficientCapacity,
// OverSubscribed) and the node-pool controller (Ready) share it, so the
// precedence and the message shape are the same everywhere.
package conditions

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Problem is one kind of trouble a condition reports.
type Problem struct {
	// Reason is the condition's reason when this is the first problem present.
	Reason string
	// Parts say what has the problem, one message part each; a problem
	// without parts is not present.
	Parts []string
}

// FirstFailing describes a condition whose reason is that of the first
// present problem.
type FirstFailing struct {
	// Type and ObservedGeneration are copied to the condition.
	Type               string
	ObservedGeneration int64
	// Failing is the status while a problem is present: False for a
	// positive condition such as Ready, True for a negative one such as
	// InsufficientCapacity. The other status means none is.
	Failing metav1.ConditionStatus
	// Problems, the most pressing first.
	Problems []Problem
	// Reason and Message of the condition when no problem is present.
	OKReason, OKMessage string
}

// Condition is the condition f describes: status Failing, the reason of the
// first present problem and a message joining the parts of every present
// problem in order ("; "); or the other status with OKReason and OKMessage
// when no problem is present.
func (f FirstFailing) Condition() metav1.Condition {
	cond := metav1.Condition{Type: f.Type, ObservedGeneration: f.ObservedGeneration}
	var parts []string
	for _, p := range f.Problems {
		if len(p.Parts) == 0 {
			continue
		}
		if cond.Reason == "" {
			cond.Reason = p.Reason
		}
		parts = append(parts, p.Parts...)
	}
	if cond.Reason == "" {
		cond.Status, cond.Reason, cond.Message = opposite(f.Failing), f.OKReason, f.OKMessage
		return cond
	}
	cond.Status, cond.Message = f.Failing, strings.Join(parts, "; ")
	return cond
}

func opposite(s metav1.ConditionStatus) metav1.ConditionStatus {
	if s == metav1.ConditionTrue {
		return metav1.ConditionFalse
	}
	return metav1.ConditionTrue
}
