package holds

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/internal/text"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// retryElsewhere is how often a replica looks again at a hold whose parts
// wait for a spoke whose stream is not open here: when the spoke
// reconnects, to this replica or another, its part is sent within it.
const retryElsewhere = 2 * time.Second

// Deliverer runs on every replica: for each FleetHold it sends the parts
// whose spokes stream to this replica what they need (deliveryOf: the hold
// while the hold is Pending, the release once it is Failed or Released)
// and records each spoke's answer in the FleetHold as it comes, under its
// resourceVersion. Whichever replica answers CreateHold or ReleaseHold
// only writes the FleetHold and waits on it. Requests run in the
// background, one per part and kind at a time, so that a spoke that does
// not answer delays neither the others nor the release that follows.
type Deliverer struct {
	Coordinator *Coordinator
}

// SetupWithManager runs the Deliverer on mgr on every replica (no leader
// election: each replica delivers to its own streams); its cache must hold
// FleetHolds of the hub's namespace.
func (d *Deliverer) SetupWithManager(mgr ctrl.Manager) error {
	ns := d.Coordinator.opts.Namespace
	return builder.ControllerManagedBy(mgr).
		Named("fleethold-delivery").
		For(&imperatorv1alpha1.FleetHold{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == ns
		}))).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), RecoverPanic: ptr.To(true), MaxConcurrentReconciles: 4}).
		Complete(d)
}

// answered is a spoke's answer to one part's request.
type answered struct {
	cluster string
	release bool
	resp    *federationv1.HoldResponse
	err     error
}

// Reconcile starts the requests this replica's spokes need for the hold
// and looks again while any part still needs one (the answers' writes
// bring it back sooner).
func (d *Deliverer) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	c := d.Coordinator
	fh := &imperatorv1alpha1.FleetHold{}
	if err := c.opts.Client.Get(ctx, req.NamespacedName, fh); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if c.deliver(ctx, fh) {
		return reconcile.Result{RequeueAfter: retryElsewhere}, nil
	}
	return reconcile.Result{}, nil
}

// deliver starts the requests the spokes streaming to this replica need
// for fh (the Deliverer, and the replica that wrote fh, at once) and
// reports whether any part still needs one.
func (c *Coordinator) deliver(ctx context.Context, fh *imperatorv1alpha1.FleetHold) (needed bool) {
	now := c.opts.Clock.Now()
	for _, cl := range fh.Status.Clusters {
		need := deliveryOf(fh, cl, now)
		if need == deliverNothing {
			continue
		}
		needed = true
		if connected, _ := c.opts.Spokes.HoldStream(cl.Cluster); connected {
			c.send(ctx, fh, cl, need == deliverRelease, now)
		}
	}
	return needed
}

// send asks cl's spoke, in the background, unless the same request of
// this booking is on its way already, and records the answer.
func (c *Coordinator) send(ctx context.Context, fh *imperatorv1alpha1.FleetHold, cl imperatorv1alpha1.FleetHoldCluster, release bool, now time.Time) {
	key := fmt.Sprintf("%s/%s/%t", fh.UID, cl.Cluster, release)
	c.mu.Lock()
	if c.inFlight[key] {
		c.mu.Unlock()
		return
	}
	c.inFlight[key] = true
	c.mu.Unlock()
	fh = fh.DeepCopy()
	ctx = context.WithoutCancel(ctx)
	go func() {
		defer func() {
			c.mu.Lock()
			delete(c.inFlight, key)
			c.mu.Unlock()
		}()
		deadline := now.Add(c.opts.Deadline)
		askCtx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		resp, err := c.opts.Spokes.RequestHold(askCtx, cl.Cluster, holdRequest(fh, cl, release, now, deadline))
		if err != nil && !errors.Is(err, ErrHoldsUnsupported) {
			ctrl.LoggerFrom(ctx).V(1).Info("A spoke did not answer a hold request", "fleetHold", fh.Name, "cluster", cl.Cluster, "release", release, "err", err.Error())
			return // asked again at the next look
		}
		writeCtx, cancel := context.WithTimeout(ctx, c.opts.Deadline)
		defer cancel()
		if err := c.record(writeCtx, fh, []answered{{cluster: cl.Cluster, release: release, resp: resp, err: err}}); err != nil {
			ctrl.LoggerFrom(ctx).Info("Could not record a spoke's answer", "fleetHold", fh.Name, "cluster", cl.Cluster, "err", err.Error())
			return
		}
		c.recorded(fh.UID)
	}()
}

// record writes the answers into the parts of the hold read as fh,
// reading it again after a conflict; nothing when the hold was replaced.
func (c *Coordinator) record(ctx context.Context, fh *imperatorv1alpha1.FleetHold, answers []answered) error {
	for attempt := 0; ; attempt++ {
		current := &imperatorv1alpha1.FleetHold{}
		if err := c.opts.Client.Get(ctx, client.ObjectKeyFromObject(fh), current); err != nil {
			return client.IgnoreNotFound(err)
		}
		if current.UID != fh.UID {
			return nil
		}
		changed := current.DeepCopy()
		for _, a := range answers {
			for i := range changed.Status.Clusters {
				if cl := &changed.Status.Clusters[i]; cl.Cluster == a.cluster {
					applyAnswer(cl, changed.Status.Phase, a)
				}
			}
		}
		err := c.patchStatus(ctx, changed, current)
		if apierrors.IsConflict(err) && attempt < 10 {
			continue
		}
		if err != nil {
			return fmt.Errorf("recording the spokes' answers in fleet hold %q: %w", fh.Name, err)
		}
		ctrl.LoggerFrom(ctx).V(1).Info("Recorded the spokes' answers", "fleetHold", fh.Name, "phase", changed.Status.Phase, "answers", len(answers))
		return nil
	}
}

// applyAnswer records a in cl, a part of a hold in phase. An answer that
// did not come (the stream ended or moved, the deadline passed) changes
// nothing: the part is sent again where the spoke's stream is, and a
// Pending hold's coordinator decides TimedOut at its deadline.
func applyAnswer(cl *imperatorv1alpha1.FleetHoldCluster, phase imperatorv1alpha1.FleetHoldPhase, a answered) {
	switch {
	case errors.Is(a.err, ErrHoldsUnsupported):
		if a.release {
			// An agent without holds holds nothing.
			cl.Result, cl.Held = ResultReleased, 0
			return
		}
		cl.Result, cl.Reason, cl.Message = ResultRefused, ReasonHoldsUnsupported, a.err.Error()
		return
	case a.err != nil:
		return
	}
	resp := a.resp
	if a.release {
		switch resp.GetResult() {
		case federationv1.HoldResult_HOLD_RESULT_RELEASED, federationv1.HoldResult_HOLD_RESULT_HELD:
			cl.Result, cl.Held = ResultReleased, 0
			if cl.Reason == "" || cl.Reason == ReasonOtherFailed {
				cl.Message = "released"
				if cl.Reason == ReasonOtherFailed {
					cl.Message = "held, then released because another cluster could not hold its part"
				}
			}
		default:
			cl.Message = text.Truncate("the release failed, asked again: "+resp.GetReason()+": "+resp.GetMessage(), 1024)
		}
		return
	}
	cl.Held = resp.GetHeld()
	cl.Reason, cl.Message = resp.GetReason(), text.Truncate(resp.GetMessage(), 1024)
	switch resp.GetResult() {
	case federationv1.HoldResult_HOLD_RESULT_HELD:
		cl.Result = ResultHeld
		if phase == imperatorv1alpha1.FleetHoldFailed || phase == imperatorv1alpha1.FleetHoldReleased {
			// Late: the hold ended meanwhile; the part is released next.
			cl.Reason, cl.Message = ReasonOtherFailed, "held after the hold ended; released"
		}
	case federationv1.HoldResult_HOLD_RESULT_TIMED_OUT:
		cl.Result = ResultTimedOut
	default:
		cl.Result = ResultRefused
	}
}

// holdRequest is the HoldRequest of cl's part of fh, sent at now. The
// spoke reads durations only (valid_for, answer_within), so the two clocks
// are never compared; valid_until and deadline are still set, on the hub's
// clock, for agents that predate the durations.
func holdRequest(fh *imperatorv1alpha1.FleetHold, cl imperatorv1alpha1.FleetHoldCluster, release bool, now, deadline time.Time) *federationv1.HoldRequest {
	return &federationv1.HoldRequest{
		Name: fh.Name, Group: cl.Group, Type: cl.Type, Count: cl.Count,
		ValidUntil: timestamppb.New(fh.Spec.ValidUntil.Time), Deadline: timestamppb.New(deadline),
		ValidFor:     durationpb.New(fh.Spec.ValidUntil.Sub(now)),
		AnswerWithin: durationpb.New(deadline.Sub(now)),
		Booking:      string(fh.UID),
		Release:      release, FleetHold: fh.Namespace + "/" + fh.Name, Namespaces: fh.Spec.Namespaces,
	}
}
