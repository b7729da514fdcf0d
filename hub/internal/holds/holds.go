// Package holds owns the hub's fleet holds: bookings of units of a machine
// type (or shape) across the fleet (issue 19). It picks clusters with
// FindCapacity's ranking, runs the two-phase hold over the spokes' Report
// streams — every chosen spoke is asked to create a CapacityHold named like
// the fleet hold; when one refuses or does not answer by the deadline, the
// others are asked to release theirs and the fleet hold is Failed with each
// cluster's reason — and keeps every fleet hold as a FleetHold in the hub's
// namespace, so that a hub restart keeps them. The spokes' CapacityHolds
// live by their own validUntil whether the hub is up or not.
//
// Replicas. A HoldRequest can only go out on a Report stream, and each
// spoke's stream is open on one hub replica. The replica that answers
// CreateHold coordinates it; when a chosen spoke's stream is on another
// replica it answers Unavailable naming the cluster and the replica, before
// asking anyone (the caller retries; with one replica, or spokes behind one
// load-balanced address, that does not happen). Release asks the spokes
// whose streams are here and says which it could not reach: their parts end
// at validUntil.
package holds

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/capacity"
	"github.com/imperator-federation/imperator/hub/internal/server"
	"github.com/imperator-federation/imperator/hub/internal/store"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// FleetHolds in the hub's namespace.
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,namespace=imperator-system,resources=fleetholds,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,namespace=imperator-system,resources=fleetholds/status,verbs=get;patch

// DefaultDeadline is how long the hub waits for the spokes' answers.
const DefaultDeadline = 10 * time.Second

// Results of a cluster's part, as FleetHoldCluster.Result says them.
const (
	ResultHeld     = "Held"
	ResultRefused  = "Refused"
	ResultTimedOut = "TimedOut"
	ResultReleased = "Released"
)

// Reasons the hub gives for a cluster's part.
const (
	ReasonHoldsUnsupported = "HoldsUnsupported"
	ReasonStreamEnded      = "StreamEnded"
	ReasonNoAnswer         = "NoAnswer"
	ReasonNotConnected     = "NotConnected"
	ReasonOtherFailed      = "OtherClusterFailed"
)

// Errors the query service maps to status codes.
var (
	ErrAlreadyExists = errors.New("fleet hold exists")
	ErrNotFound      = errors.New("no such fleet hold")
	// ErrDoesNotFit: the fleet has too few free units; the error says why.
	ErrDoesNotFit = errors.New("the units do not fit")
	// ErrOtherReplica: a chosen spoke's stream is open on another replica.
	ErrOtherReplica = errors.New("a chosen spoke reports to another hub replica")
)

// Spokes sends HoldRequests over the spokes' Report streams (*server.Server).
type Spokes interface {
	// HoldStream reports whether the cluster's stream is open here.
	HoldStream(cluster string) (connected, supportsHolds bool)
	// RequestHold sends req and waits for the answer until ctx ends.
	RequestHold(ctx context.Context, cluster string, req *federationv1.HoldRequest) (*federationv1.HoldResponse, error)
}

// Options configure a Coordinator.
type Options struct {
	// Client reads and writes FleetHolds (uncached).
	Client    client.Client
	Namespace string
	Store     *store.Store
	Spokes    Spokes
	// Deadline bounds the wait for the spokes' answers (DefaultDeadline).
	Deadline time.Duration
	Clock    clock.PassiveClock
}

// Coordinator runs fleet holds.
type Coordinator struct {
	opts Options
	// mu serializes the holds of one name on this replica.
	mu      sync.Mutex
	running map[string]bool
}

// New returns a Coordinator.
func New(opts Options) *Coordinator {
	if opts.Deadline <= 0 {
		opts.Deadline = DefaultDeadline
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Coordinator{opts: opts, running: map[string]bool{}}
}

// Spec is a validated CreateHold request.
type Spec struct {
	Name       string
	Request    capacity.Request
	TTL        time.Duration
	Namespaces []string
	Creator    string
}

// Create places and holds spec's units (see the package documentation) and
// returns the FleetHold as it ended: Held or Failed. ErrAlreadyExists when
// a hold of that name is Pending or Held (a Failed, Released or Expired one
// is replaced); ErrDoesNotFit, with why, when the fleet has too few free
// units (nothing is written); ErrOtherReplica when a chosen spoke's stream
// is on another replica (nothing is written or asked).
func (c *Coordinator) Create(ctx context.Context, spec Spec) (*imperatorv1alpha1.FleetHold, error) {
	if !c.start(spec.Name) {
		return nil, fmt.Errorf("%w: fleet hold %q is being created", ErrAlreadyExists, spec.Name)
	}
	defer c.finish(spec.Name)
	log := ctrl.LoggerFrom(ctx).WithValues("fleetHold", spec.Name)

	var ended *imperatorv1alpha1.FleetHold
	if old, err := c.Get(ctx, spec.Name); err == nil {
		ended = old
		if !final(old.Status.Phase) {
			return nil, fmt.Errorf("%w: fleet hold %q is %s; release it first", ErrAlreadyExists, spec.Name, old.Status.Phase)
		}
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}

	now := c.opts.Clock.Now()
	parts, why := plan(c.opts.Store.List(), spec.Request, now)
	if parts == nil {
		return nil, fmt.Errorf("%w: %s", ErrDoesNotFit, why)
	}
	for _, p := range parts {
		if connected, _ := c.opts.Spokes.HoldStream(p.cluster); !connected {
			where := "another hub replica"
			if cl, ok := c.opts.Store.Get(p.cluster); ok && cl.Replica != "" {
				where = "hub replica " + cl.Replica
			}
			return nil, fmt.Errorf("%w: cluster %q reports to %s, not to this one; retry (a fleet hold is coordinated by the replica holding its spokes' streams)", ErrOtherReplica, p.cluster, where)
		}
	}

	// Replace the ended hold of the same name, only as read: another
	// replica may have replaced it meanwhile with one it is coordinating.
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
	pending := fh.DeepCopy()
	fh.Status.Phase = imperatorv1alpha1.FleetHoldPending
	for _, p := range parts {
		fh.Status.Clusters = append(fh.Status.Clusters, imperatorv1alpha1.FleetHoldCluster{Cluster: p.cluster, Group: p.group, Type: p.typ, Count: p.count})
	}
	if err := c.patchStatus(ctx, fh, pending); err != nil {
		return nil, fmt.Errorf("recording fleet hold %q as Pending: %w", spec.Name, err)
	}

	// Phase one: every chosen spoke holds its part, or says why not.
	answers := c.ask(ctx, fh, false)
	before := fh.DeepCopy()
	failed := false
	for i := range fh.Status.Clusters {
		fh.Status.Clusters[i] = answers[i]
		if answers[i].Result != ResultHeld {
			failed = true
		}
	}
	if !failed {
		fh.Status.Phase = imperatorv1alpha1.FleetHoldHeld
		log.Info("Fleet hold held", "clusters", len(parts), "count", spec.Request.Count)
	} else {
		// Phase two, abort: release what the others hold. A cluster that
		// did not answer is asked too (the spoke deletes its hold itself
		// once its deadline passed, but it may have answered late).
		fh.Status.Phase = imperatorv1alpha1.FleetHoldFailed
		var reasons []string
		for _, cl := range fh.Status.Clusters {
			if cl.Result != ResultHeld {
				reasons = append(reasons, fmt.Sprintf("%s: %s: %s", cl.Cluster, cl.Reason, cl.Message))
			}
		}
		fh.Status.Message = truncate("not every cluster could hold its part, nothing is held: "+strings.Join(reasons, "; "), 4096)
		released := c.ask(ctx, fh, true)
		for i := range fh.Status.Clusters {
			if fh.Status.Clusters[i].Result == ResultHeld {
				fh.Status.Clusters[i].Result = ResultReleased
				fh.Status.Clusters[i].Held = 0
				fh.Status.Clusters[i].Reason = ReasonOtherFailed
				fh.Status.Clusters[i].Message = "held, then released because another cluster could not hold its part"
				if released[i].Result != ResultReleased {
					fh.Status.Clusters[i].Message += "; the release was not confirmed (" + released[i].Message + "): the part ends at validUntil"
				}
			}
		}
		log.Info("Fleet hold failed", "reasons", fh.Status.Message)
	}
	if err := c.patchStatus(ctx, fh, before); err != nil {
		return nil, fmt.Errorf("recording fleet hold %q as %s: %w", spec.Name, fh.Status.Phase, err)
	}
	return fh, nil
}

// ask sends every cluster of fh its HoldRequest (release: the release) at
// once and waits for the answers up to the deadline; the answers are in the
// order of fh.Status.Clusters.
func (c *Coordinator) ask(ctx context.Context, fh *imperatorv1alpha1.FleetHold, release bool) []imperatorv1alpha1.FleetHoldCluster {
	deadline := c.opts.Clock.Now().Add(c.opts.Deadline)
	ctx, cancel := context.WithTimeout(ctx, c.opts.Deadline)
	defer cancel()
	out := make([]imperatorv1alpha1.FleetHoldCluster, len(fh.Status.Clusters))
	var wg sync.WaitGroup
	for i, cl := range fh.Status.Clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = c.askOne(ctx, fh, cl, release, deadline)
		}()
	}
	wg.Wait()
	return out
}

func (c *Coordinator) askOne(ctx context.Context, fh *imperatorv1alpha1.FleetHold, cl imperatorv1alpha1.FleetHoldCluster, release bool, deadline time.Time) imperatorv1alpha1.FleetHoldCluster {
	req := holdRequest(fh, cl, release, c.opts.Clock.Now(), deadline)
	resp, err := c.opts.Spokes.RequestHold(ctx, cl.Cluster, req)
	switch {
	case err == nil:
	case errors.Is(err, server.ErrHoldsUnsupported):
		cl.Result, cl.Reason, cl.Message = ResultRefused, ReasonHoldsUnsupported, err.Error()
		return cl
	case errors.Is(err, context.DeadlineExceeded):
		cl.Result, cl.Reason, cl.Message = ResultTimedOut, ReasonNoAnswer, fmt.Sprintf("the spoke did not answer within %s", c.opts.Deadline)
		return cl
	case errors.Is(err, server.ErrNotConnectedHere):
		cl.Result, cl.Reason, cl.Message = ResultRefused, ReasonNotConnected, err.Error()
		return cl
	default:
		cl.Result, cl.Reason, cl.Message = ResultRefused, ReasonStreamEnded, err.Error()
		return cl
	}
	cl.Held = resp.GetHeld()
	cl.Reason, cl.Message = resp.GetReason(), truncate(resp.GetMessage(), 1024)
	switch resp.GetResult() {
	case federationv1.HoldResult_HOLD_RESULT_HELD:
		cl.Result = ResultHeld
		if release {
			cl.Result = ResultReleased
		}
	case federationv1.HoldResult_HOLD_RESULT_RELEASED:
		cl.Result = ResultReleased
	case federationv1.HoldResult_HOLD_RESULT_TIMED_OUT:
		cl.Result = ResultTimedOut
	default:
		cl.Result = ResultRefused
	}
	return cl
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

// Get returns the fleet hold called name, with its phase brought up to date
// (see settle); ErrNotFound when there is none.
func (c *Coordinator) Get(ctx context.Context, name string) (*imperatorv1alpha1.FleetHold, error) {
	fh := &imperatorv1alpha1.FleetHold{}
	if err := c.opts.Client.Get(ctx, client.ObjectKey{Namespace: c.opts.Namespace, Name: name}, fh); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
		}
		return nil, fmt.Errorf("reading fleet hold %q: %w", name, err)
	}
	_ = c.settle(ctx, fh) // the answer has the phase; the Expiry controller retries the write
	return fh, nil
}

// List returns every fleet hold, sorted by name.
func (c *Coordinator) List(ctx context.Context) ([]imperatorv1alpha1.FleetHold, error) {
	list := &imperatorv1alpha1.FleetHoldList{}
	if err := c.opts.Client.List(ctx, list, client.InNamespace(c.opts.Namespace)); err != nil {
		return nil, fmt.Errorf("listing fleet holds: %w", err)
	}
	slices.SortFunc(list.Items, func(a, b imperatorv1alpha1.FleetHold) int { return strings.Compare(a.Name, b.Name) })
	for i := range list.Items {
		_ = c.settle(ctx, &list.Items[i]) // as in Get
	}
	return list.Items, nil
}

// Release asks every cluster of the hold to release its part and records
// the hold as Released. A cluster whose stream is not open here keeps its
// part until validUntil; its entry says so.
func (c *Coordinator) Release(ctx context.Context, name string) (*imperatorv1alpha1.FleetHold, error) {
	if !c.start(name) {
		return nil, fmt.Errorf("%w: fleet hold %q is being created; release it once it is Held or Failed", ErrAlreadyExists, name)
	}
	defer c.finish(name)
	fh, err := c.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	if final(fh.Status.Phase) && fh.Status.Phase != imperatorv1alpha1.FleetHoldExpired {
		return fh, nil
	}
	before := fh.DeepCopy()
	answers := c.ask(ctx, fh, true)
	for i := range fh.Status.Clusters {
		cl := &fh.Status.Clusters[i]
		if cl.Result != ResultHeld {
			continue
		}
		switch a := answers[i]; a.Result {
		case ResultReleased:
			cl.Result, cl.Held, cl.Reason, cl.Message = ResultReleased, 0, "", ""
		default:
			cl.Reason = a.Reason
			cl.Message = "not released (" + a.Message + "): the cluster gives the units back at validUntil"
		}
	}
	if fh.Status.Phase != imperatorv1alpha1.FleetHoldExpired {
		fh.Status.Phase = imperatorv1alpha1.FleetHoldReleased
	}
	if err := c.patchStatus(ctx, fh, before); err != nil {
		return nil, fmt.Errorf("recording fleet hold %q as Released: %w", name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Fleet hold released", "fleetHold", name)
	return fh, nil
}

// settle brings a hold's phase up to date when reading it: a Held hold
// past validUntil is Expired (the spokes gave the unclaimed units back by
// themselves); a Pending hold far past the deadline was being coordinated
// by a replica that stopped, and is Failed (each part ends at validUntil).
// The new phase is written back when it can be; the answer has it anyway,
// and the error of the write is returned (Get and List only log it: the
// Expiry controller retries).
func (c *Coordinator) settle(ctx context.Context, fh *imperatorv1alpha1.FleetHold) error {
	now := c.opts.Clock.Now()
	before := fh.DeepCopy()
	switch {
	case fh.Status.Phase == imperatorv1alpha1.FleetHoldHeld && !now.Before(fh.Spec.ValidUntil.Time):
		fh.Status.Phase = imperatorv1alpha1.FleetHoldExpired
		fh.Status.Message = "validUntil passed: the clusters gave the unclaimed units back"
	case (fh.Status.Phase == "" || fh.Status.Phase == imperatorv1alpha1.FleetHoldPending) && !c.isRunning(fh.Name) &&
		now.Sub(fh.CreationTimestamp.Time) > c.orphanAfter():
		fh.Status.Phase = imperatorv1alpha1.FleetHoldFailed
		fh.Status.Message = "the hub replica coordinating the hold stopped before it ended; any part a cluster holds ends at validUntil"
	default:
		return nil
	}
	if err := c.patchStatus(ctx, fh, before); err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("Could not record a fleet hold's new phase", "fleetHold", fh.Name, "phase", fh.Status.Phase, "err", err.Error())
		return fmt.Errorf("recording fleet hold %q as %s: %w", fh.Name, fh.Status.Phase, err)
	}
	return nil
}

// patchStatus writes fh's status, changed from before's, with its
// clustersSummary brought up to date.
func (c *Coordinator) patchStatus(ctx context.Context, fh, before *imperatorv1alpha1.FleetHold) error {
	parts := make([]string, 0, len(fh.Status.Clusters))
	for _, cl := range fh.Status.Clusters {
		parts = append(parts, fmt.Sprintf("%s:%d", cl.Cluster, cl.Count))
	}
	fh.Status.ClustersSummary = strings.Join(parts, ",")
	return c.opts.Client.Status().Patch(ctx, fh, client.MergeFrom(before))
}

// orphanAfter is how long after its creation a Pending hold that no
// replica coordinates any more is Failed: well past the two deadlines of a
// hold and its release.
func (c *Coordinator) orphanAfter() time.Duration { return 3*c.opts.Deadline + 30*time.Second }

func (c *Coordinator) start(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running[name] {
		return false
	}
	c.running[name] = true
	return true
}

func (c *Coordinator) finish(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.running, name)
}

func (c *Coordinator) isRunning(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running[name]
}

// final reports whether a phase no longer changes.
func final(p imperatorv1alpha1.FleetHoldPhase) bool {
	switch p {
	case imperatorv1alpha1.FleetHoldFailed, imperatorv1alpha1.FleetHoldReleased, imperatorv1alpha1.FleetHoldExpired:
		return true
	}
	return false
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

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
