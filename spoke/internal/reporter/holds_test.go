package reporter

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

func TestValidateHoldRequest(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	valid := func() *federationv1.HoldRequest {
		return &federationv1.HoldRequest{Name: "train-42", Group: "team-a", Type: "compute-xlarge", Count: 4,
			ValidUntil: timestamppb.New(now.Add(time.Hour)), FleetHold: "imperator-system/train-42"}
	}
	cases := map[string]struct {
		change    func(*federationv1.HoldRequest)
		wantField string
	}{
		"valid":                            {change: func(*federationv1.HoldRequest) {}},
		"release needs only the name":      {change: func(r *federationv1.HoldRequest) { *r = federationv1.HoldRequest{Name: "x", Release: true} }},
		"name guests cannot quote":         {change: func(r *federationv1.HoldRequest) { r.Name = "Train_42" }, wantField: "name"},
		"no group":                         {change: func(r *federationv1.HoldRequest) { r.Group = "" }, wantField: "group"},
		"bad type":                         {change: func(r *federationv1.HoldRequest) { r.Type = "X" }, wantField: "type"},
		"zero count":                       {change: func(r *federationv1.HoldRequest) { r.Count = 0 }, wantField: "count"},
		"count over the CRD's maximum":     {change: func(r *federationv1.HoldRequest) { r.Count = 10001 }, wantField: "count"},
		"valid_until in the past":          {change: func(r *federationv1.HoldRequest) { r.ValidUntil = timestamppb.New(now.Add(-time.Second)) }, wantField: "valid_until"},
		"no valid_until":                   {change: func(r *federationv1.HoldRequest) { r.ValidUntil = nil }, wantField: "valid_until"},
		"valid_for instead of valid_until": {change: func(r *federationv1.HoldRequest) { r.ValidUntil, r.ValidFor = nil, durationpb.New(time.Hour) }},
		"valid_for wins over a valid_until a skewed clock sees past": {change: func(r *federationv1.HoldRequest) {
			r.ValidUntil, r.ValidFor = timestamppb.New(now.Add(-time.Minute)), durationpb.New(time.Hour)
		}},
		"valid_for under a second":     {change: func(r *federationv1.HoldRequest) { r.ValidFor = durationpb.New(time.Millisecond) }, wantField: "valid_for"},
		"namespaces":                   {change: func(r *federationv1.HoldRequest) { r.Namespaces = []string{"team-a", "team-b"} }},
		"a namespace that is no label": {change: func(r *federationv1.HoldRequest) { r.Namespaces = []string{"team-a", "Team_B"} }, wantField: "namespaces[1]"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := valid()
			tc.change(req)
			err := validateHoldRequest(req, now)
			switch {
			case tc.wantField == "" && err != nil:
				t.Errorf("validateHoldRequest() = %v, want nil", err)
			case tc.wantField != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.wantField+" ")):
				t.Errorf("validateHoldRequest() = %v, want an error naming %s", err, tc.wantField)
			}
		})
	}
}

// TestARetriedHoldRequestIsTheSameBookingAndAnEarlierOneIsNot: the spoke
// answers a retried request from the CapacityHold it made for it, but not
// from a hold of the same name left by an earlier booking (other
// validUntil or namespaces): that one is another team's units.
func TestARetriedHoldRequestIsTheSameBookingAndAnEarlierOneIsNot(t *testing.T) {
	until := time.Date(2026, 5, 1, 13, 0, 0, 0, time.UTC)
	req := &federationv1.HoldRequest{Name: "train-42", Group: "team-a", Type: "compute-xlarge", Count: 4,
		ValidUntil: timestamppb.New(until.Add(300 * time.Millisecond)), FleetHold: "imperator-system/train-42", Namespaces: []string{"team-a", "team-b"}}
	made := &imperatorv1alpha1.CapacityHold{Spec: imperatorv1alpha1.CapacityHoldSpec{
		MachineGroup: "team-a", MachineType: "compute-xlarge", Count: 4, ValidUntil: metav1.NewTime(until),
		FleetHold: "imperator-system/train-42", Namespaces: []string{"team-b", "team-a"},
	}}
	if !sameBooking(made, req) {
		t.Errorf("sameBooking(the hold made for this request) = false, want true")
	}
	earlier := made.DeepCopy()
	earlier.Spec.ValidUntil = metav1.NewTime(until.Add(-time.Hour))
	if sameBooking(earlier, req) {
		t.Errorf("sameBooking(hold of an earlier booking with another validUntil) = true, want false")
	}
	open := made.DeepCopy()
	open.Spec.Namespaces = nil
	if sameBooking(open, req) {
		t.Errorf("sameBooking(hold open to every namespace, for a request limited to two) = true, want false")
	}
	// A hub that sends the booking: the validUntil a retry computes on the
	// spoke's clock differs, the booking does not.
	booked := proto.Clone(req).(*federationv1.HoldRequest)
	booked.Booking, booked.ValidFor, booked.ValidUntil = "uid-1", durationpb.New(time.Hour), nil
	mine := made.DeepCopy()
	mine.Annotations = map[string]string{BookingAnnotation: "uid-1"}
	if !sameBooking(mine, booked) {
		t.Errorf("sameBooking(the hold made for this booking, retried a second later) = false, want true")
	}
	other := made.DeepCopy()
	other.Annotations = map[string]string{BookingAnnotation: "uid-0"}
	if sameBooking(other, booked) || sameBooking(made, booked) {
		t.Errorf("sameBooking(hold of another or of no booking) = true, want false")
	}
}

func TestUseOfName(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	req := &federationv1.HoldRequest{Name: "train-42", Group: "team-a", Type: "compute-xlarge", Count: 4,
		ValidUntil: timestamppb.New(now.Add(time.Hour)), FleetHold: "imperator-system/train-42"}
	ours := func() *imperatorv1alpha1.CapacityHold {
		return &imperatorv1alpha1.CapacityHold{Spec: imperatorv1alpha1.CapacityHoldSpec{
			MachineGroup: "team-a", MachineType: "compute-xlarge", Count: 4, ValidUntil: metav1.NewTime(now.Add(time.Hour)),
			FleetHold: "imperator-system/train-42",
		}}
	}
	earlier := func(validUntil time.Time, conditions ...string) *imperatorv1alpha1.CapacityHold {
		h := ours()
		h.Spec.ValidUntil = metav1.NewTime(validUntil)
		for _, c := range conditions {
			meta.SetStatusCondition(&h.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: "Test"})
		}
		return h
	}
	cases := map[string]struct {
		existing *imperatorv1alpha1.CapacityHold
		want     nameUse
	}{
		"no hold of the name: created":                        {want: nameFree},
		"the hold made for this booking (a retry): waited on": {existing: ours(), want: nameOurs},
		"an earlier booking that expired makes way": {
			existing: earlier(now.Add(-time.Minute), imperatorv1alpha1.HoldConditionAccepted, imperatorv1alpha1.HoldConditionBookingExpired), want: nameEnded},
		"an earlier booking past validUntil, BookingExpired not written yet, makes way": {
			existing: earlier(now.Add(-time.Second), imperatorv1alpha1.HoldConditionAccepted), want: nameEnded},
		"an earlier booking that failed makes way": {
			existing: earlier(now.Add(30*time.Minute), imperatorv1alpha1.HoldConditionAccepted, imperatorv1alpha1.HoldConditionFailed), want: nameEnded},
		"a live booking of the name keeps it": {
			existing: earlier(now.Add(30*time.Minute), imperatorv1alpha1.HoldConditionAccepted, imperatorv1alpha1.HoldConditionProvisioned), want: nameTaken},
		"a booking not decided yet keeps its name": {existing: earlier(now.Add(30 * time.Minute)), want: nameTaken},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := useOfName(tc.existing, req, now); got != tc.want {
				t.Errorf("useOfName = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestReusingTheNameOfAnEndedHoldWorksAtTheFirstTry: the hub books a fleet
// hold under a name whose earlier CapacityHold is still on the spoke; when
// that one's booking ended it is replaced and the new booking is Held at
// once, while a live one of another booking is left alone and the request
// refused with NameTaken.
func TestReusingTheNameOfAnEndedHoldWorksAtTheFirstTry(t *testing.T) {
	// Whole seconds, as the API stores validUntil.
	now := time.Now().Truncate(time.Second)
	req := &federationv1.HoldRequest{Name: "train-42", Group: "team-a", Type: "compute-xlarge", Count: 4,
		ValidUntil: timestamppb.New(now.Add(time.Hour)), FleetHold: "imperator-system/train-42",
		Deadline: timestamppb.New(now.Add(10 * time.Second))}
	earlier := func(validUntil time.Time, conditions ...string) *imperatorv1alpha1.CapacityHold {
		h := &imperatorv1alpha1.CapacityHold{
			ObjectMeta: metav1.ObjectMeta{Name: "train-42", UID: "uid-earlier"},
			Spec: imperatorv1alpha1.CapacityHoldSpec{MachineGroup: "team-a", MachineType: "compute-xlarge", Count: 2,
				ValidUntil: metav1.NewTime(validUntil), FleetHold: "imperator-system/train-42"},
		}
		for _, c := range conditions {
			meta.SetStatusCondition(&h.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: "Test"})
		}
		return h
	}
	cases := map[string]struct {
		existing       *imperatorv1alpha1.CapacityHold
		wantResult     federationv1.HoldResult
		wantReason     string
		wantValidUntil time.Time
	}{
		"an expired hold of the name": {
			existing:   earlier(now.Add(-time.Minute), imperatorv1alpha1.HoldConditionAccepted, imperatorv1alpha1.HoldConditionBookingExpired),
			wantResult: federationv1.HoldResult_HOLD_RESULT_HELD, wantValidUntil: req.GetValidUntil().AsTime(),
		},
		"a failed hold of the name": {
			existing:   earlier(now.Add(time.Minute), imperatorv1alpha1.HoldConditionAccepted, imperatorv1alpha1.HoldConditionFailed),
			wantResult: federationv1.HoldResult_HOLD_RESULT_HELD, wantValidUntil: req.GetValidUntil().AsTime(),
		},
		"a live hold of the name": {
			existing:   earlier(now.Add(time.Minute), imperatorv1alpha1.HoldConditionAccepted, imperatorv1alpha1.HoldConditionProvisioned),
			wantResult: federationv1.HoldResult_HOLD_RESULT_REFUSED, wantReason: holdReasonNameTaken, wantValidUntil: now.Add(time.Minute),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			machine := &imperatorv1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "team-a-machine",
				Labels: map[string]string{imperatorv1alpha1.MachineGroupKey: "team-a"}}}
			machine.Status.AvailableMachines = []imperatorv1alpha1.AvailableMachine{{Name: "compute-xlarge", Usage: imperatorv1alpha1.Usage{Held: 4}}}
			// The Machine controller's verdict on the hold of this request:
			// every unit held, as the Machine's usage already says.
			decide := interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if err := c.Get(ctx, key, obj, opts...); err != nil {
					return err
				}
				hold, ok := obj.(*imperatorv1alpha1.CapacityHold)
				if !ok || !sameBooking(hold, req) || meta.IsStatusConditionTrue(hold.Status.Conditions, imperatorv1alpha1.HoldConditionProvisioned) {
					return nil
				}
				for _, c := range []string{imperatorv1alpha1.HoldConditionAccepted, imperatorv1alpha1.HoldConditionProvisioned} {
					meta.SetStatusCondition(&hold.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: "Test"})
				}
				hold.Status.Held = hold.Spec.Count
				return c.Update(ctx, hold)
			}}
			objects := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(tc.existing, machine).WithInterceptorFuncs(decide).Build()
			h := holds{client: objects, cache: objects, now: time.Now}

			resp := h.answer(context.Background(), req)
			if resp.GetResult() != tc.wantResult || resp.GetReason() != tc.wantReason {
				t.Fatalf("answer = %v %q (%s), want %v %q", resp.GetResult(), resp.GetReason(), resp.GetMessage(), tc.wantResult, tc.wantReason)
			}
			var got imperatorv1alpha1.CapacityHold
			if err := objects.Get(context.Background(), client.ObjectKey{Name: "train-42"}, &got); err != nil {
				t.Fatal(err)
			}
			if !got.Spec.ValidUntil.Time.Equal(tc.wantValidUntil) {
				t.Errorf("CapacityHold train-42 is valid until %s, want %s", got.Spec.ValidUntil.Time, tc.wantValidUntil)
			}
		})
	}
}

// TestASkewedSpokeClockHoldsForTheDurationTheHubAsked: the spoke's clock is
// a minute ahead of or behind the hub's. The hub's request carries
// durations (and, for older agents, its own clock's instants); the spoke
// holds the units for valid_for on its own clock and answers within
// answer_within, whatever the skew.
func TestASkewedSpokeClockHoldsForTheDurationTheHubAsked(t *testing.T) {
	for name, skew := range map[string]time.Duration{"a minute ahead": time.Minute, "a minute behind": -time.Minute, "in step": 0} {
		t.Run(name, func(t *testing.T) {
			hubNow := time.Now()
			spokeNow := func() time.Time { return time.Now().Add(skew) }
			req := &federationv1.HoldRequest{Name: "train-42", Group: "team-a", Type: "compute-xlarge", Count: 4,
				FleetHold: "imperator-system/train-42", Booking: "uid-1",
				ValidUntil: timestamppb.New(hubNow.Add(time.Hour)), Deadline: timestamppb.New(hubNow.Add(10 * time.Second)),
				ValidFor: durationpb.New(time.Hour), AnswerWithin: durationpb.New(10 * time.Second)}
			objects := provisioningClient(t, req)
			h := holds{client: objects, cache: objects, now: spokeNow}

			arrived := spokeNow()
			resp := h.answer(context.Background(), req)
			if resp.GetResult() != federationv1.HoldResult_HOLD_RESULT_HELD {
				t.Fatalf("answer = %v %q (%s), want HELD", resp.GetResult(), resp.GetReason(), resp.GetMessage())
			}
			var got imperatorv1alpha1.CapacityHold
			if err := objects.Get(context.Background(), client.ObjectKey{Name: "train-42"}, &got); err != nil {
				t.Fatal(err)
			}
			if d := got.Spec.ValidUntil.Sub(arrived); d < time.Hour-2*time.Second || d > time.Hour+time.Second {
				t.Errorf("CapacityHold train-42 is valid for %s after the request arrived on the spoke's clock, want 1h", d)
			}
			if got.Annotations[BookingAnnotation] != "uid-1" {
				t.Errorf("CapacityHold train-42 annotations = %v, want the booking uid-1", got.Annotations)
			}
		})
	}
}

func TestHoldWait(t *testing.T) {
	cases := map[string]struct {
		req  *federationv1.HoldRequest
		want time.Duration
	}{
		"answer_within less the margin": {req: &federationv1.HoldRequest{AnswerWithin: durationpb.New(10 * time.Second)}, want: 9500 * time.Millisecond},
		"an older hub's fixed 10 s":     {req: &federationv1.HoldRequest{Deadline: timestamppb.New(time.Now().Add(-time.Hour))}, want: 9500 * time.Millisecond},
		"at most a minute":              {req: &federationv1.HoldRequest{AnswerWithin: durationpb.New(time.Hour)}, want: maxHoldWait - holdAnswerMargin},
		"never negative":                {req: &federationv1.HoldRequest{AnswerWithin: durationpb.New(100 * time.Millisecond)}, want: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := holdWait(tc.req); got != tc.want {
				t.Errorf("holdWait() = %s, want %s", got, tc.want)
			}
		})
	}
}

// provisioningClient is a fake API whose Machine controller provisions the
// CapacityHold made for req at once, with the Machine's usage saying so.
func provisioningClient(t *testing.T, req *federationv1.HoldRequest, existing ...client.Object) client.Client {
	t.Helper()
	machine := &imperatorv1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "team-a-machine",
		Labels: map[string]string{imperatorv1alpha1.MachineGroupKey: "team-a"}}}
	machine.Status.AvailableMachines = []imperatorv1alpha1.AvailableMachine{{Name: "compute-xlarge", Usage: imperatorv1alpha1.Usage{Held: req.GetCount()}}}
	decide := interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if err := c.Get(ctx, key, obj, opts...); err != nil {
			return err
		}
		hold, ok := obj.(*imperatorv1alpha1.CapacityHold)
		if !ok || !sameBooking(hold, req) || meta.IsStatusConditionTrue(hold.Status.Conditions, imperatorv1alpha1.HoldConditionProvisioned) {
			return nil
		}
		for _, c := range []string{imperatorv1alpha1.HoldConditionAccepted, imperatorv1alpha1.HoldConditionProvisioned} {
			meta.SetStatusCondition(&hold.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: "Test"})
		}
		hold.Status.Held = hold.Spec.Count
		return c.Update(ctx, hold)
	}}
	return fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(append(existing, machine)...).WithInterceptorFuncs(decide).Build()
}

// TestAReleaseOfAnEarlierBookingLeavesALaterOneAlone: a late release of a
// fleet hold's earlier booking must not delete the CapacityHold a later
// booking of the same name made.
func TestAReleaseOfAnEarlierBookingLeavesALaterOneAlone(t *testing.T) {
	later := &imperatorv1alpha1.CapacityHold{
		ObjectMeta: metav1.ObjectMeta{Name: "train-42", UID: "hold-2", Annotations: map[string]string{BookingAnnotation: "uid-2"}},
		Spec: imperatorv1alpha1.CapacityHoldSpec{MachineGroup: "team-a", MachineType: "compute-xlarge", Count: 2,
			ValidUntil: metav1.NewTime(time.Now().Add(time.Hour)), FleetHold: "imperator-system/train-42"},
	}
	objects := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(later).Build()
	h := holds{client: objects, cache: objects, now: time.Now}
	resp := h.answer(context.Background(), &federationv1.HoldRequest{Name: "train-42", Release: true,
		FleetHold: "imperator-system/train-42", Booking: "uid-1", AnswerWithin: durationpb.New(10 * time.Second)})
	if resp.GetResult() != federationv1.HoldResult_HOLD_RESULT_RELEASED {
		t.Errorf("answer = %v (%s), want RELEASED: the earlier booking holds nothing here", resp.GetResult(), resp.GetMessage())
	}
	if err := objects.Get(context.Background(), client.ObjectKey{Name: "train-42"}, &imperatorv1alpha1.CapacityHold{}); err != nil {
		t.Errorf("the later booking's CapacityHold: %v, want it left alone", err)
	}
}
