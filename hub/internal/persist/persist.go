package persist

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/imperator-federation/imperator/hub/internal/store"
)

// DefaultInterval is the shortest time between two writes of one cluster.
const DefaultInterval = 3 * time.Second

// Workers is how many clusters the persister writes at once. Writing a new
// cluster is four API requests one after the other (its Lease, the
// ManagedCluster's condition, the inventory and its status), each mostly a
// wait on the API server: with one worker a replica took in 8 to 15 new
// clusters a second, and 1,000 new spokes were live on both replicas 32 to
// 48 s after connecting (10,000 after about 13 minutes); with 8, 18 s
// (BenchmarkHubAPIWrites, 2 cores shared by the API server, etcd and both
// replicas). More would only queue at the API server, whose CPU is then
// the limit, and two replicas' 16 stay far below its default 200 mutating
// requests in flight. At steady state workers add no writes: a cluster is
// written only when it changed.
const Workers = 8

// InventoryName is the name of a cluster's ClusterInventory in its namespace.
func InventoryName(cluster string) string { return cluster }

// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=clusterinventories,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=clusterinventories/status,verbs=get;patch

// Options of a Persister.
type Options struct {
	// Interval is the shortest time between two writes of one cluster
	// (DefaultInterval when zero).
	Interval time.Duration
	// Leading reports whether this replica leads now (leader.Campaign's
	// Leading: the lead can be lost and won again). Nil: this replica is the
	// only one and always leads.
	Leading func() bool
	// Reader reads from the API server, past the cache, where a decision
	// must not rest on a stale copy (who holds a cluster's Lease); the
	// client when nil.
	Reader client.Reader
	// Clock is the hub's clock (the real one when nil).
	Clock clock.PassiveClock
	Log   logr.Logger
	// Namespace is the hub's namespace, where this replica renews its
	// replica Lease while the manager runs; none is kept when empty.
	Namespace string
}

// Persister writes the store's clusters to the API server.
type Persister struct {
	client   client.Client
	store    *store.Store
	interval time.Duration
	leading  func() bool
	reader   client.Reader
	clock    clock.PassiveClock
	log      logr.Logger
	// namespace holds the replica Leases (none kept when empty).
	namespace string
	// queue is the running controller's, to look at every cluster again
	// (nil until it starts).
	queueMu sync.Mutex
	queue   workqueue.TypedRateLimitingInterface[reconcile.Request]
	// work keeps the flush on shutdown apart from the reconciles: each
	// reconcile holds its read side (Workers of them at once, each of
	// another cluster: the workqueue never hands one cluster to two
	// workers), the flush its write side, so that it neither interleaves
	// with a reconcile of the cluster it writes nor misses the state one
	// left.
	work sync.RWMutex

	// mu guards the maps below, not what clusters maps to: a cluster's
	// entry is only read and written by the one reconcile (or the flush)
	// handling that cluster (see work).
	mu sync.Mutex
	// clusters is what the persister remembers of each cluster.
	clusters map[string]*remembered
	// changes counts the store's changes of each cluster (see clean).
	changes map[string]*changeCount
	// written is when each cluster's inventory was last written.
	written map[string]time.Time
}

// New returns a Persister that listens to st's changes.
func New(c client.Client, st *store.Store, opts Options) *Persister {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Leading == nil {
		opts.Leading = func() bool { return true }
	}
	if opts.Reader == nil {
		opts.Reader = c
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	p := &Persister{
		client:    c,
		store:     st,
		interval:  opts.Interval,
		leading:   opts.Leading,
		reader:    opts.Reader,
		clock:     opts.Clock,
		log:       opts.Log,
		namespace: opts.Namespace,
		clusters:  map[string]*remembered{},
		changes:   map[string]*changeCount{},
		written:   map[string]time.Time{},
	}
	// Before the controller's Source: a change is counted before the
	// cluster is queued.
	st.OnChange(p.changed)
	return p
}

// SetupWithManager runs the Persister on every replica (the replica holding
// a spoke's stream writes it), with a flush of every cluster on shutdown.
func (p *Persister) SetupWithManager(mgr ctrl.Manager) error {
	changes := p.store.Source()
	err := builder.TypedControllerManagedBy[reconcile.Request](mgr).
		Named("inventory-persister").
		WatchesRawSource(source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			p.queueMu.Lock()
			p.queue = q
			p.queueMu.Unlock()
			return changes.Start(ctx, q)
		})).
		// Workers clusters at once; one cluster is never written by two
		// (the workqueue's promise), the store orders a cluster's
		// changes, and the API's optimistic locks order the replicas'.
		WithOptions(controller.Options{
			NeedLeaderElection: ptr.To(false), RecoverPanic: ptr.To(true), MaxConcurrentReconciles: Workers,
			// A failed write is tried again within RenewInterval, however
			// long the failures lasted: the other replicas take this one's
			// clusters as live while its Lease is renewed, so a silent
			// cluster's Unknown must not wait out a long backoff (the
			// default grows to 1,000 s) once the API server is back.
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, RenewInterval(p.store.GracePeriod())),
		}).
		Complete(p)
	if err != nil {
		return err
	}
	if p.namespace != "" {
		if err := mgr.Add(manager.RunnableFunc(p.runReplicaLease)); err != nil {
			return err
		}
	}
	return mgr.Add(manager.RunnableFunc(p.flushOnShutdown))
}

// Reconcile writes a changed cluster, or — when it was written less than an
// interval ago — only looks at its Lease and conditions (renew) and comes
// back when the interval is over, so that the changes in between make one
// write. A cluster whose stream is open here comes back every RenewInterval
// to put its conditions right if someone else wrote them (nothing is
// written when they agree); unless the store changed the cluster since its
// last successful sync, that look is a renewal too, not a sync that would
// convert, copy and compare the whole inventory to write nothing.
func (p *Persister) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	p.work.RLock()
	defer p.work.RUnlock()
	name := req.Name
	due := p.nextWrite(name)
	count, seen, clean := p.clean(name)
	var err error
	if due > 0 || clean {
		// Within the interval, or nothing changed since the last sync
		// (the periodic look of a cluster streaming here): upkeep only.
		err = p.upkeep(ctx, name)
	} else {
		err = p.timedSync(ctx, name)
		if err == nil {
			p.synced(name, count, seen)
		}
	}
	if apierrors.IsConflict(err) {
		// Someone wrote since we read: read again and retry soon.
		ctrl.LoggerFrom(ctx).V(1).Info("Persisting cluster raced another writer; retrying", "cluster", name)
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	next := due
	if c, ok := p.store.Get(name); ok && c.Connected && p.store.Local(c) {
		renewal := RenewInterval(p.store.GracePeriod())
		if next == 0 || renewal < next {
			next = renewal
		}
	}
	return reconcile.Result{RequeueAfter: next}, nil
}

// conflictRetry is how soon a write that lost an optimistic lock is tried
// again, reading afresh.
const conflictRetry = 100 * time.Millisecond

// leader reports whether this replica writes for clusters nobody serves.
func (p *Persister) leader() bool { return p.leading() }

// LookAtEveryCluster queues every cluster for a write decision. A new leader
// calls it at the start of its term: some clusters may have gone silent
// while nobody led. Before the controller starts it does nothing: the
// controller looks at every cluster when it starts.
func (p *Persister) LookAtEveryCluster() {
	p.queueMu.Lock()
	q := p.queue
	p.queueMu.Unlock()
	if q == nil {
		return
	}
	for _, c := range p.store.List() {
		p.changed(c.Name)
		q.Add(store.Request(c.Name))
	}
}

// flushTimeout bounds the final write of every cluster on shutdown.
const flushTimeout = 10 * time.Second

// flushOnShutdown waits until ctx is done, then writes what is still
// pending, so that a restarted hub loses nothing it had acknowledged.
func (p *Persister) flushOnShutdown(ctx context.Context) error {
	<-ctx.Done()
	p.work.Lock()
	defer p.work.Unlock()
	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
	defer cancel()
	// Workers clusters at once, as the reconciles write them: each sync
	// touches its own cluster only.
	var g errgroup.Group
	g.SetLimit(Workers)
	for _, c := range p.store.List() {
		g.Go(func() error {
			// sync writes nothing for clusters whose inventory is
			// unchanged, nor for those another replica serves.
			if err := p.sync(flushCtx, c.Name); err != nil {
				p.log.Error(err, "Persisting cluster on shutdown failed", "cluster", c.Name)
			}
			return nil
		})
	}
	return g.Wait()
}
