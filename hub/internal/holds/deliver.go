package holds

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/server"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// retryElsewhere is how often a replica looks again at a hold whose parts
// wait for a spoke whose stream is not open here: when the spoke
// reconnects, to this replica or another, its part is sent within it.
const retryElsewhere = 2 * time.Second

// Deliverer runs on every replica: for each FleetHold it sends the parts
// whose spokes stream to this replica what they need (deliveryOf: the hold
// while the hold is Pending, the release once it is Failed or Released)
// and records the spokes' answers in the FleetHold, under its
// resourceVersion. Whichever replica answers CreateHold or ReleaseHold
// only writes the FleetHold and waits on it.
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
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), RecoverPanic: ptr.To(true), MaxConcurrentReconciles: 8}).
		Complete(d)
}

// answered is a spoke's answer to one part's request.
type answered struct {
	cluster string
	release bool
	resp    *federationv1.HoldResponse
	err     error
}

// Reconcile sends this replica's spokes their parts of the hold and records
// their answers.
func (d *Deliverer) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	c := d.Coordinator
	fh := &imperatorv1alpha1.FleetHold{}
	if err := c.opts.Client.Get(ctx, req.NamespacedName, fh); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	now := c.opts.Clock.Now()
	var here []imperatorv1alpha1.FleetHoldCluster
	elsewhere := false
	for _, cl := range fh.Status.Clusters {
		if deliveryOf(fh, cl, now) == deliverNothing {
			continue
		}
		if connected, _ := c.opts.Spokes.HoldStream(cl.Cluster); connected {
			here = append(here, cl)
		} else {
			elsewhere = true
		}
	}
	var result reconcile.Result
	if elsewhere {
		result.RequeueAfter = retryElsewhere
	}
	if len(here) == 0 {
		return result, nil
	}

	answers, err := d.ask(ctx, fh, here, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	for _, a := range answers {
		if a.err != nil || (a.release && a.resp.GetResult() == federationv1.HoldResult_HOLD_RESULT_REFUSED) {
			result.RequeueAfter = retryElsewhere
		}
	}
	return result, nil
}

// ask sends each part its request at once and records each answer as it
// comes (a slow spoke does not delay the others' answers), up to the
// deadline.
func (d *Deliverer) ask(ctx context.Context, fh *imperatorv1alpha1.FleetHold, parts []imperatorv1alpha1.FleetHoldCluster, now time.Time) ([]answered, error) {
	c := d.Coordinator
	deadline := now.Add(c.opts.Deadline)
	askCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	out := make([]answered, len(parts))
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, cl := range parts {
		release := deliveryOf(fh, cl, now) == deliverRelease
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.opts.Spokes.RequestHold(askCtx, cl.Cluster, holdRequest(fh, cl, release, now, deadline))
			out[i] = answered{cluster: cl.Cluster, release: release, resp: resp, err: err}
			if err == nil || errors.Is(err, server.ErrHoldsUnsupported) {
				errs[i] = d.record(ctx, fh, out[i:i+1])
			}
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// record writes the answers into the parts of the hold read as fh,
// reading it again after a conflict; nothing when the hold was replaced.
func (d *Deliverer) record(ctx context.Context, fh *imperatorv1alpha1.FleetHold, answers []answered) error {
	c := d.Coordinator
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
	case errors.Is(a.err, server.ErrHoldsUnsupported):
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
			cl.Message = truncate("the release failed, asked again: "+resp.GetReason()+": "+resp.GetMessage(), 1024)
		}
		return
	}
	cl.Held = resp.GetHeld()
	cl.Reason, cl.Message = resp.GetReason(), truncate(resp.GetMessage(), 1024)
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
