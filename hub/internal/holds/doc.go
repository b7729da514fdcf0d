// Package holds owns the hub's fleet holds: bookings of units of a machine
// type (or shape) across the fleet. It picks clusters with FindCapacity's
// ranking and runs a two-phase hold over the spokes' Report streams: every
// chosen spoke is asked to create a CapacityHold named like the fleet hold;
// when one refuses or does not answer by the deadline, the parts that were
// held are released and the fleet hold is Failed with each cluster's
// reason.
//
// The FleetHold in the hub's namespace is the source of truth, shared by
// every hub replica. A spoke's Report stream is open on one replica at a
// time, so no replica can ask every spoke itself; instead:
//
//   - the replica answering CreateHold (Coordinator.Create) writes the
//     FleetHold, Pending, with one unanswered part per chosen cluster, waits
//     for the answers in the FleetHold and decides Held or Failed;
//   - on every replica the Deliverer sends each part whose spoke streams to
//     that replica what it needs (the hold while Pending, the release once
//     Failed or Released) and writes the spoke's answer into the part;
//   - ReleaseHold on any replica writes Released and waits for the
//     Deliverers to confirm every part released. A part whose spoke is
//     offline is released when its stream is back on any replica (until
//     validUntil, when the spoke's CapacityHold ends by itself).
//
// Every status write carries the resourceVersion it was computed from, so a
// Release on one replica and a Create deciding on another end in one phase:
// the loser of the conflict reads again and decides from the winner's
// write. A Pending hold whose coordinating replica stopped is Failed by any
// replica's Expiry controller once well past the deadline, and its held
// parts released. The requests carry durations, never the hub's instants,
// and the booking (the FleetHold's UID), so a request sent again by another
// replica after a stream moved finds the CapacityHold it made.
//
// Reconciled both ways (Reconciler): spokes report the CapacityHolds the
// hub asked for; the replica holding a spoke's stream releases every one no
// live FleetHold part owns, and fails a Held FleetHold whose spoke no
// longer reports a Held part (NoLongerHeld: a fleet hold is all or nothing,
// the hub does not re-plan the part; the other parts are released and the
// holder books again). validUntil stays the backstop.
//
// A new hold avoids, for avoidFor (5 minutes), the spokes that refused a
// part or did not answer in time, as recent FleetHolds record it; its
// status message names them and why. When the units fit only with them,
// they are asked again.
//
// Files, one job each: holds.go the Coordinator, its options and errors, and
// the reads (Get, List, bringing a phase up to date); create.go CreateHold
// (place, write Pending, wait for the answers, decide); release.go
// ReleaseHold; deliver.go the Deliverer and the HoldRequests it sends;
// parts.go the pure decisions over a hold's parts; plan.go and avoid.go the
// choice of clusters; expiry.go the Expiry controller; reconcile.go the
// Reconciler of spokes' reports against FleetHolds.
package holds
