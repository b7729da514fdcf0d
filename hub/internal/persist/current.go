package persist

import (
	"context"
	"fmt"

	"github.com/imperator-federation/imperator/internal/text"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/store"
)

// ConditionInventoryCurrent is the ClusterInventory condition that says
// whether its status holds the spoke's current inventory. Other replicas
// honour it: while it is False they serve the cluster's figures as stale
// (never as free capacity), however fresh the serving replica's Lease is.
const ConditionInventoryCurrent = "InventoryCurrent"

// Reasons of ConditionInventoryCurrent.
const (
	// ReasonPersisted: the status holds the inventory the hub last took in.
	ReasonPersisted = "Persisted"
	// ReasonInventoryRefused: the spoke's last Snapshot or Delta broke the
	// hub's limits; the status holds the last good inventory.
	ReasonInventoryRefused = "InventoryRefused"
	// ReasonPersistFailed: the hub cluster's API refused to store the
	// inventory (too large for etcd, invalid, …); the status is older.
	ReasonPersistFailed = "PersistFailed"
	// ReasonSpokeAPIServerUnreachable: the spoke's agent cannot reach its
	// own API server, so the figures it sends come from a cache that hears
	// of no change.
	ReasonSpokeAPIServerUnreachable = "SpokeAPIServerUnreachable"
)

// maxConditionMessage bounds a condition message (the API allows 32 KiB).
const maxConditionMessage = 2048

var (
	persistFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "imperator_hub_inventory_persist_failures_total",
		Help: "Writes of a cluster's ClusterInventory status that the hub cluster's API refused, by API reason (conflicts, which are retried at once, excluded).",
	}, []string{"reason"})
	inventoryNotCurrent = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "imperator_hub_cluster_inventory_not_current",
		Help: "1 while the ClusterInventory of a cluster served by this replica does not hold the spoke's current inventory (refused by the hub or by the API); the series goes when it does again.",
	}, []string{"cluster"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(persistFailures, inventoryNotCurrent)
}

// setCurrentCondition sets the inventory's InventoryCurrent condition and
// reports whether it changed.
func setCurrentCondition(inv *imperatorv1alpha1.ClusterInventory, current bool, reason, msg string) bool {
	status := metav1.ConditionTrue
	if !current {
		status = metav1.ConditionFalse
	}
	msg = text.Truncate(msg, maxConditionMessage)
	return meta.SetStatusCondition(&inv.Status.Conditions, metav1.Condition{
		Type: ConditionInventoryCurrent, Status: status, Reason: reason, Message: msg, ObservedGeneration: inv.Generation,
	})
}

// outdatedOf is why a persisted inventory is not the spoke's current one,
// empty when it is (or when no replica said otherwise).
func outdatedOf(inv *imperatorv1alpha1.ClusterInventory) string {
	c := meta.FindStatusCondition(inv.Status.Conditions, ConditionInventoryCurrent)
	if c == nil || c.Status != metav1.ConditionFalse {
		return ""
	}
	return fmt.Sprintf("%s: %s", c.Reason, c.Message)
}

// currentCondition is the InventoryCurrent condition a cluster's figures
// deserve when written.
func currentCondition(c *store.Cluster) (current bool, reason, msg string) {
	if c.Outdated != "" {
		return false, ReasonInventoryRefused, c.Outdated
	}
	if c.APIServerUnreachable() {
		return false, ReasonSpokeAPIServerUnreachable, c.APIServerUnreachableMessage()
	}
	return true, ReasonPersisted, "The status holds the spoke's current inventory"
}

// writeFailed handles a write of the cluster's inventory status that the
// API refused with err (not a conflict): it counts and logs it, and tells
// the other replicas with the condition alone — a small write — that the
// status is older than the spoke's. When even that fails, nothing honest
// reached the API: the cluster's Lease is withheld until a write succeeds,
// so that the other replicas see the cluster go silent rather than serve
// the old figures as live.
func (p *Persister) writeFailed(ctx context.Context, c *store.Cluster, inv *imperatorv1alpha1.ClusterInventory, err error) {
	name := c.Name
	reason := string(apierrors.ReasonForError(err))
	if reason == "" {
		reason = "Unknown"
	}
	persistFailures.WithLabelValues(reason).Inc()
	inventoryNotCurrent.WithLabelValues(name).Set(1)
	p.log.Error(err, "The hub cluster's API refused the cluster's inventory; marking it not current", "cluster", name, "generation", c.Generation, "machines", len(c.Machines))

	only := inv.DeepCopy()
	msg := fmt.Sprintf("The hub could not store the spoke's inventory of generation %d (%d Machines): %v", c.Generation, len(c.Machines), err)
	if !setCurrentCondition(only, false, ReasonPersistFailed, msg) {
		return
	}
	state := p.state(name)
	if perr := p.client.Status().Patch(ctx, only, client.MergeFromWithOptions(inv, client.MergeFromWithOptimisticLock{})); perr != nil {
		state.last = nil
		state.withheld = true
		p.log.Error(perr, "Could not mark the cluster's inventory not current either; releasing its Lease", "cluster", name)
		if rerr := p.releaseLease(ctx, c); rerr != nil {
			p.log.Error(rerr, "Could not release the cluster's Lease either; trying again with the next write", "cluster", name)
		}
		return
	}
	state.last = only
	state.withheld = false
}

// persisted records that the cluster's current figures were written.
func (p *Persister) persisted(c *store.Cluster) {
	p.state(c.Name).withheld = false
	if current, _, _ := currentCondition(c); current {
		inventoryNotCurrent.DeleteLabelValues(c.Name)
	} else {
		inventoryNotCurrent.WithLabelValues(c.Name).Set(1)
	}
}
