// Package persist keeps the hub's in-memory index and the hub cluster's
// Kubernetes API in step, which is also how hub replicas share state.
//
// The replica holding a spoke's Report stream writes the cluster: one
// ClusterInventory (in the namespace named like the cluster, as OCM does)
// with the last snapshot, the ManagedCluster's Available condition, and the
// cluster's Lease (LeaseName), which names the replica serving it. Writes
// are coalesced: at most one per cluster per interval, and none when
// nothing changed. The Persister is a controller-runtime controller on
// every replica, fed with the store's changed clusters (store.Source);
// RequeueAfter brings a cluster back when its interval is over, and every
// RenewInterval while its stream is open here.
//
// Liveness across replicas, with writes independent of the fleet's size:
// heartbeats are never written. Each replica renews one replica Lease
// (ReplicaLeaseName, in the hub's namespace) every RenewInterval: "this
// replica runs". A cluster's Lease is written only when its holder changes
// (the spoke's stream opened on another replica) or is released (see
// writeFailed); the holder writes the inventory's Available condition
// Unknown when its spoke goes silent. Another replica judges a cluster live
// while it saw the holder renew its replica Lease within the grace period
// (by its own clock: the replicas' clocks may disagree) and the holder has
// not marked the cluster Unknown. At steady state the hub cluster sees one
// write per replica per RenewInterval (0.4 writes/s for two replicas at the
// default 40 s grace), whatever the number of spokes; before, each cluster's
// Lease was renewed every 5–10 s (2,000 writes/s at 10,000 spokes).
//
// Failover timing this implies (grace period G, 40 s by default):
//   - a spoke silent on a running replica: that replica turns it Unknown G
//     after its last message and writes the condition (within an interval,
//     3 s); the others follow the write. Unchanged.
//   - a replica that dies: the others last saw its Lease renewed at most
//     RenewInterval (G/8) before; its clusters turn Unknown G after that
//     sighting (G to G + G/8 after the death), and the elected leader marks
//     them Unknown in the API. A replica that stops cleanly deletes its
//     Lease; its spokes reconnect elsewhere meanwhile, and the new holder
//     takes each cluster's Lease, which the others see at once.
//
// Every replica reads them back: all of them on start (Restore), then the
// other replicas' writes as they happen (Follower). The elected leader marks
// Unknown the clusters whose serving replica went away with them.
//
// Honesty: the inventory's InventoryCurrent condition says whether its
// status is the spoke's current inventory; followers serve the figures as
// stale while it is False (the hub refused the spoke's last message, or the
// API refused the write). A replica that cannot write even that condition
// releases the cluster's Lease, so that nobody serves its old figures as
// live.
package persist
