package ingest

import (
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Error is a refused spoke message: the problems found (at most
// maxReportedErrors of them), the first of which names the field a refusal
// reports.
type Error struct {
	Errs field.ErrorList
	// More is true when further problems were not listed.
	More bool
}

func (e *Error) Error() string {
	msg := e.Errs.ToAggregate().Error()
	if e.More {
		msg += ", and more"
	}
	return msg
}

// Reason is the machine-readable kind of the first problem, e.g.
// FieldValueInvalid, FieldValueDuplicate or FieldValueTooMany.
func (e *Error) Reason() string { return string(e.Errs[0].Type) }

// Field is the path of the first problem, e.g. snapshot.machines[3].types[0].name.
func (e *Error) Field() string { return e.Errs[0].Field }

// errorList collects problems up to maxReportedErrors.
type errorList struct {
	errs field.ErrorList
	more bool
}

func (l *errorList) add(errs ...*field.Error) {
	for _, err := range errs {
		if len(l.errs) == maxReportedErrors {
			l.more = true
			return
		}
		l.errs = append(l.errs, err)
	}
}

// full is true once no further problem would be listed: checking on is
// wasted work.
func (l *errorList) full() bool { return l.more }

func (l *errorList) err() error {
	if len(l.errs) == 0 {
		return nil
	}
	return &Error{Errs: l.errs, More: l.more}
}
