// Package persist writes the hub's in-memory index to the hub cluster's
// Kubernetes API and reads it back on start: one ClusterInventory per spoke
// (in the namespace named like the cluster, as OCM does) holding the last
// snapshot, and the ManagedCluster's Available condition. Writes are
// coalesced: at most one per cluster per interval, and none when nothing
// changed.
package persist

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
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

// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=clusterinventories,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=clusterinventories/status,verbs=get;patch

// Persister writes the store's clusters to the API server, a
// controller-runtime Runnable.
type Persister struct {
	client   client.Client
	store    *store.Store
	interval time.Duration
	log      logr.Logger
	queue    workqueue.TypedDelayingInterface[string]
	// last is the ClusterInventory as last read or written, per cluster;
	// only the worker goroutine (and Restore, before Start) touch it.
	last map[string]*imperatorv1alpha1.ClusterInventory
}

// New returns a Persister that listens to st's changes.
func New(c client.Client, st *store.Store, interval time.Duration, log logr.Logger) *Persister {
	if interval <= 0 {
		interval = DefaultInterval
	}
	p := &Persister{
		client:   c,
		store:    st,
		interval: interval,
		log:      log,
		queue:    workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: "hub_persist"}),
		last:     map[string]*imperatorv1alpha1.ClusterInventory{},
	}
	// A change schedules a write one interval later; further changes in
	// between join it (the delaying queue keeps one entry per cluster).
	st.OnChange(func(cluster string) { p.queue.AddAfter(cluster, interval) })
	return p
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
	restored := 0
	for i := range list.Items {
		inv := &list.Items[i]
		// Inventories of deregistered clusters wait for the garbage collector.
		if inv.Spec.ClusterName == "" || inv.Namespace != inv.Spec.ClusterName || !registered[inv.Spec.ClusterName] {
			continue
		}
		p.last[inv.Spec.ClusterName] = inv.DeepCopy()
		p.store.Restore(clusterFromInventory(inv))
		restored++
	}
	p.log.Info("Restored inventories", "clusters", restored)
	return nil
}

// NeedLeaderElection is false: the replica holding a spoke's stream writes it.
func (p *Persister) NeedLeaderElection() bool { return false }

// flushTimeout bounds the final write of every cluster on shutdown.
const flushTimeout = 10 * time.Second

// Start writes until ctx is done, then writes what is still pending, so that
// a restarted hub loses nothing it had acknowledged.
func (p *Persister) Start(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		p.queue.ShutDown()
	}()
	for {
		cluster, shutdown := p.queue.Get()
		if shutdown {
			break
		}
		if err := p.sync(ctx, cluster); err != nil {
			p.log.Error(err, "Persisting cluster failed; retrying", "cluster", cluster)
			p.queue.AddAfter(cluster, p.interval)
		}
		p.queue.Done(cluster)
	}
	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
	defer cancel()
	for _, c := range p.store.List() {
		// sync writes nothing for clusters whose inventory is unchanged.
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
		delete(p.last, name)
		return nil
	}
	available := c.State == store.StateAvailable
	msg := "The spoke agent is heartbeating"
	if !available {
		msg = fmt.Sprintf("No heartbeat from the spoke agent for more than %s", p.store.GracePeriod())
	}
	mc, err := registry.SetAvailable(ctx, p.client, name, available, msg)
	if err != nil {
		return err
	}
	if mc == nil {
		// Deregistered: do not recreate its namespace and inventory.
		p.log.V(1).Info("Not persisting a cluster without ManagedCluster", "cluster", name)
		return nil
	}
	inv, err := p.inventory(ctx, mc)
	if err != nil {
		return err
	}
	next := inv.DeepCopy()
	status := metav1.ConditionTrue
	reason := registry.ReasonAvailable
	if !available {
		status, reason = metav1.ConditionUnknown, registry.ReasonUnknown
	}
	meta.SetStatusCondition(&next.Status.Conditions, metav1.Condition{
		Type: imperatorv1alpha1.ConditionAvailable, Status: status, Reason: reason, Message: msg, ObservedGeneration: inv.Generation,
	})
	next.Status.AgentVersion = c.AgentVersion
	next.Status.Epoch = c.Epoch
	next.Status.Generation = c.Generation
	next.Status.ObservedAt = metaTime(c.ObservedAt)
	next.Status.Machines = machinesToAPI(c.Machines)
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
	if err := p.client.Status().Patch(ctx, next, client.MergeFrom(inv)); err != nil {
		delete(p.last, name)
		return fmt.Errorf("patching ClusterInventory %s/%s status: %w", name, InventoryName(name), err)
	}
	p.last[name] = next
	p.log.V(2).Info("Persisted inventory", "cluster", name, "generation", c.Generation)
	return nil
}

// inventory returns the cluster's ClusterInventory, creating it (and its
// namespace) when missing, owned by the ManagedCluster so that deregistering
// the cluster deletes it.
func (p *Persister) inventory(ctx context.Context, mc *clusterv1.ManagedCluster) (*imperatorv1alpha1.ClusterInventory, error) {
	name := mc.Name
	if inv, ok := p.last[name]; ok {
		return inv, nil
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
				Namespace: name,
				Name:      InventoryName(name),
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: clusterv1.GroupVersion.String(),
					Kind:       "ManagedCluster",
					Name:       mc.Name,
					UID:        mc.UID,
				}},
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
