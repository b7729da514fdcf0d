package scores

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/imperator-federation/imperator/hub/internal/capacity"
	"github.com/imperator-federation/imperator/hub/internal/store"
)

// +kubebuilder:rbac:groups=cluster.open-cluster-management.io,resources=addonplacementscores,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=cluster.open-cluster-management.io,resources=addonplacementscores/status,verbs=get;patch

// Defaults of Options.
const (
	DefaultResourceName = "imperator"
	DefaultMinInterval  = 5 * time.Second
	// DefaultValidFor: refreshed every 15 to 22.5 minutes (half to three
	// quarters of it, jittered), the scores cost the hub cluster about 9
	// writes/s at 10,000 spokes (valid for 2 minutes, refreshed every
	// minute, it was 167/s: over the fleet's whole budget of 20). A change
	// of a cluster's scores is written at once (MinInterval apart), and a
	// cluster going offline expires its scores at once; only a hub down
	// entirely leaves them standing that long.
	DefaultValidFor = 30 * time.Minute
	// MinScore and MaxScore bound OCM scores.
	MinScore = -100
	MaxScore = 100
)

// Options configure a Publisher.
type Options struct {
	// ResourceName is the AddOnPlacementScore's name in every cluster namespace.
	ResourceName string
	// MinInterval is the shortest time between two writes of one cluster's scores.
	MinInterval time.Duration
	// ValidFor is how long published scores stay valid without a refresh.
	ValidFor time.Duration
	Clock    clock.PassiveClock
	Log      logr.Logger
}

// Publisher keeps the AddOnPlacementScores in step with the store. Only the
// leader writes: SetupWithManager adds a controller-runtime controller,
// fed with the store's clusters (store.Source), to the manager of a leader
// term (see hub/internal/leader), built afresh in every term so that each
// term starts from what the API holds, not from what an earlier term wrote.
type Publisher struct {
	client client.Client
	store  *store.Store
	opts   Options

	// writing is held for every write: when a term ends because its
	// Lease was lost, controller-runtime does not wait for its
	// controllers, so a write of the last term may still be under way when
	// the next term writes; the next term waits here instead of racing it
	// with older figures.
	writing sync.Mutex
}

type published struct {
	scores     []clusterv1alpha1.AddOnPlacementScoreItem
	validUntil time.Time
	at         time.Time
}

// New returns a publisher writing with c (whose scheme must know
// cluster.open-cluster-management.io/v1alpha1).
func New(c client.Client, st *store.Store, opts Options) *Publisher {
	if opts.ResourceName == "" {
		opts.ResourceName = DefaultResourceName
	}
	if opts.MinInterval <= 0 {
		opts.MinInterval = DefaultMinInterval
	}
	if opts.ValidFor <= 0 {
		opts.ValidFor = DefaultValidFor
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Publisher{client: c, store: st, opts: opts}
}

// SetupWithManager adds a term's controller to mgr: it looks at every
// cluster when it starts, then at each cluster that changes, and again when
// its scores are due for a refresh. It needs leader election: it runs once
// mgr is elected (or at once on a manager without leader election).
func (p *Publisher) SetupWithManager(mgr ctrl.Manager) error {
	return builder.TypedControllerManagedBy[reconcile.Request](mgr).
		Named("placement-scores").
		WatchesRawSource(p.store.Source()).
		// One worker: a term's written needs no lock.
		WithOptions(controller.Options{RecoverPanic: ptr.To(true), MaxConcurrentReconciles: 1}).
		Complete(p.newTerm())
}

// term is the publisher's reconciler in one leader term.
type term struct {
	*Publisher
	// written is what the last successful write of each cluster holds in
	// this term.
	written map[string]published
}

func (p *Publisher) newTerm() *term { return &term{Publisher: p, written: map[string]published{}} }

// Reconcile writes the cluster's scores when they changed, at most once per
// MinInterval (a change sooner is looked at when the interval is over, with
// every change in between), and asks to look again when they are due for a
// refresh.
func (t *term) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	name := req.Name
	now := t.opts.Clock.Now()
	if last, ok := t.written[name]; ok && now.Sub(last.at) < t.opts.MinInterval {
		return reconcile.Result{RequeueAfter: t.opts.MinInterval - now.Sub(last.at)}, nil
	}
	retryAfter, err := t.sync(ctx, name, now)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("publishing the placement scores of cluster %q: %w", name, err)
	}
	return reconcile.Result{RequeueAfter: retryAfter}, nil
}

// sync writes the cluster's scores when they differ from what was written
// and returns when to look again (0: on the next change only).
func (t *term) sync(ctx context.Context, name string, now time.Time) (time.Duration, error) {
	p := t.Publisher
	c, ok := p.store.Get(name)
	if !ok {
		// The cluster is gone; its namespace (and the score) go with its
		// ManagedCluster.
		delete(t.written, name)
		return 0, nil
	}
	if c.Restored && c.Liveness == store.LivenessAvailable {
		// Figures nobody has confirmed since this replica started (it just
		// took over, or the hub restarted): what was published stays, with
		// its own validUntil, until the cluster reports or goes silent.
		return 0, nil
	}
	want := published{scores: Scores(c), at: now}
	fresh := !c.Stale()
	last, wrote := t.written[name]
	refreshAt := last.validUntil.Add(-p.opts.ValidFor / 2)
	switch {
	case fresh:
		if wrote && slices.Equal(last.scores, want.scores) && now.Before(refreshAt) {
			return refreshAt.Sub(now), nil
		}
		want.validUntil = now.Add(p.opts.ValidFor)
	default:
		if wrote && !last.validUntil.After(now) && slices.Equal(last.scores, want.scores) {
			return 0, nil
		}
		want.validUntil = now
	}
	if err := p.write(ctx, name, want); err != nil {
		return 0, err
	}
	t.written[name] = want
	p.opts.Log.V(1).Info("Published placement scores", "cluster", name, "scores", len(want.scores), "validUntil", want.validUntil, "fresh", fresh)
	if fresh {
		// Refreshed between half and three quarters of the validity, at
		// random: the clusters all published at once when the hub started
		// would otherwise be refreshed together for ever, a burst of one
		// write per cluster every ValidFor/2.
		return wait.Jitter(p.opts.ValidFor/2, 0.5), nil
	}
	return 0, nil
}

func (p *Publisher) write(ctx context.Context, namespace string, want published) error {
	p.writing.Lock()
	defer p.writing.Unlock()
	obj := &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: p.opts.ResourceName}}
	if err := p.client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading AddOnPlacementScore: %w", err)
		}
		obj.Labels = map[string]string{"app.kubernetes.io/managed-by": "imperator-hub"}
		if err := p.client.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating AddOnPlacementScore: %w", err)
		}
	}
	patch := client.MergeFrom(obj.DeepCopy())
	obj.Status.Scores = want.scores
	validUntil := metav1.NewTime(want.validUntil)
	obj.Status.ValidUntil = &validUntil
	if err := p.client.Status().Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("patching AddOnPlacementScore status: %w", err)
	}
	return nil
}

// Scores are the placement scores of a cluster's figures (see the package
// documentation), sorted by name.
func Scores(c *store.Cluster) []clusterv1alpha1.AddOnPlacementScoreItem {
	usage := capacity.ClusterUsageOf(c)
	// Summed in int64: free units of one type over many groups can leave int32.
	perType := map[string]int64{}
	out := make([]clusterv1alpha1.AddOnPlacementScoreItem, 0, len(usage.Types)*2)
	for _, t := range usage.Types {
		perType[t.Type] += int64(t.Free)
		if t.Group == "" {
			// Only the per-type score: "<group>.<type>" would collide with it.
			continue
		}
		out = append(out, clusterv1alpha1.AddOnPlacementScoreItem{Name: ScoreName(t.Group, t.Type), Value: Value(t.Free)})
	}
	for typ, free := range perType {
		out = append(out, clusterv1alpha1.AddOnPlacementScoreItem{Name: ScoreName("", typ), Value: Value(int32(min(free, math.MaxInt32)))})
	}
	slices.SortFunc(out, func(a, b clusterv1alpha1.AddOnPlacementScoreItem) int {
		return cmp.Compare(a.Name, b.Name)
	})
	return out
}

// Value maps free units onto the OCM score range: −100 + 2 × min(free, 100).
func Value(free int32) int32 {
	return MinScore + 2*min(max(free, 0), 100)
}

// ScoreName is the score name of a machine type; group may be empty for the
// name summing every group.
func ScoreName(group, machineType string) string {
	return strings.TrimPrefix(group+"."+machineType, ".")
}
