package registry

import (
	"context"
	"fmt"

	toolscache "k8s.io/client-go/tools/cache"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// Deregistrations calls Forget with the name of every ManagedCluster that is
// deleted, so that the hub drops the cluster from memory and ends its stream.
// Its ClusterInventory goes with it through its owner reference. It is a
// controller-runtime Runnable.
type Deregistrations struct {
	Cache  cache.Cache
	Forget func(cluster string)
}

// NeedLeaderElection is false: every replica keeps its own index.
func (d *Deregistrations) NeedLeaderElection() bool { return false }

// Start watches until ctx is done.
func (d *Deregistrations) Start(ctx context.Context) error {
	informer, err := d.Cache.GetInformer(ctx, &clusterv1.ManagedCluster{})
	if err != nil {
		return fmt.Errorf("watching ManagedClusters: %w", err)
	}
	reg, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if mc, ok := obj.(*clusterv1.ManagedCluster); ok {
				d.Forget(mc.Name)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watching ManagedClusters: %w", err)
	}
	<-ctx.Done()
	return informer.RemoveEventHandler(reg)
}
