// Package persist keeps the hub's in-memory index and the hub cluster's
// Kubernetes API in step, which is also how hub replicas share state.
//
// The replica holding a spoke's Report stream writes the cluster: one
// ClusterInventory (in the namespace named like the cluster, as OCM does)
// with the last snapshot, the ManagedCluster's Available condition, and the
// cluster's Lease (LeaseName), which names the replica serving it. Writes
// are coalesced: at most one per cluster per interval, and none when
// nothing changed. The Persister is a controller-runtime controller on
// every replica, fed with the store's changed clusters (store.Source);
// RequeueAfter brings a cluster back when its interval is over, and every
// RenewInterval while its stream is open here.
//
// Liveness across replicas, with writes independent of the fleet's size:
// heartbeats are never written. Each replica renews one replica Lease
// (ReplicaLeaseName, in the hub's namespace) every RenewInterval: "this
// replica runs". A cluster's Lease is written only when its holder changes
// (the spoke's stream opened on another replica) or is released (see
// writeFailed); the holder writes the inventory's Available condition
// Unknown when its spoke goes silent. Another replica judges a cluster live
// while it saw the holder renew its replica Lease within the grace period
// (by its own clock: the replicas' clocks may disagree) and the holder has
// not marked the cluster Unknown. At steady state the hub cluster sees one
// write per replica per RenewInterval (0.4 writes/s for two replicas at the
// default 40 s grace), whatever the number of spokes; before, each cluster's
// Lease was renewed every 5–10 s (2,000 writes/s at 10,000 spokes).
//
// Failover timing this implies (grace period G, 40 s by default):
//   - a spoke silent on a running replica: that replica turns it Unknown G
//     after its last message and writes the condition (within an interval,
//     3 s); the others follow the write. Unchanged.
//   - a replica that dies: the others last saw its Lease renewed at most
//     RenewInterval (G/8) before; its clusters turn Unknown G after that
//     sighting (G to G + G/8 after the death), and the elected leader marks
//     them Unknown in the API. A replica that stops cleanly deletes its
//     Lease; its spokes reconnect elsewhere meanwhile, and the new holder
//     takes each cluster's Lease, which the others see at once.
//
// Every replica reads them back: all of them on start (Restore), then the
// other replicas' writes as they happen (Follower). The elected leader marks
// Unknown the clusters whose serving replica went away with them.
//
// Honesty: the inventory's InventoryCurrent condition says whether its
// status is the spoke's current inventory; followers serve the figures as
// stale while it is False (the hub refused the spoke's last message, or the
// API refused the write). A replica that cannot write even that condition
// releases the cluster's Lease, so that nobody serves its old figures as
// live.
package persist

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/registry"
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

// remembered is what the persister remembers of one cluster.
type remembered struct {
	// last is the ClusterInventory and lease the Lease as last read or
	// written (nil: read them again).
	last  *imperatorv1alpha1.ClusterInventory
	lease *coordinationv1.Lease
	// withheld is true while the cluster's Lease is not renewed: neither
	// its inventory nor the condition saying it is not current could be
	// written (see writeFailed).
	withheld bool
}

// changeCount counts the store's changes of one cluster, and records the
// count its last successful sync saw.
type changeCount struct {
	changes, synced uint64
	// ok: a sync succeeded since the persister started or forgot the cluster.
	ok bool
}

// changed counts a change of cluster in the store (or a request to look at
// it afresh). The store calls it before its Source queues the cluster.
func (p *Persister) changed(cluster string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.changeCountLocked(cluster).changes++
}

// changeCountLocked is cluster's changeCount, made when it has none; p.mu
// is held.
func (p *Persister) changeCountLocked(cluster string) *changeCount {
	c, ok := p.changes[cluster]
	if !ok {
		c = &changeCount{}
		p.changes[cluster] = c
	}
	return c
}

// clean reports whether nothing changed in cluster since its last
// successful sync, and returns the count to hand synced after the next one.
func (p *Persister) clean(cluster string) (*changeCount, uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.changeCountLocked(cluster)
	return c, c.changes, c.ok && c.synced == c.changes
}

// synced records that a sync of cluster saw every change up to count
// (changes during the sync count after it), unless the cluster was
// forgotten meanwhile.
func (p *Persister) synced(cluster string, c *changeCount, count uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.changes[cluster] == c {
		c.synced, c.ok = count, true
	}
}

// state is what the persister remembers of cluster, an empty record when
// nothing. Only the reconcile handling cluster (or the flush) may call it.
func (p *Persister) state(cluster string) *remembered {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.clusters[cluster]
	if !ok {
		r = &remembered{}
		p.clusters[cluster] = r
	}
	return r
}

// drop forgets the inventory, Lease and withholding of cluster, not when it
// was last written.
func (p *Persister) drop(cluster string) {
	p.mu.Lock()
	delete(p.clusters, cluster)
	p.mu.Unlock()
	inventoryNotCurrent.DeleteLabelValues(cluster)
}

// nextWrite is how long a change of cluster waits to be written: until an
// interval has passed since its last write.
func (p *Persister) nextWrite(cluster string) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(0, p.interval-p.clock.Since(p.written[cluster]))
}

func (p *Persister) wrote(cluster string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.written[cluster] = p.clock.Now()
}

// forget drops everything the persister remembers of cluster.
func (p *Persister) forget(cluster string) {
	p.drop(cluster)
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.written, cluster)
	delete(p.changes, cluster)
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
		// (the periodic look of a cluster streaming here): renew only.
		err = p.renew(ctx, name)
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

// Restore loads every persisted ClusterInventory into the store (marked
// Restored and therefore stale until its spoke reports). Call it before the
// gRPC server starts, with a reader that does not need a started cache.
func (p *Persister) Restore(ctx context.Context, r client.Reader) error {
	var clusters clusterv1.ManagedClusterList
	if err := r.List(ctx, &clusters); err != nil {
		return fmt.Errorf("listing ManagedClusters: %w", err)
	}
	registered := make(map[string]bool, len(clusters.Items))
	for _, mc := range clusters.Items {
		registered[mc.Name] = true
	}
	var list imperatorv1alpha1.ClusterInventoryList
	if err := r.List(ctx, &list); err != nil {
		return fmt.Errorf("listing ClusterInventories: %w", err)
	}
	var leases coordinationv1.LeaseList
	if err := r.List(ctx, &leases, client.MatchingFields{"metadata.name": LeaseName}); err != nil {
		return fmt.Errorf("listing the clusters' Leases: %w", err)
	}
	leaseOf := make(map[string]*coordinationv1.Lease, len(leases.Items))
	for i := range leases.Items {
		leaseOf[leases.Items[i].Namespace] = &leases.Items[i]
	}
	if err := p.restoreReplicaSightings(ctx, r); err != nil {
		return err
	}
	restored := 0
	for i := range list.Items {
		inv := &list.Items[i]
		// Inventories of deregistered clusters wait for the garbage collector.
		if !isClusterInventory(inv) || !registered[inv.Spec.ClusterName] {
			continue
		}
		// Restored, not live: written before this replica started, so
		// stale until a spoke or another replica confirms it.
		p.store.Observe(inv.Spec.ClusterName, peerOf(inv, leaseOf[inv.Namespace], time.Time{}))
		restored++
	}
	p.log.Info("Restored inventories", "clusters", restored)
	return nil
}

// restoreReplicaSightings counts every other replica whose Lease was
// renewed within the grace period (by its own clock, the one thing a
// replica just started can go by) as seen now, before the inventories are
// restored. Without it, every idle cluster of a running replica would come
// back Unknown (its inventory is written only on change), and a replica
// elected leader in its first seconds, as in a rolling update, would mark
// them all Unknown before it saw their replica's next renewal. A replica
// that is in fact gone has the grace period to show it, as after any
// sighting.
func (p *Persister) restoreReplicaSightings(ctx context.Context, r client.Reader) error {
	if p.namespace == "" {
		return nil
	}
	var leases coordinationv1.LeaseList
	if err := r.List(ctx, &leases, client.InNamespace(p.namespace), client.MatchingLabels{ReplicaLabel: "true"}); err != nil {
		return fmt.Errorf("listing the replica Leases: %w", err)
	}
	for i := range leases.Items {
		holder, renewed := leaseHolder(&leases.Items[i])
		if holder != "" && !renewed.IsZero() && p.clock.Since(renewed) <= p.store.GracePeriod() {
			p.store.ReplicaRenewed(holder)
		}
	}
	return nil
}

// isClusterInventory is true for the ClusterInventory the hub writes for a
// cluster: named like it, in the namespace named like it.
func isClusterInventory(inv *imperatorv1alpha1.ClusterInventory) bool {
	name := inv.Spec.ClusterName
	return name != "" && inv.Namespace == name && inv.Name == InventoryName(name)
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

func (p *Persister) sync(ctx context.Context, name string) error {
	c, ok := p.store.Get(name)
	if !ok {
		// Deregistered: the inventory goes with the ManagedCluster.
		p.forget(name)
		return nil
	}
	if !p.store.Local(c) {
		// Another replica serves it and writes it; when that replica went
		// away and the spoke with it, the leader says so.
		p.drop(name)
		if c.State == store.StateUnknown && p.leader() {
			return p.markUnknown(ctx, c)
		}
		return nil
	}
	if !c.Connected {
		// The stream ended here: the spoke may be on another replica by
		// now, whose writes must not be overwritten with older figures
		// (this replica's cache may not show them yet, or be stopped).
		moved, err := p.movedAway(ctx, c)
		if err != nil || moved {
			return err
		}
	}
	mc, err := p.managedCluster(ctx, name)
	if err != nil || mc == nil {
		return err
	}
	state := p.state(name)
	switch {
	case c.Connected && !state.withheld:
		// First: the others must know who serves the cluster before they
		// read what it writes.
		if moved, err := p.renewLease(ctx, c, mc); err != nil || moved {
			return err
		}
	case state.withheld:
		if err := p.releaseLease(ctx, c); err != nil {
			p.log.Error(err, "Could not release the Lease of a cluster whose inventory cannot be written", "cluster", name)
		}
	}
	available := c.State == store.StateAvailable
	msg := availabilityMessage(available, p.store.GracePeriod())
	// setErr is a failure to mark the ManagedCluster Unknown. The other
	// replicas judge the cluster by its inventory's Available condition
	// (this replica's own Lease keeps being renewed), so the inventory is
	// written all the same, and the ManagedCluster tried again.
	var setErr error
	if _, err := registry.SetAvailable(ctx, p.client, name, liveness(c, p.store.GracePeriod())); err != nil {
		if available {
			return err
		}
		setErr = err
	}
	if available && !c.Synced() && c.Outdated == "" {
		// Hello without its Snapshot yet: the Snapshot, a moment later,
		// is worth the write (and the interval's wait after it). Unless
		// the hub refused it: then the others must learn at once that the
		// figures persisted are not current.
		return nil
	}
	inv, err := p.inventory(ctx, mc)
	if err != nil {
		return err
	}
	next := inv.DeepCopy()
	setAvailableCondition(next, available, msg)
	next.Status.AgentVersion = c.AgentVersion
	next.Status.AgentMode = c.AgentMode
	next.Status.InjectionUnavailable = c.InjectionUnavailable
	next.Status.Epoch = c.Epoch
	next.Status.Generation = c.Generation
	next.Status.ObservedAt = metaTime(c.ObservedAt)
	next.Status.Machines = machinesToAPI(c.Machines)
	current, reason, currentMsg := currentCondition(c)
	setCurrentCondition(next, current, reason, currentMsg)
	// The heartbeat time alone is not worth a write; it rides along.
	heartbeat := next.Status.LastHeartbeatTime
	next.Status.LastHeartbeatTime = inv.Status.LastHeartbeatTime
	if equality.Semantic.DeepEqual(inv.Status, next.Status) {
		return setErr
	}
	next.Status.LastHeartbeatTime = metaTime(c.LastHeartbeat)
	if next.Status.LastHeartbeatTime == nil {
		next.Status.LastHeartbeatTime = heartbeat
	}
	// Optimistic lock: a write by anyone else since inv was read (the
	// leader marking the cluster Unknown, a replica the spoke left) makes
	// this one read again rather than patch over it unseen.
	if err := p.client.Status().Patch(ctx, next, client.MergeFromWithOptions(inv, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			state.last = nil
		} else {
			p.writeFailed(ctx, c, inv, err)
		}
		return fmt.Errorf("patching ClusterInventory %s/%s status: %w", name, InventoryName(name), err)
	}
	state.last = next
	released := state.withheld
	p.persisted(c)
	p.wrote(name)
	if released && c.Connected {
		// Honest figures are in again: take the Lease back at once.
		if _, err := p.renewLease(ctx, c, mc); err != nil {
			return err
		}
	}
	p.log.V(2).Info("Persisted inventory", "cluster", name, "generation", c.Generation)
	return setErr
}

// managedCluster returns the cluster's ManagedCluster, from the cache or
// else the API server; nil when it does not exist (deregistered: nothing of
// it is written any more). It is read on every renewal and only its name
// and UID are used: it shares its fields with the cache and must not be
// changed.
func (p *Persister) managedCluster(ctx context.Context, name string) (*clusterv1.ManagedCluster, error) {
	mc := &clusterv1.ManagedCluster{}
	err := p.client.Get(ctx, client.ObjectKey{Name: name}, mc, client.UnsafeDisableDeepCopy)
	if apierrors.IsNotFound(err) {
		// Just joined: the cache may not have seen it yet.
		err = p.reader.Get(ctx, client.ObjectKey{Name: name}, mc)
	}
	switch {
	case apierrors.IsNotFound(err):
		p.log.V(1).Info("Not persisting a cluster without ManagedCluster", "cluster", name)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading ManagedCluster %q: %w", name, err)
	}
	return mc, nil
}

// renew takes the Lease of a cluster whose stream is open here if another
// replica holds it, and puts its Available conditions right.
func (p *Persister) renew(ctx context.Context, name string) error {
	c, ok := p.store.Get(name)
	if !ok || !c.Connected || !p.store.Local(c) || p.state(name).withheld {
		return nil
	}
	mc, err := p.managedCluster(ctx, name)
	if err != nil || mc == nil {
		return err
	}
	if _, err := p.renewLease(ctx, c, mc); err != nil {
		return err
	}
	// Every renewal interval, put the Available conditions right when they
	// disagree with the live state (the leader marked a heartbeating
	// cluster Unknown, taking this replica for gone): heartbeats alone
	// change nothing in the store, so no sync would write them, and the
	// other replicas take the inventory's condition for the truth. Nothing
	// is written when they agree. When the ManagedCluster cannot be marked
	// Unknown, the inventory is all the same (sync; see there).
	if _, err := registry.SetAvailable(ctx, p.client, name, liveness(c, p.store.GracePeriod())); err != nil && c.State == store.StateAvailable {
		return err
	}
	got, err := p.availableInCache(ctx, name)
	if apierrors.IsNotFound(err) {
		// Its inventory was deleted (by hand, or by the garbage collector
		// after a re-registration) while nothing changed in the store: a
		// renewal alone would leave it missing until the spoke's next
		// change, and the other replicas would take an idle spoke for
		// gone. Write it again.
		p.state(name).last = nil
		return p.sync(ctx, name)
	}
	if err != nil {
		return err
	}
	want := metav1.ConditionTrue
	if c.State != store.StateAvailable {
		want = metav1.ConditionUnknown
	}
	if got != "" && got != want {
		return p.sync(ctx, name)
	}
	return nil
}

// availableInCache is the status of the Available condition of the
// cluster's inventory as the client's cache holds it: what the last writer
// says, maybe the leader marking the cluster Unknown. What this replica
// holds (remembered.last) cannot tell that another replica wrote since, so the cache
// is read on every renewal of every cluster streaming here, in place: the
// inventory is not copied (its Machines are the bulk of it, and one
// condition is all that is read), and nothing read is changed. A client
// without a cache copies as usual.
func (p *Persister) availableInCache(ctx context.Context, name string) (metav1.ConditionStatus, error) {
	cached := &imperatorv1alpha1.ClusterInventory{}
	if err := p.client.Get(ctx, client.ObjectKey{Namespace: name, Name: InventoryName(name)}, cached, client.UnsafeDisableDeepCopy); err != nil {
		return "", err
	}
	return availableStatus(cached), nil
}

// liveness is what the ManagedCluster's Available condition says of c.
func liveness(c *store.Cluster, grace time.Duration) registry.Liveness {
	available := c.State == store.StateAvailable
	return registry.Liveness{
		Heartbeating:         available,
		Message:              availabilityMessage(available, grace),
		APIServerUnreachable: c.APIServerUnreachableMessage(),
	}
}

// markUnknown sets the Available conditions of a cluster another replica
// served to Unknown, writing only what is not Unknown already.
func (p *Persister) markUnknown(ctx context.Context, c *store.Cluster) error {
	name := c.Name
	msg := availabilityMessage(false, p.store.GracePeriod())
	mc, err := registry.SetAvailable(ctx, p.client, name, registry.Liveness{Message: msg})
	if err != nil || mc == nil {
		return err
	}
	inv := &imperatorv1alpha1.ClusterInventory{}
	if err := p.client.Get(ctx, client.ObjectKey{Namespace: name, Name: InventoryName(name)}, inv); err != nil {
		return client.IgnoreNotFound(err)
	}
	next := inv.DeepCopy()
	if !setAvailableCondition(next, false, msg) {
		return nil
	}
	if err := p.client.Status().Patch(ctx, next, client.MergeFromWithOptions(inv, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("patching ClusterInventory %s/%s status: %w", name, inv.Name, err)
	}
	p.log.Info("Marked a silent cluster of another replica Unknown", "cluster", name, "replica", c.Replica, "lastHeartbeat", c.LastHeartbeat)
	return nil
}

func availabilityMessage(available bool, grace time.Duration) string {
	if available {
		return "The spoke agent is heartbeating"
	}
	return fmt.Sprintf("No heartbeat from the spoke agent for more than %s", grace)
}

// setAvailableCondition sets the inventory's Available condition and reports
// whether it changed.
func setAvailableCondition(inv *imperatorv1alpha1.ClusterInventory, available bool, msg string) bool {
	status, reason := metav1.ConditionTrue, registry.ReasonAvailable
	if !available {
		status, reason = metav1.ConditionUnknown, registry.ReasonUnknown
	}
	return meta.SetStatusCondition(&inv.Status.Conditions, metav1.Condition{
		Type: imperatorv1alpha1.ConditionAvailable, Status: status, Reason: reason, Message: msg, ObservedGeneration: inv.Generation,
	})
}

// availableStatus is the status of the inventory's Available condition.
func availableStatus(inv *imperatorv1alpha1.ClusterInventory) metav1.ConditionStatus {
	if c := meta.FindStatusCondition(inv.Status.Conditions, imperatorv1alpha1.ConditionAvailable); c != nil {
		return c.Status
	}
	return ""
}

// inventory returns the cluster's ClusterInventory, creating it (and its
// namespace) when missing, owned by the ManagedCluster so that deregistering
// the cluster deletes it.
func (p *Persister) inventory(ctx context.Context, mc *clusterv1.ManagedCluster) (*imperatorv1alpha1.ClusterInventory, error) {
	name := mc.Name
	state := p.state(name)
	if inv := state.last; inv != nil {
		// Another replica (the leader marking it Unknown while the spoke
		// was away) may have written since: then start from that.
		cached, err := p.availableInCache(ctx, name)
		if err == nil && cached == availableStatus(inv) {
			return inv, nil
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("getting ClusterInventory %s/%s: %w", name, inv.Name, err)
		}
		state.last = nil
	}
	inv := &imperatorv1alpha1.ClusterInventory{}
	key := client.ObjectKey{Namespace: name, Name: InventoryName(name)}
	err := p.client.Get(ctx, key, inv)
	if apierrors.IsNotFound(err) {
		inv = &imperatorv1alpha1.ClusterInventory{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:       name,
				Name:            InventoryName(name),
				OwnerReferences: ownedBy(mc),
			},
			Spec: imperatorv1alpha1.ClusterInventorySpec{ClusterName: name},
		}
		// The namespace is there as a rule (registering the cluster made
		// it, and its Lease is in it): it is made only when the create
		// says it is missing, not with a create per new cluster that the
		// API server refuses.
		err = p.client.Create(ctx, inv)
		if apierrors.IsNotFound(err) {
			if err := registry.EnsureNamespace(ctx, p.client, name); err != nil {
				return nil, err
			}
			err = p.client.Create(ctx, inv)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("getting ClusterInventory %s: %w", key, err)
	}
	state.last = inv
	return inv, nil
}

// ownedBy is the owner reference that lets the garbage collector delete what
// the hub writes for a cluster together with its ManagedCluster.
func ownedBy(mc *clusterv1.ManagedCluster) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "ManagedCluster", Name: mc.Name, UID: mc.UID}}
}
