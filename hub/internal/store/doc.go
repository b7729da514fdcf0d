// Package store is the hub's in-memory index of every spoke cluster: the last
// inventory each spoke reported (its Machines, usage and node-pool health),
// the generation state machine that applies Snapshots and Deltas, and each
// cluster's liveness. It is the only place queries read from; the API server
// copy (ClusterInventory) is written from it and reloaded into it on restart.
//
// Every Cluster value handed out is an immutable snapshot: writers build a new
// value (copy-on-write) and swap it in under the lock, so readers never copy
// and never see a half-applied Delta. The costly part of a write — checking
// a spoke's message against the limits (package ingest), sorting, merging a
// Delta into a new Machines slice — happens before the lock is taken; under
// it only the generation checks and the swap run.
//
// Glossary: one word for each idea about a cluster, used across the hub.
//
//   - Liveness (type Liveness, field Cluster.Liveness): whether the spoke is
//     heard from. LivenessAvailable while any message (or, for a cluster
//     another replica serves, a renewal of its Lease) arrived within the
//     grace period; LivenessUnknown after, and until the first message after
//     a start. Only time and the spoke's messages move it; package liveness
//     is the controller that turns silent clusters Unknown.
//   - OCM's Available condition on the ManagedCluster derives from Liveness:
//     True while Available, False while Available but the spoke's agent
//     cannot reach its own API server, Unknown while Unknown
//     (registry.Availability is what it is computed from). The Available
//     condition of the cluster's ClusterInventory is True or Unknown, as
//     Liveness is.
//   - The query API's cluster state (capacity.StateOf) derives from it too:
//     OFFLINE while Unknown; STALE while Available but the figures may not
//     reflect the cluster (Cluster.Stale: restored and not confirmed,
//     outdated, or the agent cannot reach its API server); AVAILABLE
//     otherwise. OFFLINE is the users' word for Unknown.
//   - Phase: where the figures held come from (the spoke's stream here,
//     another replica, the API server copy) and what the spoke's next message
//     does. It is not liveness: a Remote cluster can be Available or Unknown.
//
// Phase moves only through this table (Transition; a pair marked - is
// refused and changes nothing):
//
//	from \ event | Connect   | Disconnect | Snapshot  | Resync    | ObserveLive | ObserveRestored | ConfirmReplica
//	Idle         | Streaming | -          | Idle      | -         | Remote      | Restored        | -
//	Streaming    | Streaming | Idle       | Streaming | Resyncing | Remote      | Restored        | -
//	Resyncing    | Streaming | Idle       | Streaming | -         | Remote      | Restored        | -
//	Remote       | Streaming | -          | Remote    | -         | Remote      | Restored        | -
//	Restored     | Streaming | -          | Idle      | -         | Remote      | Restored        | Remote
//
// Remove (the ManagedCluster was deleted) ends a cluster from every phase.
// Connected and Restored, which queries read, derive from Phase and Liveness.
package store
