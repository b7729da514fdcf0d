package persist

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/hub/internal/store"
)

// LeaseName is the Lease in a cluster's namespace that says which hub
// replica holds the cluster's Report stream: holderIdentity names the
// replica, acquireTime and renewTime are when it took the Lease (when the
// spoke's stream opened there). It is written only when the holder changes
// (or is withheld, see writeFailed), never with heartbeats: the holder's
// replica Lease (ReplicaLeaseName) says that the holder still runs, and the
// cluster's inventory says when the holder found its spoke silent.
const LeaseName = "imperator-spoke"

// Only the spokes' Leases (list and watch by metadata.name field selector);
// creating cannot be limited by name.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,resourceNames=imperator-spoke,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=create

// RenewInterval is how often a replica renews its replica Lease, and how
// often the serving replica looks at a cluster whose stream is open here
// (to put right a condition someone else wrote): an eighth of the grace
// period, 5 s of the default 40 s. Other replicas judge a renewal by when
// they see it, so a replica seen renewing within the grace period has
// missed at most seven renewals, which leaves room for a slow API server.
func RenewInterval(grace time.Duration) time.Duration { return max(grace/8, 100*time.Millisecond) }

// leaseHolder is who holds a Lease and when it was renewed.
func leaseHolder(l *coordinationv1.Lease) (string, time.Time) {
	var renewed time.Time
	if l.Spec.RenewTime != nil {
		renewed = l.Spec.RenewTime.Time
	}
	return ptr.Deref(l.Spec.HolderIdentity, ""), renewed
}

// movedAway reports whether another replica heard from the cluster's spoke
// after this one did, reading the Lease from the API server.
func (p *Persister) movedAway(ctx context.Context, c *store.Cluster) (bool, error) {
	lease := &coordinationv1.Lease{}
	if err := p.reader.Get(ctx, client.ObjectKey{Namespace: c.Name, Name: LeaseName}, lease); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("getting Lease %s/%s: %w", c.Name, LeaseName, err)
	}
	holder, renewed := leaseHolder(lease)
	// Renewals count from when this replica saw them: the holder's clock
	// may not agree with this one's.
	if holder != p.store.Replica() && p.store.LeaseSeenAt(c, holder, renewed).After(c.LastHeartbeat) {
		p.forget(c.Name)
		p.log.V(1).Info("Not persisting a cluster another replica serves now", "cluster", c.Name, "replica", holder)
		return true, nil
	}
	return false, nil
}

// renewLease takes the cluster's Lease when this replica does not hold it
// yet; while it does, nothing is written (heartbeats are not: the replica
// Lease says this replica runs). It never takes the Lease from a replica
// that heard from the spoke later (moved is then true: the stream open here
// is a leftover), judged by when this replica saw that replica take it.
// Writes carry the Lease's resourceVersion, so that a stale copy never hides
// the holder.
func (p *Persister) renewLease(ctx context.Context, c *store.Cluster, mc *clusterv1.ManagedCluster) (moved bool, err error) {
	self := p.store.Replica()
	renew := metav1.NewMicroTime(c.LastHeartbeat)
	duration := ptr.To(int32(p.store.GracePeriod().Round(time.Second) / time.Second))
	state := p.state(c.Name)
	cur := state.lease
	if cur == nil {
		var created bool
		if cur, created, err = p.readOrCreateLease(ctx, c, mc, self, renew, duration); err != nil {
			return false, err
		}
		if created {
			state.lease = cur
			return false, nil
		}
	}
	holder, renewed := leaseHolder(cur)
	switch {
	case holder != "" && holder != self && !c.LastHeartbeat.After(p.store.LeaseSeenAt(c, holder, renewed)):
		// Another replica renewed it after this one last heard from the
		// spoke, as far as this replica has seen (not by the times written
		// in it: the holder's clock may not agree with this one's). A
		// renewal not seen yet counts from now: the next heartbeat takes it.
		p.forget(c.Name)
		p.log.Info("Spoke reports to another hub replica now; leaving its Lease", "cluster", c.Name, "replica", holder)
		return true, nil
	case holder == self:
		state.lease = cur
		return false, nil
	}
	next := cur.DeepCopy()
	next.Spec.HolderIdentity = ptr.To(self)
	next.Spec.RenewTime = ptr.To(renew)
	next.Spec.LeaseDurationSeconds = duration
	if holder != self {
		next.Spec.AcquireTime = ptr.To(renew)
		next.Spec.LeaseTransitions = ptr.To(ptr.Deref(cur.Spec.LeaseTransitions, 0) + 1)
	}
	if err := p.client.Patch(ctx, next, client.MergeFromWithOptions(cur, client.MergeFromWithOptimisticLock{})); err != nil {
		// A conflict: someone wrote it since; the retry reads it afresh.
		state.lease = nil
		return false, fmt.Errorf("renewing Lease %s/%s: %w", c.Name, LeaseName, err)
	}
	state.lease = next
	return false, nil
}

// readOrCreateLease reads the cluster's Lease from the API server, or
// creates it held by self when there is none (created is then true), for
// renewLease when this replica holds no copy of it.
func (p *Persister) readOrCreateLease(ctx context.Context, c *store.Cluster, mc *clusterv1.ManagedCluster, self string, renew metav1.MicroTime, duration *int32) (cur *coordinationv1.Lease, created bool, err error) {
	key := client.ObjectKey{Namespace: c.Name, Name: LeaseName}
	// The holder is read from the API server, not the cache. A new
	// cluster's Lease, which the cache does not hold either, is
	// created at once: the create fails if it exists after all.
	err = p.client.Get(ctx, key, &coordinationv1.Lease{}, client.UnsafeDisableDeepCopy)
	cur = &coordinationv1.Lease{}
	if err == nil {
		err = p.reader.Get(ctx, key, cur)
	}
	if apierrors.IsNotFound(err) {
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:       c.Name,
				Name:            LeaseName,
				Labels:          map[string]string{imperatorv1alpha1.Prefix + "cluster": c.Name},
				OwnerReferences: ownedBy(mc),
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(self),
				LeaseDurationSeconds: duration,
				AcquireTime:          ptr.To(renew),
				RenewTime:            ptr.To(renew),
			},
		}
		err = p.client.Create(ctx, lease)
		if apierrors.IsNotFound(err) {
			// The cluster's namespace is missing (deleted by hand):
			// registration made it, and the Lease and the inventory
			// live in it.
			if err := registry.EnsureNamespace(ctx, p.client, c.Name); err != nil {
				return nil, false, err
			}
			err = p.client.Create(ctx, lease)
		}
		if err == nil {
			return lease, true, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, false, fmt.Errorf("creating Lease %s/%s: %w", c.Name, LeaseName, err)
		}
		// Another replica made it, or the cache had not seen it yet.
		cur = &coordinationv1.Lease{}
		err = p.reader.Get(ctx, key, cur)
	}
	if err != nil {
		return nil, false, fmt.Errorf("getting Lease %s/%s: %w", c.Name, LeaseName, err)
	}
	return cur, false, nil
}

// releaseLease frees the cluster's Lease when this replica holds it, so that
// the other replicas stop judging the cluster by this replica's own Lease
// (see writeFailed): they see it go silent within the grace period.
func (p *Persister) releaseLease(ctx context.Context, c *store.Cluster) error {
	state := p.state(c.Name)
	cur := state.lease
	if cur == nil {
		cur = &coordinationv1.Lease{}
		if err := p.reader.Get(ctx, client.ObjectKey{Namespace: c.Name, Name: LeaseName}, cur); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
	if holder, _ := leaseHolder(cur); holder != p.store.Replica() {
		return nil
	}
	next := cur.DeepCopy()
	next.Spec.HolderIdentity = nil
	if err := p.client.Patch(ctx, next, client.MergeFromWithOptions(cur, client.MergeFromWithOptimisticLock{})); err != nil {
		state.lease = nil
		return fmt.Errorf("releasing Lease %s/%s: %w", c.Name, LeaseName, err)
	}
	state.lease = next
	return nil
}

// peerOf is what an inventory and its Lease say about a cluster; the Lease
// is live when it was taken after started.
func peerOf(inv *imperatorv1alpha1.ClusterInventory, lease *coordinationv1.Lease, started time.Time) store.Peer {
	peer := store.Peer{Inventory: clusterFromInventory(inv), Outdated: outdatedOf(inv), Silent: availableStatus(inv) == metav1.ConditionUnknown}
	if lease != nil {
		peer.Replica, peer.RenewTime = leaseHolder(lease)
		peer.Live = !started.IsZero() && peer.RenewTime.After(started)
	}
	return peer
}
