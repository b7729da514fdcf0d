package persist

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

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
