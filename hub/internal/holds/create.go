package holds

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/capacity"
	"github.com/imperator-federation/imperator/hub/internal/store"
)

// Spec is a validated CreateHold request.
type Spec struct {
	Name       string
	Request    capacity.Request
	TTL        time.Duration
	Namespaces []string
	Creator    string
}

// Create places spec's units, writes the FleetHold with one unanswered
// part per chosen cluster, waits for the replicas holding those clusters'
// streams to record the spokes' answers (Deliverer) and decides the phase:
// Held, or Failed when a part was refused or not answered by the deadline
// (the Deliverers then release the parts that were held). It returns the
// FleetHold as it ended, which a concurrent Release may have made Released.
// ErrAlreadyExists when a hold of that name is Pending or Held, or ended
// with a part whose release no spoke confirmed yet (a Failed, Released or
// Expired one is replaced otherwise); ErrDoesNotFit, with why, when the
// fleet has too few free units (nothing is written).
func (c *Coordinator) Create(ctx context.Context, spec Spec) (*imperatorv1alpha1.FleetHold, error) {
	ended, err := c.endedHold(ctx, spec.Name)
	if err != nil {
		return nil, err
	}
	now := c.opts.Clock.Now()
	parts, note, err := c.place(ctx, spec, now)
	if err != nil {
		return nil, err
	}
	fh, err := c.writeHold(ctx, spec, ended, now)
	if err != nil {
		return nil, err
	}
	answered := c.awaitAnswers(fh.UID)
	defer c.forgetAnswers(fh.UID)
	if err := c.markPending(ctx, fh, parts, note); err != nil {
		return nil, err
	}
	// The parts whose spokes stream here go out at once.
	c.deliver(ctx, fh)
	return c.conclude(ctx, spec, fh, parts, answered)
}

// endedHold returns the hold named name when it ended and may be replaced,
// nil when there is none; ErrAlreadyExists when it is Pending or Held, or
// ended with a part whose release no spoke confirmed yet.
func (c *Coordinator) endedHold(ctx context.Context, name string) (*imperatorv1alpha1.FleetHold, error) {
	old, err := c.Get(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !final(old.Status.Phase) {
		return nil, fmt.Errorf("%w: fleet hold %q is %s; release it first", ErrAlreadyExists, name, old.Status.Phase)
	}
	if left := unreleased(old, c.opts.Clock.Now()); len(left) > 0 {
		return nil, fmt.Errorf("%w: fleet hold %q is %s but its parts on %s are not released yet (released when their spokes answer); retry",
			ErrAlreadyExists, name, old.Status.Phase, strings.Join(left, ", "))
	}
	return old, nil
}

// place chooses the clusters for spec's units, without the clusters that
// recently refused or did not answer unless the units fit only with them,
// and says so in note; ErrDoesNotFit, with why, when they fit nowhere.
func (c *Coordinator) place(ctx context.Context, spec Spec, now time.Time) (parts []part, note string, _ error) {
	recent := &imperatorv1alpha1.FleetHoldList{}
	if err := c.opts.Client.List(ctx, recent, client.InNamespace(c.opts.Namespace)); err != nil {
		return nil, "", fmt.Errorf("listing fleet holds: %w", err)
	}
	avoid := avoided(recent.Items, now)
	fell := false
	parts, why := plan(without(c.opts.Store.List(), avoid), spec.Request, now)
	if parts == nil && len(avoid) > 0 {
		fell = true
		parts, why = plan(c.opts.Store.List(), spec.Request, now)
	}
	if parts == nil {
		return nil, "", fmt.Errorf("%w: %s", ErrDoesNotFit, why)
	}
	return parts, avoidanceNote(avoid, fell), nil
}

// writeHold writes the FleetHold of spec, valid from now for its TTL,
// replacing ended (only as read: another replica may have replaced it
// meanwhile with one it is coordinating).
func (c *Coordinator) writeHold(ctx context.Context, spec Spec, ended *imperatorv1alpha1.FleetHold, now time.Time) (*imperatorv1alpha1.FleetHold, error) {
	if ended != nil {
		err := c.opts.Client.Delete(ctx, ended, client.Preconditions{UID: &ended.UID, ResourceVersion: &ended.ResourceVersion})
		switch {
		case apierrors.IsConflict(err):
			return nil, fmt.Errorf("%w: fleet hold %q changed while it was being replaced; retry", ErrAlreadyExists, spec.Name)
		case err != nil && !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("deleting the ended fleet hold %q: %w", spec.Name, err)
		}
	}
	validUntil := metav1.NewTime(now.Add(spec.TTL).Truncate(time.Second))
	fh := &imperatorv1alpha1.FleetHold{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Namespace: c.opts.Namespace},
		Spec: imperatorv1alpha1.FleetHoldSpec{
			Count: spec.Request.Count, SameCluster: !spec.Request.Spread, ValidUntil: validUntil,
			Namespaces: spec.Namespaces, Creator: spec.Creator,
		},
	}
	if s := spec.Request.Shape; s != nil {
		fh.Spec.Shape = shapeOf(s)
	} else {
		fh.Spec.MachineType = &imperatorv1alpha1.FleetHoldMachineType{Group: spec.Request.Group, Type: spec.Request.Type}
	}
	if err := c.opts.Client.Create(ctx, fh); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("%w: fleet hold %q was created meanwhile", ErrAlreadyExists, spec.Name)
		}
		return nil, fmt.Errorf("creating fleet hold %q: %w", spec.Name, err)
	}
	return fh, nil
}

// markPending writes fh Pending with one unanswered part per chosen
// cluster: phase one, what the Deliverers of every replica act on.
func (c *Coordinator) markPending(ctx context.Context, fh *imperatorv1alpha1.FleetHold, parts []part, note string) error {
	before := fh.DeepCopy()
	fh.Status.Phase = imperatorv1alpha1.FleetHoldPending
	fh.Status.Message = note
	for _, p := range parts {
		fh.Status.Clusters = append(fh.Status.Clusters, imperatorv1alpha1.FleetHoldCluster{Cluster: p.cluster, Group: p.group, Type: p.typ, Count: p.count})
	}
	if err := c.patchStatus(ctx, fh, before); err != nil {
		return fmt.Errorf("recording fleet hold %q as Pending: %w", fh.Name, err)
	}
	return nil
}

// conclude waits for every part's answer, or the deadline, then decides:
// Held (once this replica's figures show the held units), or Failed and
// phase two, abort: it answers once the Deliverers released what was held
// (or the deadline passed: they keep trying). The decision is written under
// the FleetHold's resourceVersion: when a late answer or a Release lands
// first, it decides again from what is there now.
func (c *Coordinator) conclude(ctx context.Context, spec Spec, fh *imperatorv1alpha1.FleetHold, parts []part, answered <-chan struct{}) (*imperatorv1alpha1.FleetHold, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("fleetHold", spec.Name)
	deadline := c.opts.Clock.Now().Add(c.opts.Deadline)
	ticker := time.NewTicker(c.opts.Poll)
	defer ticker.Stop()
	for {
		current := &imperatorv1alpha1.FleetHold{}
		if err := c.opts.Client.Get(ctx, client.ObjectKeyFromObject(fh), current); err != nil {
			return nil, fmt.Errorf("reading fleet hold %q: %w", spec.Name, err)
		}
		if current.UID != fh.UID {
			return nil, fmt.Errorf("%w: fleet hold %q was replaced meanwhile", ErrAlreadyExists, spec.Name)
		}
		decided := current.DeepCopy()
		if decide(decided, !c.opts.Clock.Now().Before(deadline), c.connectedNowhere) {
			if !equality.Semantic.DeepEqual(decided.Status, current.Status) {
				err := c.patchStatus(ctx, decided, current)
				if apierrors.IsConflict(err) {
					continue
				}
				if err != nil {
					return nil, fmt.Errorf("recording fleet hold %q as %s: %w", spec.Name, decided.Status.Phase, err)
				}
			}
			log.Info("Fleet hold decided", "phase", decided.Status.Phase, "clusters", len(parts), "count", spec.Request.Count, "message", decided.Status.Message)
			if decided.Status.Phase == imperatorv1alpha1.FleetHoldHeld {
				c.awaitUsage(ctx, parts)
				return decided, nil
			}
			c.deliver(ctx, decided)
			return c.awaitRelease(ctx, spec.Name, c.opts.Clock.Now().Add(c.opts.Deadline))
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the spokes' answers to fleet hold %q (the hub fails it after %s unless it is decided): %w", spec.Name, c.orphanAfter(), ctx.Err())
		case <-ticker.C:
		case <-answered:
		}
	}
}

// awaitAnswers returns a channel that receives when this replica records
// an answer to the hold with uid.
func (c *Coordinator) awaitAnswers(uid types.UID) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan struct{}, 1)
	c.answers[uid] = ch
	return ch
}

func (c *Coordinator) forgetAnswers(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.answers, uid)
}

// recorded wakes the Create waiting on this replica for the hold with uid.
func (c *Coordinator) recorded(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case c.answers[uid] <- struct{}{}:
	default:
	}
}

// DefaultUsageWait bounds how long a Held answer waits for this replica's
// figures to show the held units: a part delivered by another replica
// reaches this one's store when that replica persists the spoke's
// inventory (at most persist.DefaultInterval apart).
const DefaultUsageWait = 5 * time.Second

// awaitUsage waits, up to Options.UsageWait, until this replica's figures
// count at least every part's units held, so that the usage a holder reads
// right after CreateHold answered shows them, on whichever replica the
// parts were delivered.
func (c *Coordinator) awaitUsage(ctx context.Context, parts []part) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.UsageWait)
	defer cancel()
	ticker := time.NewTicker(c.opts.Poll)
	defer ticker.Stop()
	for {
		shown := true
		for _, p := range parts {
			shown = shown && c.heldInStore(p) >= p.count
		}
		if shown {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// heldInStore is how many units of p's type this replica's figures count
// held on p's cluster.
func (c *Coordinator) heldInStore(p part) int32 {
	cl, ok := c.opts.Store.Get(p.cluster)
	if !ok {
		return 0
	}
	var held int32
	for _, m := range cl.Machines {
		if m.GetGroup() != p.group {
			continue
		}
		for _, t := range m.GetTypes() {
			if t.GetName() == p.typ {
				held += t.GetUsage().GetHeld()
			}
		}
	}
	return held
}

// connectedNowhere reports whether no replica has the cluster's stream
// open, as the store (shared through the hub's API) last saw it.
func (c *Coordinator) connectedNowhere(cluster string) bool {
	if connected, _ := c.opts.Spokes.HoldStream(cluster); connected {
		return false
	}
	cl, ok := c.opts.Store.Get(cluster)
	return !ok || cl.Replica == "" || cl.Liveness != store.LivenessAvailable
}

func shapeOf(s *capacity.Shape) *imperatorv1alpha1.FleetHoldShape {
	out := &imperatorv1alpha1.FleetHoldShape{GPUCount: s.GPUs, GPUProduct: s.GPUProduct, GPUFamily: s.GPUFamily}
	if s.MilliCPU > 0 {
		out.CPU = fmt.Sprintf("%dm", s.MilliCPU)
	}
	if s.MemoryBytes > 0 {
		out.Memory = fmt.Sprint(s.MemoryBytes)
	}
	return out
}
