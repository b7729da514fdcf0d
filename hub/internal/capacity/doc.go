// Package capacity builds the hub's query answers from the in-memory index:
// the clusters, machine types and usage views, and the FindCapacity ranking
// (which clusters can take N more units of a machine type or resource shape,
// which were excluded and why). Its functions are pure: they read immutable
// store.Cluster snapshots and a caller-supplied time, and never block.
//
// Free units. A unit of a machine type is free when a reservation pod holds
// it (reserved) and no guest is about to claim it: free = min(reserved,
// maximum − used − (waiting − unplaceable)), never negative. At steady state
// the spoke keeps reserved = maximum − used − (waiting − unplaceable), so
// free equals reserved; during a handover (a waiting guest whose reservation
// pod has not stopped yet) the minimum keeps the slot the guest will take
// from being offered twice. Queued guests (held at the agent's slot gate, in
// line for a unit) are part of waiting, so a slot a queued guest is about to
// take is never free either; queued is carried beside waiting for users to
// see the line. Unplaceable guests (queued guests no ready node of the type
// can take, part of queued) are about to take nothing: the spoke keeps their
// units reserved, and they stay free, so that guests nobody can place (a
// nodeSelector matching no node costs its creator nothing) cannot make a
// type look full.
// Held units (reserved slots set aside for a capacity hold that no guest of
// the hold claimed yet) are free for nobody else: free = max(0, min(reserved,
// maximum − used − waiting) − held).
// Offline and stale clusters never count as free capacity.
//
// Sums. Figures are int32 on the wire; sums over types and clusters are
// taken in int64 and saturate at math.MaxInt32 when they go back into int32
// fields, so that one cluster reporting huge counts can never wrap a total
// negative. Aggregation is linear: entries are found through maps.
package capacity
