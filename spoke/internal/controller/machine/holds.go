package machine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	mchandler "sigs.k8s.io/multicluster-runtime/pkg/handler"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/controller/capacityhold"
)

// Capacity holds. The Machine controller decides and accounts the
// CapacityHolds of its group (the capacityhold package doc says why it and
// not a controller of their own): planHolds runs capacityhold.PlanType per
// machine type that has holds, writes the holds' statuses, and hands the
// plan to the reservations (replicas) and the line (holdLine) of the type.
// A type without holds, or whose holds are all Failed or Expired, runs the
// plain queue. A guest claims a hold by the hold's UID, which the pod
// injector stamped on it (capacityhold.Claims), never by the hold's name:
// the type's holding guests and gated guests go to PlanType as they are,
// and a guest that names a hold without its UID is an ordinary guest there.
// Holds whose booking ended are deleted by the capacityhold controller after
// a retention; their guests keep their units as ordinary used units.

// holdConflictRetry is how soon a reconcile whose hold status write lost a
// race (a stale hold) runs again; the hold's own update queued it too.
const holdConflictRetry = 500 * time.Millisecond

// planHolds decides and accounts the holds of the Machine's group, type by
// type, writes their statuses, and sets the type's usage.held and, while a
// hold is active, its reservation replicas and holdLine. It returns when the
// reconcile must run again (at the earliest validUntil of an active hold;
// zero when never), and whether a hold's status could not be written
// because the hold changed since the cache gave it: then nothing may move
// on a decision that is not recorded, and the reconcile runs again soon.
func (r *Reconciler) planHolds(ctx context.Context, c client.Client, recorder events.EventRecorder,
	machine *imperatorv1alpha1.Machine, group string, usage map[string]*typeUsage, served []string, now time.Time) (time.Duration, bool, error) {
	list := &imperatorv1alpha1.CapacityHoldList{}
	if err := c.List(ctx, list, client.MatchingFields{capacityhold.MachineGroupIndex: group}); err != nil {
		return 0, false, fmt.Errorf("listing the CapacityHolds of machine group %s: %w", group, err)
	}
	byType := map[string][]*imperatorv1alpha1.CapacityHold{}
	for i := range list.Items {
		if hold := &list.Items[i]; hold.DeletionTimestamp.IsZero() {
			byType[hold.Spec.MachineType] = append(byType[hold.Spec.MachineType], hold)
		}
	}
	var next time.Duration
	unsettled := false
	var errs []error
	for _, t := range machine.Spec.MachineTypes {
		u, holds := usage[t.Name], byType[t.Name]
		if u == nil || len(holds) == 0 {
			continue
		}
		plan := capacityhold.PlanType(capacityhold.TypeInput{
			Machine:     machine.Name,
			MachineType: t.Name,
			Available:   t.Available,
			Served:      slices.Contains(served, t.Name),
			Used:        u.Used,
			Granted:     u.granted,
			Leaving:     u.leaving,
			Lost:        u.offPool + u.unschedulable,
			LostNodes:   u.offPoolNodes,
			// Only reservation pods that exist and can hold a unit back
			// what holds hold.
			ReservationPods:  u.reservationPods - int32(len(u.stuck)),
			LostReservations: u.offPool + u.unschedulableAny,
			Holds:            holds,
			Holding:          u.holding,
			Gated:            u.gated,
			Now:              now,
		})
		// In decision order, stopping at the first write that fails: the
		// decisions after it counted on it.
		for _, p := range plan.Holds {
			if _, err := capacityhold.Write(ctx, c, recorder, p.Hold, p); err != nil {
				unsettled = true
				if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
					errs = append(errs, err)
				}
				break
			}
		}
		u.Held = plan.Held
		if !plan.Active {
			continue
		}
		u.replicas = plan.Replicas
		u.holds = &holdLine{claims: plan.Claims, holdFree: plan.HoldFree, ordinaryFree: plan.OrdinaryFree, held: plan.Held}
		// A moment past validUntil, so that the hold has expired by then.
		if d := plan.NextExpiry.Sub(now) + 100*time.Millisecond; next == 0 || d < next {
			next = max(d, 100*time.Millisecond)
		}
	}
	return next, unsettled, errors.Join(errs...)
}

// holdHandler maps a CapacityHold to the Machines of its spec.machineGroup.
func (r *Reconciler) holdHandler(name multicluster.ClusterName, cl cluster.Cluster) mchandler.EventHandler {
	return groupHandler(name, cl, func(obj client.Object) string {
		if hold, ok := obj.(*imperatorv1alpha1.CapacityHold); ok {
			return hold.Spec.MachineGroup
		}
		return ""
	}, nil)
}

// holdsNow is the instant the holds' validUntil is compared with
// (Options.Clock, the system clock when the Reconciler was made without
// complete).
func (r *Reconciler) holdsNow() time.Time {
	if r.opts.Clock == nil {
		return time.Now()
	}
	return r.opts.Clock.Now()
}
