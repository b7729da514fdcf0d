// Package persist keeps the hub's in-memory index and the hub cluster's
// Kubernetes API in step, which is also how hub replicas share state.
//
// The replica holding a spoke's Report stream writes the cluster: one
// ClusterInventory (in the namespace named like the cluster, as OCM does)
// with the last snapshot, the ManagedCluster's Available condition, and a
// heartbeat Lease renewed with the spoke's heartbeats. Writes are coalesced:
// at most one per cluster per interval, and none when nothing changed.
//
// Every replica reads them back: all of them on start (Restore), then the
// other replicas' writes as they happen (Follower). The elected leader marks
// Unknown the clusters whose serving replica went away with them.
//
// Honesty: the inventory's InventoryCurrent condition says whether its
// status is the spoke's current inventory; followers serve the figures as
// stale while it is False (the hub refused the spoke's last message, or the
// API refused the write). A replica that cannot write even that condition
// withholds the cluster's Lease, so that nobody serves its old figures as
// live.
package persist

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/hub/internal/store"
)

// DefaultInterval is the shortest time between two writes of one cluster.
const DefaultInterval = 3 * time.Second

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
}

// item is a unit of the Persister's work: a cluster's full write, or the
// renewal of its Lease alone.
type item struct {
	cluster string
	lease   bool
}

// Persister writes the store's clusters to the API server, a
// controller-runtime Runnable.
type Persister struct {
	client   client.Client
	store    *store.Store
	interval time.Duration
	leading  func() bool
	reader   client.Reader
	clock    clock.PassiveClock
	log      logr.Logger
	queue    workqueue.TypedRateLimitingInterface[item]
	// last is the ClusterInventory and leases the Lease as last read or
	// written, per cluster; only the worker goroutine (and Restore, before
	// Start) touch them.
	last   map[string]*imperatorv1alpha1.ClusterInventory
	leases map[string]*coordinationv1.Lease
	// withheld are the clusters whose Lease is not renewed: neither their
	// inventory nor the condition saying it is not current could be
	// written (see writeFailed).
	withheld map[string]bool

	// written is when each cluster's inventory was last written.
	mu      sync.Mutex
	written map[string]time.Time
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

// forget drops what the worker remembers of cluster.
func (p *Persister) forget(cluster string) {
	delete(p.last, cluster)
	delete(p.leases, cluster)
	delete(p.withheld, cluster)
	inventoryNotCurrent.DeleteLabelValues(cluster)
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.written, cluster)
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
		client:   c,
		store:    st,
		interval: opts.Interval,
		leading:  opts.Leading,
		reader:   opts.Reader,
		clock:    opts.Clock,
		log:      opts.Log,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[item](),
			workqueue.TypedRateLimitingQueueConfig[item]{Name: "hub_persist"}),
		last:     map[string]*imperatorv1alpha1.ClusterInventory{},
		leases:   map[string]*coordinationv1.Lease{},
		withheld: map[string]bool{},
		written:  map[string]time.Time{},
	}
	// A change is written at once when the cluster was not written for an
	// interval, else when the interval is over; further changes in between
	// join it (the delaying queue keeps one entry per cluster, due at the
	// earliest time asked).
	st.OnChange(func(cluster string) { p.queue.AddAfter(item{cluster: cluster}, p.nextWrite(cluster)) })
	return p
}

// leader reports whether this replica writes for clusters nobody serves.
func (p *Persister) leader() bool { return p.leading() }

// LookAtEveryCluster queues every cluster for a write decision. A new leader
// calls it at the start of its term: some clusters may have gone silent
// while nobody led.
func (p *Persister) LookAtEveryCluster() {
	for _, c := range p.store.List() {
		p.queue.Add(item{cluster: c.Name})
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
		return fmt.Errorf("listing heartbeat Leases: %w", err)
	}
	leaseOf := make(map[string]*coordinationv1.Lease, len(leases.Items))
	for i := range leases.Items {
		leaseOf[leases.Items[i].Namespace] = &leases.Items[i]
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

// NeedLeaderElection is false: the replica holding a spoke's stream writes it.
func (p *Persister) NeedLeaderElection() bool { return false }

// isClusterInventory is true for the ClusterInventory the hub writes for a
// cluster: named like it, in the namespace named like it.
func isClusterInventory(inv *imperatorv1alpha1.ClusterInventory) bool {
	name := inv.Spec.ClusterName
	return name != "" && inv.Namespace == name && inv.Name == InventoryName(name)
}

// flushTimeout bounds the final write of every cluster on shutdown.
const flushTimeout = 10 * time.Second

// Start writes until ctx is done, then writes what is still pending, so that
// a restarted hub loses nothing it had acknowledged.
func (p *Persister) Start(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		p.queue.ShutDown()
	}()
	go p.renewLeases(ctx)
	for {
		it, shutdown := p.queue.Get()
		if shutdown {
			break
		}
		var err error
		if it.lease {
			err = p.renew(ctx, it.cluster)
		} else {
			err = p.sync(ctx, it.cluster)
		}
		switch {
		case err == nil:
			p.queue.Forget(it)
		case apierrors.IsConflict(err):
			// Someone wrote since we read: read again and retry soon.
			p.log.V(1).Info("Persisting cluster raced another writer; retrying", "cluster", it.cluster, "lease", it.lease)
			p.queue.AddRateLimited(it)
		default:
			p.log.Error(err, "Persisting cluster failed; retrying", "cluster", it.cluster, "lease", it.lease)
			p.queue.AddRateLimited(it)
		}
		p.queue.Done(it)
	}
	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
	defer cancel()
	for _, c := range p.store.List() {
		// sync writes nothing for clusters whose inventory is unchanged, nor
		// for those another replica serves.
		if err := p.sync(flushCtx, c.Name); err != nil {
			p.log.Error(err, "Persisting cluster on shutdown failed", "cluster", c.Name)
		}
	}
	return nil
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
		delete(p.last, name)
		delete(p.leases, name)
		delete(p.withheld, name)
		inventoryNotCurrent.DeleteLabelValues(name)
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
	if c.Connected && !p.withheld[name] {
		// First, so that a failing status write never lets it lapse.
		if moved, err := p.renewLease(ctx, c, mc); err != nil || moved {
			return err
		}
	}
	available := c.State == store.StateAvailable
	msg := availabilityMessage(available, p.store.GracePeriod())
	if _, err := registry.SetAvailable(ctx, p.client, name, liveness(c, p.store.GracePeriod())); err != nil {
		return err
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
		return nil
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
			delete(p.last, name)
		} else {
			p.writeFailed(ctx, c, inv, err)
		}
		return fmt.Errorf("patching ClusterInventory %s/%s status: %w", name, InventoryName(name), err)
	}
	p.last[name] = next
	p.persisted(c)
	p.wrote(name)
	p.log.V(2).Info("Persisted inventory", "cluster", name, "generation", c.Generation)
	return nil
}

// managedCluster returns the cluster's ManagedCluster, from the cache or
// else the API server; nil when it does not exist (deregistered: nothing of
// it is written any more).
func (p *Persister) managedCluster(ctx context.Context, name string) (*clusterv1.ManagedCluster, error) {
	mc := &clusterv1.ManagedCluster{}
	err := p.client.Get(ctx, client.ObjectKey{Name: name}, mc)
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

// renew renews the Lease of a cluster whose stream is open here.
func (p *Persister) renew(ctx context.Context, name string) error {
	c, ok := p.store.Get(name)
	if !ok || !c.Connected || !p.store.Local(c) || p.withheld[name] {
		return nil
	}
	mc, err := p.managedCluster(ctx, name)
	if err != nil || mc == nil {
		return err
	}
	if _, err := p.renewLease(ctx, c, mc); err != nil {
		return err
	}
	// Every renewal interval, put the Available condition right when it
	// disagrees with the live state (someone marked a heartbeating cluster
	// Unknown): heartbeats alone change nothing in the store, so no sync
	// would write it. Nothing is written when it agrees.
	_, err = registry.SetAvailable(ctx, p.client, name, liveness(c, p.store.GracePeriod()))
	return err
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
	if inv, ok := p.last[name]; ok {
		// Another replica (the leader marking it Unknown while the spoke
		// was away) may have written since: then start from that.
		cached := &imperatorv1alpha1.ClusterInventory{}
		err := p.client.Get(ctx, client.ObjectKeyFromObject(inv), cached)
		if err == nil && availableStatus(cached) == availableStatus(inv) {
			return inv, nil
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("getting ClusterInventory %s/%s: %w", name, inv.Name, err)
		}
		delete(p.last, name)
	}
	inv := &imperatorv1alpha1.ClusterInventory{}
	key := client.ObjectKey{Namespace: name, Name: InventoryName(name)}
	err := p.client.Get(ctx, key, inv)
	if apierrors.IsNotFound(err) {
		if err := registry.EnsureNamespace(ctx, p.client, name); err != nil {
			return nil, err
		}
		inv = &imperatorv1alpha1.ClusterInventory{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:       name,
				Name:            InventoryName(name),
				OwnerReferences: ownedBy(mc),
			},
			Spec: imperatorv1alpha1.ClusterInventorySpec{ClusterName: name},
		}
		err = p.client.Create(ctx, inv)
	}
	if err != nil {
		return nil, fmt.Errorf("getting ClusterInventory %s: %w", key, err)
	}
	p.last[name] = inv
	return inv, nil
}

// ownedBy is the owner reference that lets the garbage collector delete what
// the hub writes for a cluster together with its ManagedCluster.
func ownedBy(mc *clusterv1.ManagedCluster) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "ManagedCluster", Name: mc.Name, UID: mc.UID}}
}
