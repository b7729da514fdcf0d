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
// A cluster's state has two dimensions. Its liveness (State) is Available
// while the spoke was heard from within the grace period, Unknown after.
// Its Phase says where the figures come from and what the next spoke message
// does; it moves only through this table (Transition; a pair marked - is
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
// Connected and Restored, which queries read, derive from Phase and State.
package store
