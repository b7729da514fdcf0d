package metrics

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"gomodules.xyz/jsonpatch/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

func TestClassifyNamesWhatTheUserSaw(t *testing.T) {
	cases := map[string]struct {
		resp                    admission.Response
		wantOutcome, wantReason string
	}{
		"injected guest":  {resp: admission.Patched("", jsonpatch.Operation{Operation: "add", Path: "/metadata/labels/x", Value: "y"}), wantOutcome: OutcomeAllowed, wantReason: "Patched"},
		"not a guest":     {resp: admission.Allowed("not a guest pod"), wantOutcome: OutcomeAllowed, wantReason: "Unchanged"},
		"no machine type": {resp: admission.Denied("no Machine serves type x"), wantOutcome: OutcomeDenied, wantReason: "Forbidden"},
		"undecodable pod": {resp: admission.Errored(http.StatusBadRequest, errors.New("decoding")), wantOutcome: OutcomeError, wantReason: "BadRequest"},
		"cache failed":    {resp: admission.Errored(http.StatusInternalServerError, errors.New("cache")), wantOutcome: OutcomeError, wantReason: "InternalError"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			outcome, reason := Classify(tc.resp)
			if outcome != tc.wantOutcome || reason != tc.wantReason {
				t.Errorf("Classify = %s/%s, want %s/%s", outcome, reason, tc.wantOutcome, tc.wantReason)
			}
		})
	}
}

// fakeValidator answers every call with err.
type fakeValidator struct{ err error }

func (f fakeValidator) ValidateCreate(context.Context, *imperatorv1alpha1.Machine) (admission.Warnings, error) {
	return nil, f.err
}
func (f fakeValidator) ValidateUpdate(context.Context, *imperatorv1alpha1.Machine, *imperatorv1alpha1.Machine) (admission.Warnings, error) {
	return nil, f.err
}
func (f fakeValidator) ValidateDelete(context.Context, *imperatorv1alpha1.Machine) (admission.Warnings, error) {
	return nil, f.err
}

func TestValidatorCountsInvalidMachinesApartFromItsOwnFailures(t *testing.T) {
	count := func(outcome, reason string) float64 {
		return testutil.ToFloat64(admissions.WithLabelValues(MachineValidator, outcome, reason))
	}
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: imperatorv1alpha1.GroupVersion.Group, Kind: "Machine"}, "m",
		field.ErrorList{field.Invalid(field.NewPath("spec", "machineTypes"), "x", "bad")})
	before := map[string]float64{"allowed": count(OutcomeAllowed, "Unchanged"), "denied": count(OutcomeDenied, "Invalid"), "error": count(OutcomeError, "InternalError")}
	ctx := context.Background()
	m := &imperatorv1alpha1.Machine{}
	_, _ = Validator[*imperatorv1alpha1.Machine](MachineValidator, fakeValidator{}).ValidateCreate(ctx, m)
	_, _ = Validator[*imperatorv1alpha1.Machine](MachineValidator, fakeValidator{err: invalid}).ValidateUpdate(ctx, m, m)
	_, err := Validator[*imperatorv1alpha1.Machine](MachineValidator, fakeValidator{err: errors.New("listing Machines: cache not synced")}).ValidateCreate(ctx, m)
	if err == nil {
		t.Fatal("the wrapper swallowed the validator's error")
	}
	for outcome, reason := range map[string]string{"allowed": "Unchanged", "denied": "Invalid", "error": "InternalError"} {
		if got := count(outcome, reason) - before[outcome]; got != 1 {
			t.Errorf("imperator_spoke_webhook_admissions_total{webhook=machine-validator,outcome=%s,reason=%s} grew by %v, want 1", outcome, reason, got)
		}
	}
}

func TestHandlerCountsEachAnswer(t *testing.T) {
	before := testutil.ToFloat64(admissions.WithLabelValues(PodInjector, OutcomeDenied, "Forbidden"))
	h := Handler(PodInjector, admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return admission.Denied("no Machine of group g serves type t")
	}))
	if resp := h.Handle(context.Background(), admission.Request{}); resp.Allowed {
		t.Fatal("the wrapper changed the answer")
	}
	if got := testutil.ToFloat64(admissions.WithLabelValues(PodInjector, OutcomeDenied, "Forbidden")) - before; got != 1 {
		t.Errorf("denials counted %v, want 1", got)
	}
}
