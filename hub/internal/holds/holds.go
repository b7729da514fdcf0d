package holds

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
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
)

// Spokes sends HoldRequests over the spokes' Report streams (*server.Server).
type Spokes interface {
	// HoldStream reports whether the cluster's stream is open here.
	HoldStream(cluster string) (connected, supportsHolds bool)
	// RequestHold sends req and waits for the answer until ctx ends; it
	// fails at once with ErrNotConnectedHere or ErrHoldsUnsupported when
	// the spoke cannot answer.
	RequestHold(ctx context.Context, cluster string, req *federationv1.HoldRequest) (*federationv1.HoldResponse, error)
}

// Errors of Spokes.RequestHold that the Coordinator tells apart.
var (
	// ErrNotConnectedHere: the cluster's Report stream is not open on this
	// hub replica (it is on another one, or the spoke is offline).
	ErrNotConnectedHere = errors.New("the spoke's Report stream is not open on this hub replica")
	// ErrHoldsUnsupported: the spoke agent predates capacity holds.
	ErrHoldsUnsupported = errors.New("the spoke agent does not support capacity holds (its Hello lacks the capability \"holds\"); upgrade it")
)

// Options configure a Coordinator.
type Options struct {
	// Client reads and writes FleetHolds (uncached).
	Client    client.Client
	Namespace string
	Store     *store.Store
	Spokes    Spokes
	// Deadline bounds the wait for the spokes' answers (DefaultDeadline).
	Deadline time.Duration
	// Poll is how often a replica waiting on a FleetHold reads it again
	// (defaultPoll).
	Poll time.Duration
	// UsageWait bounds how long a Held answer waits for this replica's
	// figures to count the held units (DefaultUsageWait; see awaitUsage).
	UsageWait time.Duration
	Clock     clock.PassiveClock
}

// defaultPoll is Options.Poll's default.
const defaultPoll = 50 * time.Millisecond

// Coordinator runs fleet holds.
type Coordinator struct {
	opts Options

	mu sync.Mutex
	// inFlight are the requests on their way to this replica's spokes, by
	// booking, cluster and kind.
	inFlight map[string]bool
	// answers wake a Create waiting on this replica for its hold's answers
	// when this replica recorded one.
	answers map[types.UID]chan struct{}
}

// New returns a Coordinator.
func New(opts Options) *Coordinator {
	if opts.Deadline <= 0 {
		opts.Deadline = DefaultDeadline
	}
	if opts.Poll <= 0 {
		opts.Poll = defaultPoll
	}
	if opts.UsageWait <= 0 {
		opts.UsageWait = DefaultUsageWait
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Coordinator{opts: opts, inFlight: map[string]bool{}, answers: map[types.UID]chan struct{}{}}
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

// settle brings a hold's phase up to date when reading it: a Held hold
// past validUntil is Expired (the spokes gave the unclaimed units back by
// themselves); a Pending hold far past the deadline was being coordinated
// by a replica that stopped, and is Failed (the Deliverers release its
// held parts). The write is under the hold's resourceVersion, so it never
// overwrites a decision another replica wrote meanwhile. The answer has
// the new phase anyway, and the error of the write is returned (Get and
// List only log it: the Expiry controller retries).
func (c *Coordinator) settle(ctx context.Context, fh *imperatorv1alpha1.FleetHold) error {
	now := c.opts.Clock.Now()
	before := fh.DeepCopy()
	switch {
	case fh.Status.Phase == imperatorv1alpha1.FleetHoldHeld && !now.Before(fh.Spec.ValidUntil.Time):
		fh.Status.Phase = imperatorv1alpha1.FleetHoldExpired
		fh.Status.Message = "validUntil passed: the clusters gave the unclaimed units back"
	case (fh.Status.Phase == "" || fh.Status.Phase == imperatorv1alpha1.FleetHoldPending) &&
		now.Sub(fh.CreationTimestamp.Time) > c.orphanAfter():
		decide(fh, true, func(string) bool { return false })
		fh.Status.Phase = imperatorv1alpha1.FleetHoldFailed
		fh.Status.Message = "the hub replica coordinating the hold stopped before it ended: nothing is held, the hub releases every part a cluster holds"
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
// clustersSummary brought up to date, under before's resourceVersion: a
// write of another replica since before was read makes it fail with a
// Conflict.
func (c *Coordinator) patchStatus(ctx context.Context, fh, before *imperatorv1alpha1.FleetHold) error {
	parts := make([]string, 0, len(fh.Status.Clusters))
	for _, cl := range fh.Status.Clusters {
		parts = append(parts, fmt.Sprintf("%s:%d", cl.Cluster, cl.Count))
	}
	fh.Status.ClustersSummary = strings.Join(parts, ",")
	return c.opts.Client.Status().Patch(ctx, fh, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
}

// orphanAfter is how long after its creation a Pending hold that no
// replica decided is Failed: well past the deadline of its answers.
func (c *Coordinator) orphanAfter() time.Duration { return 3*c.opts.Deadline + 30*time.Second }

// final reports whether a phase no longer changes.
func final(p imperatorv1alpha1.FleetHoldPhase) bool {
	switch p {
	case imperatorv1alpha1.FleetHoldFailed, imperatorv1alpha1.FleetHoldReleased, imperatorv1alpha1.FleetHoldExpired:
		return true
	}
	return false
}
