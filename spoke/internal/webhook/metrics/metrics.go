// Package metrics counts the agent's admission decisions, by webhook,
// outcome and reason, on the agent's metrics endpoint: the pod injector's
// and the Machine validator's handlers are wrapped at registration.
//
// Only the calls that reach the agent are counted: a call the API server
// could not deliver (agent down, timeout) shows in the API server's own
// apiserver_admission_webhook_* metrics.
package metrics

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// The webhooks, as the webhook label names them.
const (
	PodInjector      = "pod-injector"
	MachineValidator = "machine-validator"
)

// Outcomes of an admission call.
const (
	// OutcomeAllowed: admitted (reason Patched when the injector changed
	// the pod, else Unchanged).
	OutcomeAllowed = "allowed"
	// OutcomeDenied: refused because of the object (reason Forbidden,
	// Invalid, ...): the user's mistake, not the agent's.
	OutcomeDenied = "denied"
	// OutcomeError: the agent failed to decide (reason BadRequest,
	// InternalError, ...).
	OutcomeError = "error"
)

// Reasons of allowed calls.
const (
	reasonPatched   = "Patched"
	reasonUnchanged = "Unchanged"
)

var admissions = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "imperator_spoke_webhook_admissions_total",
	Help: "Admission calls the agent's webhooks answered, by webhook (pod-injector, machine-validator), " +
		"outcome (allowed, denied, error) and reason (Patched, Unchanged, a Kubernetes status reason such as Forbidden or Invalid, or BadRequest/InternalError).",
}, []string{"webhook", "outcome", "reason"})

func init() {
	// The series an alert's ratio divides by exist from the start.
	for _, webhook := range []string{PodInjector, MachineValidator} {
		admissions.WithLabelValues(webhook, OutcomeAllowed, reasonUnchanged)
		admissions.WithLabelValues(webhook, OutcomeError, string(metav1.StatusReasonInternalError))
	}
	admissions.WithLabelValues(PodInjector, OutcomeAllowed, reasonPatched)
	ctrlmetrics.Registry.MustRegister(admissions)
}

// Classify names the outcome and reason of an admission response.
func Classify(resp admission.Response) (outcome, reason string) {
	if resp.Allowed {
		if len(resp.Patches) > 0 || resp.PatchType != nil {
			return OutcomeAllowed, reasonPatched
		}
		return OutcomeAllowed, reasonUnchanged
	}
	var code int32
	var statusReason metav1.StatusReason
	if resp.Result != nil {
		code, statusReason = resp.Result.Code, resp.Result.Reason
	}
	// admission.Errored sets a code and no reason; Denied and a validator's
	// field errors set both.
	if statusReason != "" && code != http.StatusInternalServerError {
		return OutcomeDenied, string(statusReason)
	}
	return OutcomeError, reasonOfCode(code)
}

// classifyError names the outcome and reason of a validator's answer: nil
// allows, an API status error (field errors, Forbidden) denies, any other
// error is the validator's failure.
func classifyError(err error) (outcome, reason string) {
	if err == nil {
		return OutcomeAllowed, reasonUnchanged
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		s := status.Status()
		if s.Reason != "" && s.Code != http.StatusInternalServerError {
			return OutcomeDenied, string(s.Reason)
		}
		return OutcomeError, reasonOfCode(s.Code)
	}
	return OutcomeError, string(metav1.StatusReasonInternalError)
}

// reasonOfCode is the Kubernetes status reason of an HTTP code.
func reasonOfCode(code int32) string {
	switch code {
	case http.StatusBadRequest:
		return string(metav1.StatusReasonBadRequest)
	case http.StatusInternalServerError, 0:
		return string(metav1.StatusReasonInternalError)
	case http.StatusGatewayTimeout:
		return string(metav1.StatusReasonTimeout)
	default:
		return "Code" + strconv.Itoa(int(code))
	}
}

// Handler counts the responses of h as webhook's.
func Handler(webhook string, h admission.Handler) admission.Handler {
	return admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		resp := h.Handle(ctx, req)
		outcome, reason := Classify(resp)
		admissions.WithLabelValues(webhook, outcome, reason).Inc()
		return resp
	})
}

// Validator counts the answers of v as webhook's.
func Validator[T runtime.Object](webhook string, v admission.Validator[T]) admission.Validator[T] {
	return &countingValidator[T]{webhook: webhook, validator: v}
}

type countingValidator[T runtime.Object] struct {
	webhook   string
	validator admission.Validator[T]
}

func (c *countingValidator[T]) count(warnings admission.Warnings, err error) (admission.Warnings, error) {
	outcome, reason := classifyError(err)
	admissions.WithLabelValues(c.webhook, outcome, reason).Inc()
	return warnings, err
}

func (c *countingValidator[T]) ValidateCreate(ctx context.Context, obj T) (admission.Warnings, error) {
	return c.count(c.validator.ValidateCreate(ctx, obj))
}

func (c *countingValidator[T]) ValidateUpdate(ctx context.Context, oldObj, newObj T) (admission.Warnings, error) {
	return c.count(c.validator.ValidateUpdate(ctx, oldObj, newObj))
}

func (c *countingValidator[T]) ValidateDelete(ctx context.Context, obj T) (admission.Warnings, error) {
	return c.count(c.validator.ValidateDelete(ctx, obj))
}
