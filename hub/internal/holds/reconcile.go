package holds

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/imperator-federation/imperator/internal/text"

	"google.golang.org/protobuf/types/known/durationpb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// Timing of the reconciliation of the spokes' holds with the FleetHolds.
const (
	// reconcileInterval is how often each replica compares the holds its
	// spokes report with the FleetHolds.
	reconcileInterval = 10 * time.Second
	// confirmAfter is how long a mismatch must last before it is acted on:
	// a report or a FleetHold write on its way must not look like one.
	confirmAfter = 10 * time.Second
)

// ReasonNoLongerHeld says that the spoke no longer reports the part's
// CapacityHold (deleted, failed, or its units taken back).
const ReasonNoLongerHeld = "NoLongerHeld"

// HubHoldReports are the hub holds the spokes whose streams are open on
// this replica report (*server.Server).
type HubHoldReports interface {
	HubHoldReports() map[string][]*federationv1.HubHold
}

// Reconciler runs on every replica and reconciles both ways, for the
// spokes that stream to it and report their hub holds:
//
//   - a CapacityHold the hub asked for that no live part of a FleetHold
//     owns (its FleetHold is gone or replaced, its part was released or
//     refused, or it was made after its FleetHold ended) is released;
//   - a Held part of a Held FleetHold whose spoke no longer reports its
//     CapacityHold fails the FleetHold: a fleet hold is all or nothing, so
//     the hub does not re-plan the lost part; the other parts are released
//     (the Deliverers) and the holder books again. Its part says
//     NoLongerHeld.
//
// Each mismatch is acted on once it lasted confirmAfter, so an orphan is
// released within reconcileInterval + confirmAfter (+ a pass) of the report
// that shows it, well within a minute. validUntil remains the backstop.
type Reconciler struct {
	Coordinator *Coordinator
	Reports     HubHoldReports
	// seen is when each mismatch was first seen (only the Start goroutine
	// uses it).
	seen map[string]time.Time
}

// NeedLeaderElection is false: every replica reconciles the spokes on its
// streams.
func (r *Reconciler) NeedLeaderElection() bool { return false }

// Start reconciles every reconcileInterval until ctx ends.
func (r *Reconciler) Start(ctx context.Context) error {
	ticker := time.NewTicker(reconcileInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			if err := r.Reconcile(ctx); err != nil {
				ctrl.LoggerFrom(ctx).Info("Could not reconcile the spokes' holds", "err", err.Error())
			}
		}
	}
}

// mismatches found by one pass.
type mismatches struct {
	// orphans are hub holds to release, by cluster.
	orphans map[string][]*federationv1.HubHold
	// lost are the FleetHolds with Held parts their spokes no longer have,
	// by FleetHold name, with those clusters.
	lost map[string][]string
}

// findMismatches compares the reports with the FleetHolds of namespace.
func findMismatches(namespace string, reports map[string][]*federationv1.HubHold, list []imperatorv1alpha1.FleetHold) mismatches {
	byUID := map[string]*imperatorv1alpha1.FleetHold{}
	byName := map[string]*imperatorv1alpha1.FleetHold{}
	for i := range list {
		byUID[string(list[i].UID)] = &list[i]
		byName[list[i].Name] = &list[i]
	}
	out := mismatches{orphans: map[string][]*federationv1.HubHold{}, lost: map[string][]string{}}
	for cluster, held := range reports {
		for _, h := range held {
			if !strings.HasPrefix(h.GetFleetHold(), namespace+"/") {
				continue // another hub's
			}
			if h.GetBooking() == "" {
				// Made by a hub that predates bookings: only a hold whose
				// FleetHold is gone can be judged.
				if byName[h.GetName()] == nil {
					out.orphans[cluster] = append(out.orphans[cluster], h)
				}
				continue
			}
			if !owned(byUID[h.GetBooking()], cluster) {
				out.orphans[cluster] = append(out.orphans[cluster], h)
			}
		}
	}
	for i := range list {
		fh := &list[i]
		if fh.Status.Phase != imperatorv1alpha1.FleetHoldHeld {
			continue
		}
		for _, cl := range fh.Status.Clusters {
			held, reporting := reports[cl.Cluster]
			if !reporting || cl.Result != ResultHeld {
				continue
			}
			found := false
			for _, h := range held {
				if h.GetBooking() == string(fh.UID) && h.GetName() == fh.Name {
					found = true
				}
			}
			if !found {
				out.lost[fh.Name] = append(out.lost[fh.Name], cl.Cluster)
			}
		}
	}
	return out
}

// owned reports whether fh (nil: none) has a live part on cluster: one
// that is being asked for, is held, or is being released by a Deliverer.
func owned(fh *imperatorv1alpha1.FleetHold, cluster string) bool {
	if fh == nil {
		return false
	}
	for _, cl := range fh.Status.Clusters {
		if cl.Cluster != cluster {
			continue
		}
		switch fh.Status.Phase {
		case imperatorv1alpha1.FleetHoldPending, "":
			return true
		case imperatorv1alpha1.FleetHoldHeld:
			return cl.Result == ResultHeld
		case imperatorv1alpha1.FleetHoldFailed, imperatorv1alpha1.FleetHoldReleased:
			return releasable(cl) // the Deliverer releases it
		}
	}
	return false
}

// Reconcile makes one pass (see Reconciler).
func (r *Reconciler) Reconcile(ctx context.Context) error {
	c := r.Coordinator
	reports := r.Reports.HubHoldReports()
	if len(reports) == 0 {
		r.seen = nil
		return nil
	}
	list := &imperatorv1alpha1.FleetHoldList{}
	if err := c.opts.Client.List(ctx, list, client.InNamespace(c.opts.Namespace)); err != nil {
		return fmt.Errorf("listing fleet holds: %w", err)
	}
	found := findMismatches(c.opts.Namespace, reports, list.Items)
	now := c.opts.Clock.Now()
	seen := map[string]time.Time{}
	confirmed := func(key string) bool {
		first, ok := r.seen[key]
		if !ok {
			first = now
		}
		seen[key] = first
		return now.Sub(first) >= confirmAfter
	}
	var errs []error
	for cluster, orphans := range found.orphans {
		for _, h := range orphans {
			if confirmed("orphan/" + cluster + "/" + h.GetName() + "/" + h.GetBooking()) {
				errs = append(errs, r.release(ctx, cluster, h))
			}
		}
	}
	for name, clusters := range found.lost {
		var sure []string
		for _, cluster := range clusters {
			if confirmed("lost/" + name + "/" + cluster) {
				sure = append(sure, cluster)
			}
		}
		if len(sure) > 0 {
			errs = append(errs, r.failLost(ctx, name, sure))
		}
	}
	r.seen = seen
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// release asks cluster to release the orphaned hub hold h.
func (r *Reconciler) release(ctx context.Context, cluster string, h *federationv1.HubHold) error {
	c := r.Coordinator
	ctx, cancel := context.WithTimeout(ctx, c.opts.Deadline)
	defer cancel()
	req := &federationv1.HoldRequest{Name: h.GetName(), FleetHold: h.GetFleetHold(), Booking: h.GetBooking(), Release: true,
		Group: h.GetGroup(), Type: h.GetType(), Count: h.GetCount(), AnswerWithin: durationpb.New(c.opts.Deadline)}
	resp, err := c.opts.Spokes.RequestHold(ctx, cluster, req)
	if err != nil {
		return fmt.Errorf("releasing orphaned hold %q on cluster %q: %w", h.GetName(), cluster, err)
	}
	ctrl.LoggerFrom(ctx).Info("Released a spoke hold no fleet hold owns", "cluster", cluster, "hold", h.GetName(), "booking", h.GetBooking(), "result", resp.GetResult().String())
	return nil
}

// failLost fails the Held FleetHold called name whose parts on clusters are
// no longer held.
func (r *Reconciler) failLost(ctx context.Context, name string, clusters []string) error {
	c := r.Coordinator
	fh := &imperatorv1alpha1.FleetHold{}
	if err := c.opts.Client.Get(ctx, client.ObjectKey{Namespace: c.opts.Namespace, Name: name}, fh); err != nil {
		return client.IgnoreNotFound(err)
	}
	if fh.Status.Phase != imperatorv1alpha1.FleetHoldHeld {
		return nil
	}
	before := fh.DeepCopy()
	for i := range fh.Status.Clusters {
		if cl := &fh.Status.Clusters[i]; cl.Result == ResultHeld && slices.Contains(clusters, cl.Cluster) {
			cl.Result, cl.Held, cl.Reason = ResultRefused, 0, ReasonNoLongerHeld
			cl.Message = "the spoke no longer holds this part: its CapacityHold was deleted, failed or lost its units"
		}
	}
	fh.Status.Phase = imperatorv1alpha1.FleetHoldPending // decide from the parts as they are now
	decide(fh, false, func(string) bool { return false })
	fh.Status.Message = text.Truncate("a cluster no longer holds its part, so the hold is Failed and the others released (book again): "+strings.Join(clusters, ", "), 4096)
	if err := c.patchStatus(ctx, fh, before); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("recording fleet hold %q as Failed: %w", name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Fleet hold failed: a part is no longer held", "fleetHold", name, "clusters", clusters)
	return nil
}
