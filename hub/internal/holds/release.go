package holds

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/internal/text"
)

// Release records the hold as Released (under its resourceVersion, so
// that a concurrent Create sees it) and waits, up to the deadline, for the
// Deliverers to confirm every part released. A part whose spoke is offline
// stays unconfirmed in the answer and is released when its spoke's stream
// is back on any replica. Releasing a Failed, Released or Expired hold
// changes no phase but waits the same way: its parts are released still.
func (c *Coordinator) Release(ctx context.Context, name string) (*imperatorv1alpha1.FleetHold, error) {
	deadline := c.opts.Clock.Now().Add(c.opts.Deadline)
	for {
		fh, err := c.Get(ctx, name)
		if err != nil {
			return nil, err
		}
		if final(fh.Status.Phase) {
			break
		}
		before := fh.DeepCopy()
		fh.Status.Phase = imperatorv1alpha1.FleetHoldReleased
		fh.Status.Message = ""
		if err := c.patchStatus(ctx, fh, before); apierrors.IsConflict(err) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("recording fleet hold %q as Released: %w", name, err)
		}
		ctrl.LoggerFrom(ctx).Info("Fleet hold released", "fleetHold", name)
		c.deliver(ctx, fh)
		break
	}
	return c.awaitRelease(ctx, name, deadline)
}

// awaitRelease waits until no part of the ended hold called name may still
// be held, or until deadline, and returns the hold as it is then; a part
// not confirmed released says so in its message (the Deliverers go on).
func (c *Coordinator) awaitRelease(ctx context.Context, name string, deadline time.Time) (*imperatorv1alpha1.FleetHold, error) {
	ticker := time.NewTicker(c.opts.Poll)
	defer ticker.Stop()
	var answered <-chan struct{}
	for {
		fh, err := c.Get(ctx, name)
		if err != nil {
			return nil, err
		}
		if answered == nil {
			answered = c.awaitAnswers(fh.UID)
			defer c.forgetAnswers(fh.UID)
		}
		left := unreleased(fh, c.opts.Clock.Now())
		if len(left) == 0 || !c.opts.Clock.Now().Before(deadline) {
			for i := range fh.Status.Clusters {
				if cl := &fh.Status.Clusters[i]; slices.Contains(left, cl.Cluster) {
					cl.Message = text.Truncate("release not confirmed yet: the hub asks again whenever the spoke's stream is up, until validUntil. "+cl.Message, 1024)
				}
			}
			return fh, nil
		}
		select {
		case <-ctx.Done():
			return fh, nil
		case <-ticker.C:
		case <-answered:
		}
	}
}
