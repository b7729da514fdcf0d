package persist

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// Replica Leases: one per hub replica in the hub's namespace, renewed every
// RenewInterval, that say "this replica runs". Their names derive from the
// replica's name (which need not be a valid object name), so RBAC cannot
// list them by name: the rule is narrow by namespace instead.
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=imperator-system,resources=leases,verbs=get;list;watch;create;patch;delete

// ReplicaLeasePrefix starts the name of every replica Lease.
const ReplicaLeasePrefix = "imperator-replica-"

// ReplicaLabel marks a replica Lease with "true" (the replica's name is in
// holderIdentity).
const ReplicaLabel = imperatorv1alpha1.Prefix + "hub-replica"

// ReplicaLeaseName is the name of the replica Lease of the replica named
// replica: its name made a valid object name, and a digest of it so that
// two replicas whose names differ only in what that drops do not share one.
func ReplicaLeaseName(replica string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(replica) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	name := strings.Trim(b.String(), "-")
	if len(name) > 40 {
		name = name[:40]
	}
	sum := sha256.Sum256([]byte(replica))
	return ReplicaLeasePrefix + strings.TrimPrefix(name+"-", "-") + hex.EncodeToString(sum[:4])
}

// IsReplicaLease is true for a replica Lease: named with the prefix and
// labelled (the hub's cache holds them from its namespace only).
func IsReplicaLease(obj client.Object) bool {
	return strings.HasPrefix(obj.GetName(), ReplicaLeasePrefix) && obj.GetLabels()[ReplicaLabel] == "true"
}

// staleReplicaLease is how long a replica Lease may go without renewal
// before a replica starting, or any replica once an hour, deletes it: a
// replica that crashed leaves its Lease behind (one that stops deletes its
// own).
const staleReplicaLease = time.Hour

// runReplicaLease renews this replica's Lease every RenewInterval until ctx
// is done, then deletes it. A failed renewal is logged and tried again at
// the next tick: the other replicas tolerate seven missed renewals.
func (p *Persister) runReplicaLease(ctx context.Context) error {
	self := p.store.Replica()
	name := ReplicaLeaseName(self)
	interval := RenewInterval(p.store.GracePeriod())
	p.deleteStaleReplicaLeases(ctx)
	lastSweep := p.clock.Now()
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		if err := p.renewReplicaLease(ctx, name, self); err != nil && ctx.Err() == nil {
			p.log.Error(err, "Renewing this replica's Lease failed; the other replicas judge its clusters silent if it keeps failing", "lease", name)
		}
		if p.clock.Since(lastSweep) > staleReplicaLease {
			p.deleteStaleReplicaLeases(ctx)
			lastSweep = p.clock.Now()
		}
		select {
		case <-ctx.Done():
			// Gone: the Lease goes with it, so that the other replicas
			// forget it (its clusters go Unknown when the grace period
			// since its last renewal runs out, unless their spokes report
			// elsewhere first) and nobody has to sweep it.
			delCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: p.namespace, Name: name}}
			if err := client.IgnoreNotFound(p.client.Delete(delCtx, lease)); err != nil {
				p.log.Error(err, "Deleting this replica's Lease on shutdown failed", "lease", name)
			}
			return nil
		case <-ticker.C:
		}
	}
}

// renewReplicaLease sets the replica Lease's renewTime to now, creating
// the Lease when missing. Only this replica writes it: no optimistic lock.
func (p *Persister) renewReplicaLease(ctx context.Context, name, self string) error {
	now := metav1.NewMicroTime(p.clock.Now())
	duration := ptr.To(int32(p.store.GracePeriod().Round(time.Second) / time.Second))
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: p.namespace, Name: name}}
	patch := []byte(fmt.Sprintf(`{"spec":{"renewTime":%q}}`, now.UTC().Format(metav1.RFC3339Micro)))
	err := p.client.Patch(ctx, lease, client.RawPatch("application/merge-patch+json", patch))
	if !apierrors.IsNotFound(err) {
		if err != nil {
			return fmt.Errorf("renewing Lease %s/%s: %w", p.namespace, name, err)
		}
		return nil
	}
	lease = &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.namespace, Name: name, Labels: map[string]string{ReplicaLabel: "true"}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(self),
			LeaseDurationSeconds: duration,
			AcquireTime:          ptr.To(now),
			RenewTime:            ptr.To(now),
		},
	}
	if err := p.client.Create(ctx, lease); err != nil {
		return fmt.Errorf("creating Lease %s/%s: %w", p.namespace, name, err)
	}
	return nil
}

// deleteStaleReplicaLeases deletes the replica Leases not renewed for
// staleReplicaLease (by this replica's clock, which an hour of skew would
// not fool).
func (p *Persister) deleteStaleReplicaLeases(ctx context.Context) {
	var leases coordinationv1.LeaseList
	if err := p.reader.List(ctx, &leases, client.InNamespace(p.namespace), client.MatchingLabels{ReplicaLabel: "true"}); err != nil {
		p.log.Error(err, "Listing replica Leases failed; stale ones stay until the next sweep")
		return
	}
	for i := range leases.Items {
		l := &leases.Items[i]
		if _, renewed := leaseHolder(l); renewed.IsZero() || p.clock.Since(renewed) < staleReplicaLease {
			continue
		}
		err := p.client.Delete(ctx, l, client.Preconditions{ResourceVersion: ptr.To(l.ResourceVersion)})
		switch {
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Deleted by another replica, or renewed after all.
			continue
		case err != nil:
			p.log.Error(err, "Deleting a stale replica Lease failed", "lease", l.Name)
			continue
		}
		p.log.Info("Deleted the Lease of a replica gone for long", "lease", l.Name, "replica", ptr.Deref(l.Spec.HolderIdentity, ""))
	}
}

// LeaseCache is what the manager's cache holds of Leases: the clusters'
// Leases (LeaseName) in every namespace, and the replica Leases in the
// hub's namespace — not every Lease of the hub cluster.
func LeaseCache(namespace string) cache.ByObject {
	return cache.ByObject{Namespaces: map[string]cache.Config{
		namespace:           {LabelSelector: labels.SelectorFromSet(labels.Set{ReplicaLabel: "true"})},
		cache.AllNamespaces: {FieldSelector: fields.OneTermEqualSelector("metadata.name", LeaseName)},
	}}
}
