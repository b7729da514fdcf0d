package persist

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/hub/internal/store"
)

// sync writes what this replica knows of one cluster to the hub cluster's
// API, in phases: whether this replica is the one to write it, the Lease
// that tells the others so, the ManagedCluster's availability, then the
// ClusterInventory's status (writeInventory).
func (p *Persister) sync(ctx context.Context, name string) error {
	c, ok := p.store.Get(name)
	if !ok {
		// Deregistered: the inventory goes with the ManagedCluster.
		p.forget(name)
		return nil
	}
	if elsewhere, err := p.writtenElsewhere(ctx, c); err != nil || elsewhere {
		return err
	}
	mc, err := p.managedCluster(ctx, name)
	if err != nil || mc == nil {
		return err
	}
	state := p.state(name)
	if moved, err := p.holdLease(ctx, c, mc, state); err != nil || moved {
		return err
	}
	available := c.Liveness == store.LivenessAvailable
	// setErr is a failure to mark the ManagedCluster Unknown. The other
	// replicas judge the cluster by its inventory's Available condition
	// (this replica's own Lease keeps being renewed), so the inventory is
	// written all the same, and the ManagedCluster tried again.
	var setErr error
	if _, err := registry.SetAvailable(ctx, p.client, name, availability(c, p.store.GracePeriod())); err != nil {
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
	if err := p.writeInventory(ctx, c, mc, state); err != nil {
		return err
	}
	return setErr
}

// writtenElsewhere reports whether another replica writes c's inventory:
// it serves the cluster, or the stream ended here and the spoke may be on
// another replica by now, whose writes must not be overwritten with older
// figures (this replica's cache may not show them yet, or be stopped).
func (p *Persister) writtenElsewhere(ctx context.Context, c *store.Cluster) (bool, error) {
	if !p.store.Local(c) {
		// When that replica went away and the spoke with it, the leader
		// says so.
		p.drop(c.Name)
		if c.Liveness == store.LivenessUnknown && p.leader() {
			return true, p.markUnknown(ctx, c)
		}
		return true, nil
	}
	if !c.Connected {
		return p.movedAway(ctx, c)
	}
	return false, nil
}

// holdLease renews the cluster's Lease while its stream is here and its
// figures can be written (first: the others must know who serves the
// cluster before they read what it writes), and releases it while they
// cannot. moved: another replica holds it now.
func (p *Persister) holdLease(ctx context.Context, c *store.Cluster, mc *clusterv1.ManagedCluster, state *remembered) (moved bool, err error) {
	switch {
	case c.Connected && !state.withheld:
		return p.renewLease(ctx, c, mc)
	case state.withheld:
		if err := p.releaseLease(ctx, c); err != nil {
			p.log.Error(err, "Could not release the Lease of a cluster whose inventory cannot be written", "cluster", c.Name)
		}
	}
	return false, nil
}

// writeInventory patches the ClusterInventory's status to what c says, when
// that differs from what is stored by more than the heartbeat time.
func (p *Persister) writeInventory(ctx context.Context, c *store.Cluster, mc *clusterv1.ManagedCluster, state *remembered) error {
	inv, err := p.inventory(ctx, mc)
	if err != nil {
		return err
	}
	next := inv.DeepCopy()
	p.setInventoryStatus(next, c)
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
			state.last = nil
		} else {
			p.writeFailed(ctx, c, inv, err)
		}
		return fmt.Errorf("patching ClusterInventory %s/%s status: %w", c.Name, InventoryName(c.Name), err)
	}
	state.last = next
	released := state.withheld
	p.persisted(c)
	p.wrote(c.Name)
	if released && c.Connected {
		// Honest figures are in again: take the Lease back at once.
		if _, err := p.renewLease(ctx, c, mc); err != nil {
			return err
		}
	}
	p.log.V(2).Info("Persisted inventory", "cluster", c.Name, "generation", c.Generation)
	return nil
}

// setInventoryStatus sets inv's status to what c says, but for the
// heartbeat time.
func (p *Persister) setInventoryStatus(inv *imperatorv1alpha1.ClusterInventory, c *store.Cluster) {
	available := c.Liveness == store.LivenessAvailable
	setAvailableCondition(inv, available, availabilityMessage(available, p.store.GracePeriod()))
	inv.Status.AgentVersion = c.AgentVersion
	inv.Status.AgentMode = c.AgentMode
	inv.Status.InjectionUnavailable = c.InjectionUnavailable
	inv.Status.Epoch = c.Epoch
	inv.Status.Generation = c.Generation
	inv.Status.ObservedAt = metaTime(c.ObservedAt)
	inv.Status.Machines = machinesToAPI(c.Machines)
	current, reason, currentMsg := currentCondition(c)
	setCurrentCondition(inv, current, reason, currentMsg)
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
