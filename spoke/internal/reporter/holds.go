package reporter

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	"github.com/imperator-federation/imperator/spoke/internal/controller/capacityhold"
)

// The hub's fleet holds: on a HoldRequest the reporter creates (or deletes)
// the CapacityHold named after the fleet hold and answers once the Machine
// controller said Provisioned or Failed, by the request's deadline.
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=capacityholds,verbs=get;list;watch;create;delete

// holdCapability is the Hello capability that tells the hub this agent
// answers HoldRequests (the hub's server.HoldCapability).
const holdCapability = "holds"

// Bounds of a HoldRequest's handling.
const (
	// holdPoll is how often the CapacityHold's status is read while waiting.
	holdPoll = 100 * time.Millisecond
	// holdAnswerMargin is taken off the hub's answer_within so that the
	// answer reaches the hub before it stops waiting.
	holdAnswerMargin = 500 * time.Millisecond
	// defaultHoldWait is the hub's wait when the request does not say
	// (answer_within is newer than the hubs' fixed 10 s), and maxHoldWait
	// bounds whatever it says.
	defaultHoldWait = 10 * time.Second
	maxHoldWait     = time.Minute
	// maxHoldCount is the CapacityHold CRD's bound of spec.count.
	maxHoldCount = 10000
)

// Reasons of refusals decided by the reporter rather than the CapacityHold.
const (
	holdReasonInvalidRequest = "InvalidRequest"
	holdReasonNameTaken      = "NameTaken"
	holdReasonAPIError       = "APIError"
	holdReasonNotProvisioned = "NotProvisionedInTime"
)

// accountingWait bounds how long a Provisioned hold waits for its Machines'
// usage to count it (accounted) before it is answered Held anyway.
const accountingWait = 2 * time.Second

// holds carries out HoldRequests against the cluster's API server.
type holds struct {
	client client.Client
	// cache is what the reporter's inventory reads: a hold is answered Held
	// once the Machines there account for it (accounted).
	cache client.Reader
	now   func() time.Time
}

// answer carries out req and says how it went; it never takes longer than
// the request's deadline (less holdAnswerMargin).
func (h holds) answer(ctx context.Context, req *federationv1.HoldRequest) *federationv1.HoldResponse {
	resp := &federationv1.HoldResponse{RequestId: req.GetRequestId()}
	arrived := h.now()
	if err := validateHoldRequest(req, arrived); err != nil {
		return refusalf(holdReasonInvalidRequest, "%v", err).to(resp)
	}
	wait := holdWait(req)
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()

	if req.GetRelease() {
		return h.release(ctx, req, resp)
	}
	hold, refused := h.ensure(ctx, req, arrived)
	if refused != nil {
		return refused.to(resp)
	}
	return h.await(ctx, hold, wait, resp)
}

// refusal is why a hold request is refused.
type refusal struct{ reason, message string }

func refusalf(reason, format string, args ...any) *refusal {
	return &refusal{reason: reason, message: fmt.Sprintf(format, args...)}
}

// to makes resp say r.
func (r *refusal) to(resp *federationv1.HoldResponse) *federationv1.HoldResponse {
	resp.Result, resp.Reason, resp.Message = federationv1.HoldResult_HOLD_RESULT_REFUSED, r.reason, r.message
	return resp
}

// ensure returns the CapacityHold of req: the one of its booking that
// exists, or a new one (replacing an ended hold of the same name).
func (h holds) ensure(ctx context.Context, req *federationv1.HoldRequest, arrived time.Time) (*imperatorv1alpha1.CapacityHold, *refusal) {
	hold := &imperatorv1alpha1.CapacityHold{}
	err := h.client.Get(ctx, client.ObjectKey{Name: req.GetName()}, hold)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, refusalf(holdReasonAPIError, "reading CapacityHold %q: %v", req.GetName(), err)
	}
	var existing *imperatorv1alpha1.CapacityHold
	if err == nil {
		existing = hold
	}
	switch useOfName(existing, req, h.now()) {
	case nameOurs:
		return hold, nil
	case nameTaken:
		return nil, refusalf(holdReasonNameTaken, "a CapacityHold %q of another booking exists in the cluster (fleet hold %q, %d of %s/%s)",
			hold.Name, hold.Spec.FleetHold, hold.Spec.Count, hold.Spec.MachineGroup, hold.Spec.MachineType)
	case nameEnded:
		// That very hold only (UID precondition): one made since is live.
		if err := h.client.Delete(ctx, hold, client.Preconditions{UID: &hold.UID}); err != nil && !apierrors.IsNotFound(err) {
			if apierrors.IsConflict(err) {
				return nil, refusalf(holdReasonNameTaken, "CapacityHold %q was created again while its ended booking was being replaced", hold.Name)
			}
			return nil, refusalf(holdReasonAPIError, "deleting CapacityHold %q, whose booking ended: %v", hold.Name, err)
		}
	}
	hold = &imperatorv1alpha1.CapacityHold{
		ObjectMeta: metav1.ObjectMeta{Name: req.GetName()},
		Spec: imperatorv1alpha1.CapacityHoldSpec{
			MachineGroup: req.GetGroup(), MachineType: req.GetType(), Count: req.GetCount(),
			ValidUntil: metav1.NewTime(holdValidUntil(req, arrived)), FleetHold: req.GetFleetHold(),
			Namespaces: req.GetNamespaces(),
		},
	}
	if b := req.GetBooking(); b != "" {
		hold.Annotations = map[string]string{BookingAnnotation: b}
	}
	if err := h.client.Create(ctx, hold); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, refusalf(holdReasonNameTaken, "a CapacityHold %q of another booking was created meanwhile", req.GetName())
		}
		return nil, refusalf(holdReasonAPIError, "creating CapacityHold %q: %v", req.GetName(), err)
	}
	return hold, nil
}

// await waits for the Machine controller's verdict on hold, then for the
// Machines' usage to show it: the hub must not learn that a hold is Held
// before the figures the reporter sends it say so. When ctx ends first, a
// hold not Provisioned yet is deleted and answered timed out.
func (h holds) await(ctx context.Context, hold *imperatorv1alpha1.CapacityHold, wait time.Duration, resp *federationv1.HoldResponse) *federationv1.HoldResponse {
	ticker := time.NewTicker(holdPoll)
	defer ticker.Stop()
	provisioned := false
	var provisionedAt time.Time
	for {
		if err := h.client.Get(ctx, client.ObjectKeyFromObject(hold), hold); err == nil {
			if c := meta.FindStatusCondition(hold.Status.Conditions, imperatorv1alpha1.HoldConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
				h.remove(hold)
				return refusalf(c.Reason, "%s", c.Message).to(resp)
			}
			provisioned = meta.IsStatusConditionTrue(hold.Status.Conditions, imperatorv1alpha1.HoldConditionProvisioned)
			if provisioned && provisionedAt.IsZero() {
				provisionedAt = h.now()
			}
			// The usage lags by one Machine status write; should it not
			// converge (another hold of the type changing meanwhile), the
			// hold is Held all the same after accountingWait.
			if provisioned && (h.accounted(ctx, hold) || h.now().Sub(provisionedAt) >= accountingWait) {
				return held(hold, resp)
			}
		}
		select {
		case <-ctx.Done():
			if provisioned {
				// Held, though the Machines' usage lags: the units are
				// kept all the same, and the next report carries them.
				return held(hold, resp)
			}
			// Not held in time: give the units back, so that nothing is
			// left held of a fleet hold the hub fails.
			h.remove(hold)
			resp.Result, resp.Reason = federationv1.HoldResult_HOLD_RESULT_TIMED_OUT, holdReasonNotProvisioned
			resp.Message = fmt.Sprintf("CapacityHold %q was not Provisioned within %s; deleted it", hold.Name, wait.Round(time.Millisecond))
			if c := meta.FindStatusCondition(hold.Status.Conditions, imperatorv1alpha1.HoldConditionProvisioned); c != nil && c.Message != "" {
				resp.Message += ": " + c.Message
			}
			return resp
		case <-ticker.C:
		}
	}
}

// held makes resp say that hold holds its units.
func held(hold *imperatorv1alpha1.CapacityHold, resp *federationv1.HoldResponse) *federationv1.HoldResponse {
	resp.Result, resp.Held = federationv1.HoldResult_HOLD_RESULT_HELD, hold.Status.Held+hold.Status.Claimed
	return resp
}

// accounted tells whether the Machines of hold's group report, for its type,
// as many held units as the type's active holds keep. The Machine controller
// writes the holds' statuses first and the Machine's usage after, in the
// same reconcile. (A held unit a gated guest is about to take is not counted
// held by the Machine: until that guest is let in, accounted is false and
// answer falls back on its deadline.)
func (h holds) accounted(ctx context.Context, hold *imperatorv1alpha1.CapacityHold) bool {
	group, machineType := hold.Spec.MachineGroup, hold.Spec.MachineType
	var all imperatorv1alpha1.CapacityHoldList
	if err := h.cache.List(ctx, &all); err != nil {
		return false
	}
	now := h.now()
	var want int32
	for i := range all.Items {
		o := &all.Items[i]
		if o.Spec.MachineGroup == group && o.Spec.MachineType == machineType && o.DeletionTimestamp.IsZero() &&
			capacityhold.PhaseOf(o, now) == capacityhold.PhaseActive {
			want += o.Status.Held
		}
	}
	var machines imperatorv1alpha1.MachineList
	if err := h.cache.List(ctx, &machines, client.MatchingLabels{imperatorv1alpha1.MachineGroupKey: group}); err != nil {
		return false
	}
	var got int32
	for i := range machines.Items {
		for _, am := range machines.Items[i].Status.AvailableMachines {
			if am.Name == machineType {
				got += am.Usage.Held
			}
		}
	}
	return got == want
}

// release deletes the fleet hold's CapacityHold; one of another booking is
// left alone.
func (h holds) release(ctx context.Context, req *federationv1.HoldRequest, resp *federationv1.HoldResponse) *federationv1.HoldResponse {
	hold := &imperatorv1alpha1.CapacityHold{}
	err := h.client.Get(ctx, client.ObjectKey{Name: req.GetName()}, hold)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		resp.Result, resp.Reason, resp.Message = federationv1.HoldResult_HOLD_RESULT_REFUSED, holdReasonAPIError, fmt.Sprintf("reading CapacityHold %q: %v", req.GetName(), err)
		return resp
	case hold.Spec.FleetHold != req.GetFleetHold():
		resp.Result, resp.Reason = federationv1.HoldResult_HOLD_RESULT_REFUSED, holdReasonNameTaken
		resp.Message = fmt.Sprintf("CapacityHold %q belongs to another booking (fleet hold %q); left alone", hold.Name, hold.Spec.FleetHold)
		return resp
	case req.GetBooking() != "" && hold.Annotations[BookingAnnotation] != req.GetBooking():
		// A later booking of the same fleet hold's name: this booking
		// holds nothing here, and that one's units are left alone.
		resp.Message = fmt.Sprintf("CapacityHold %q is of another booking of the fleet hold; left alone", hold.Name)
	default:
		if err := h.client.Delete(ctx, hold, client.Preconditions{UID: &hold.UID}); err != nil && !apierrors.IsNotFound(err) {
			resp.Result, resp.Reason, resp.Message = federationv1.HoldResult_HOLD_RESULT_REFUSED, holdReasonAPIError, fmt.Sprintf("deleting CapacityHold %q: %v", hold.Name, err)
			return resp
		}
	}
	resp.Result = federationv1.HoldResult_HOLD_RESULT_RELEASED
	return resp
}

// remove deletes a hold that failed or came too late, with a short
// deadline of its own (the request's may be over).
func (h holds) remove(hold *imperatorv1alpha1.CapacityHold) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = h.client.Delete(ctx, hold, client.Preconditions{UID: &hold.UID})
}

// BookingAnnotation on a CapacityHold the hub asked for carries the
// booking it was made for (HoldRequest.booking, the FleetHold's UID).
const BookingAnnotation = "imperator.tenzen-y.io/fleet-hold-booking"

// holdWait is how long the spoke works on req before it answers with what
// it knows: the hub's answer_within less holdAnswerMargin. It is a duration
// from the request's arrival; the hub's clock is never read.
func holdWait(req *federationv1.HoldRequest) time.Duration {
	wait := defaultHoldWait
	if d := req.GetAnswerWithin(); d != nil {
		wait = d.AsDuration()
	}
	return max(min(wait, maxHoldWait)-holdAnswerMargin, 0)
}

// holdValidUntil is the CapacityHold's spec.validUntil for req arriving at
// arrived, on the spoke's clock: arrived plus valid_for, in the whole
// seconds the API stores. From a hub that predates valid_for, its
// valid_until.
func holdValidUntil(req *federationv1.HoldRequest, arrived time.Time) time.Time {
	if d := req.GetValidFor(); d != nil {
		return arrived.Add(d.AsDuration()).Truncate(time.Second)
	}
	return req.GetValidUntil().AsTime().Truncate(time.Second)
}

// sameBooking reports whether the existing CapacityHold is the one req asks
// for: a retried request (or one another hub replica sends again), not an
// earlier booking of the same name (a fleet hold recreated under its name
// while the spoke kept the old one). The booking's identity is
// req.booking; a hub that predates it is matched by validUntil instead.
func sameBooking(hold *imperatorv1alpha1.CapacityHold, req *federationv1.HoldRequest) bool {
	same := hold.Spec.FleetHold == req.GetFleetHold() && hold.Spec.MachineGroup == req.GetGroup() &&
		hold.Spec.MachineType == req.GetType() && hold.Spec.Count == req.GetCount() &&
		sets.New(hold.Spec.Namespaces...).Equal(sets.New(req.GetNamespaces()...))
	if b := req.GetBooking(); b != "" {
		return same && hold.Annotations[BookingAnnotation] == b
	}
	return same && hold.Spec.ValidUntil.Time.Equal(req.GetValidUntil().AsTime().Truncate(time.Second))
}

// nameUse is what a HoldRequest finds under its name.
type nameUse int

const (
	// nameFree: no CapacityHold has the name; the request creates it.
	nameFree nameUse = iota
	// nameOurs: the CapacityHold made for this very booking (a retried
	// request); the request waits for its verdict.
	nameOurs
	// nameEnded: a CapacityHold of an earlier booking whose booking ended
	// (Failed or Expired). Its units are back (its running guests keep
	// theirs as ordinary guests), so it makes way: the request deletes it
	// and creates its own, at the first try.
	nameEnded
	// nameTaken: a live CapacityHold (Pending or Active) of another
	// booking; its units are another team's, and the request is refused.
	nameTaken
)

// useOfName decides what a HoldRequest does with the CapacityHold existing
// under its name (nil when there is none).
func useOfName(existing *imperatorv1alpha1.CapacityHold, req *federationv1.HoldRequest, now time.Time) nameUse {
	switch {
	case existing == nil:
		return nameFree
	case sameBooking(existing, req):
		return nameOurs
	}
	if _, ended := capacityhold.EndedAt(existing, now); ended {
		return nameEnded
	}
	return nameTaken
}

// validateHoldRequest checks a HoldRequest against the CapacityHold's
// bounds; the error names the field.
func validateHoldRequest(req *federationv1.HoldRequest, now time.Time) error {
	if msgs := validation.IsDNS1123Label(req.GetName()); len(msgs) > 0 {
		return fmt.Errorf("name %q: %s", req.GetName(), strings.Join(msgs, "; "))
	}
	if req.GetRelease() {
		return nil
	}
	for _, f := range []struct{ field, value string }{{"group", req.GetGroup()}, {"type", req.GetType()}} {
		if msgs := validation.IsDNS1123Label(f.value); len(msgs) > 0 {
			return fmt.Errorf("%s %q: %s", f.field, f.value, strings.Join(msgs, "; "))
		}
	}
	if req.GetCount() < 1 || req.GetCount() > maxHoldCount {
		return fmt.Errorf("count %d: want 1 to %d", req.GetCount(), maxHoldCount)
	}
	switch d := req.GetValidFor(); {
	case d != nil && d.AsDuration() < time.Second:
		return fmt.Errorf("valid_for %s: want at least 1s", d.AsDuration())
	case d != nil:
	// A hub that predates valid_for sends only its clock's valid_until.
	case req.GetValidUntil() == nil || !req.GetValidUntil().AsTime().After(now):
		return fmt.Errorf("valid_until %v: must be in the future", req.GetValidUntil().AsTime())
	}
	if len(req.GetFleetHold()) > 253 {
		return fmt.Errorf("fleet_hold: longer than 253 characters")
	}
	if len(req.GetNamespaces()) > maxHoldNamespaces {
		return fmt.Errorf("namespaces: %d, at most %d", len(req.GetNamespaces()), maxHoldNamespaces)
	}
	for i, ns := range req.GetNamespaces() {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			return fmt.Errorf("namespaces[%d] %q: %s", i, ns, strings.Join(msgs, "; "))
		}
	}
	return nil
}

// maxHoldNamespaces is the CapacityHold's bound on spec.namespaces.
const maxHoldNamespaces = 64
