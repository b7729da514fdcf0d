package persist

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/hub/internal/store"
)

// upkeep is the periodic look at a cluster whose stream is open here when
// there is nothing to sync: it takes the cluster's Lease if another replica
// holds it, and puts its Available conditions right (not a Lease renewal:
// replicas renew their own Leases, see replica.go; nor the spokes'
// certificate renewal).
func (p *Persister) upkeep(ctx context.Context, name string) error {
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
	if _, err := registry.SetAvailable(ctx, p.client, name, availability(c, p.store.GracePeriod())); err != nil && c.Liveness == store.LivenessAvailable {
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
	if c.Liveness != store.LivenessAvailable {
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

// availability is what the ManagedCluster's Available condition says of c.
func availability(c *store.Cluster, grace time.Duration) registry.Availability {
	available := c.Liveness == store.LivenessAvailable
	return registry.Availability{
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
	mc, err := registry.SetAvailable(ctx, p.client, name, registry.Availability{Message: msg})
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
