package persist

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/store"
)

// LeaseName is the Lease in a cluster's namespace that the hub replica
// holding the cluster's Report stream renews with the spoke's heartbeats:
// holderIdentity names the replica, renewTime is when it last heard from the
// spoke. Other replicas judge the cluster's liveness from it.
const LeaseName = "imperator-spoke"

// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;patch

// RenewInterval is how often the serving replica renews a cluster's Lease
// while heartbeats arrive: a quarter of the grace period, so that a few lost
// writes do not make other replicas think the cluster silent.
func RenewInterval(grace time.Duration) time.Duration { return max(grace/4, 100*time.Millisecond) }

// renewLeases queues the clusters whose streams are open here every
// RenewInterval, so that their Leases follow the heartbeats.
func (p *Persister) renewLeases(ctx context.Context) {
	wait.UntilWithContext(ctx, func(context.Context) {
		for _, c := range p.store.List() {
			if c.Connected && p.store.Local(c) {
				p.queue.Add(c.Name)
			}
		}
	}, RenewInterval(p.store.GracePeriod()))
}

// renewLease writes the cluster's Lease when this replica does not hold it
// yet, or when the spoke's last heartbeat is RenewInterval newer than it.
func (p *Persister) renewLease(ctx context.Context, c *store.Cluster, mc *clusterv1.ManagedCluster) error {
	self := p.store.Replica()
	renew := metav1.NewMicroTime(c.LastHeartbeat)
	cur, ok := p.leases[c.Name]
	if !ok {
		cur = &coordinationv1.Lease{}
		err := p.client.Get(ctx, client.ObjectKey{Namespace: c.Name, Name: LeaseName}, cur)
		if apierrors.IsNotFound(err) {
			lease := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: c.Name,
					Name:      LeaseName,
					Labels:    map[string]string{imperatorv1alpha1.Prefix + "cluster": c.Name},
					OwnerReferences: []metav1.OwnerReference{{
						APIVersion: clusterv1.GroupVersion.String(), Kind: "ManagedCluster", Name: mc.Name, UID: mc.UID,
					}},
				},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity:       ptr.To(self),
					LeaseDurationSeconds: ptr.To(int32(p.store.GracePeriod().Round(time.Second) / time.Second)),
					AcquireTime:          ptr.To(renew),
					RenewTime:            ptr.To(renew),
				},
			}
			if err := p.client.Create(ctx, lease); err != nil {
				return fmt.Errorf("creating Lease %s/%s: %w", c.Name, LeaseName, err)
			}
			p.leases[c.Name] = lease
			return nil
		}
		if err != nil {
			return fmt.Errorf("getting Lease %s/%s: %w", c.Name, LeaseName, err)
		}
	}
	holder := ptr.Deref(cur.Spec.HolderIdentity, "")
	renewed := time.Time{}
	if cur.Spec.RenewTime != nil {
		renewed = cur.Spec.RenewTime.Time
	}
	if holder == self && c.LastHeartbeat.Sub(renewed) < RenewInterval(p.store.GracePeriod()) {
		p.leases[c.Name] = cur
		return nil
	}
	next := cur.DeepCopy()
	next.Spec.HolderIdentity = ptr.To(self)
	next.Spec.RenewTime = ptr.To(renew)
	next.Spec.LeaseDurationSeconds = ptr.To(int32(p.store.GracePeriod().Round(time.Second) / time.Second))
	if holder != self {
		next.Spec.AcquireTime = ptr.To(renew)
		next.Spec.LeaseTransitions = ptr.To(ptr.Deref(cur.Spec.LeaseTransitions, 0) + 1)
	}
	if err := p.client.Patch(ctx, next, client.MergeFrom(cur)); err != nil {
		delete(p.leases, c.Name)
		return fmt.Errorf("renewing Lease %s/%s: %w", c.Name, LeaseName, err)
	}
	p.leases[c.Name] = next
	return nil
}

// peerOf is what an inventory and its Lease say about a cluster; the Lease
// is live when it was renewed after started.
func peerOf(inv *imperatorv1alpha1.ClusterInventory, lease *coordinationv1.Lease, started time.Time) store.Peer {
	peer := store.Peer{Inventory: clusterFromInventory(inv)}
	if lease != nil {
		peer.Replica = ptr.Deref(lease.Spec.HolderIdentity, "")
		if lease.Spec.RenewTime != nil {
			peer.RenewTime = lease.Spec.RenewTime.Time
		}
		peer.Live = !started.IsZero() && peer.RenewTime.After(started)
	}
	return peer
}
