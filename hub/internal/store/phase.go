package store

// Phase is where the figures this replica holds for a cluster come from, and
// with it what the store does with the spoke's next message. It is one of the
// two dimensions of a cluster's state; the other is its liveness (Liveness:
// Available or Unknown), which only time and the spoke's messages move.
//
// The exported views of a cluster's state derive from the two and are never
// set on their own: Restored is Phase == PhaseRestored, Connected is a
// stream open here (PhaseStreaming, PhaseResyncing) or another replica's
// stream that is alive (PhaseRemote while Available).
type Phase string

const (
	// PhaseIdle means no stream of the cluster is open here; the figures (if
	// any) are those this replica took in from the spoke itself. A cluster
	// first heard of through a message starts here.
	PhaseIdle Phase = "Idle"
	// PhaseStreaming means a Report stream of the cluster is open here; Deltas
	// apply once a Snapshot of the stream's epoch arrived.
	PhaseStreaming Phase = "Streaming"
	// PhaseResyncing means a Report stream is open here and the hub asked the
	// spoke for a Snapshot: Deltas are ignored until it comes.
	PhaseResyncing Phase = "Resyncing"
	// PhaseRemote means another replica holds the cluster's stream and is seen
	// running (it renewed a Lease since this replica started); the figures
	// are that replica's, read from the API server.
	PhaseRemote Phase = "Remote"
	// PhaseRestored means the figures were read back from the API server and no
	// running replica has confirmed them since this one started (after a
	// hub restart, until the spoke reports again). Stale.
	PhaseRestored Phase = "Restored"
)

// Event moves a cluster from one Phase to another (see transitions).
type Event string

const (
	// EventConnect means a Report stream of the cluster opened here (Hello).
	EventConnect Event = "Connect"
	// EventDisconnect means the Report stream open here ended.
	EventDisconnect Event = "Disconnect"
	// EventSnapshot means a Snapshot was applied.
	EventSnapshot Event = "Snapshot"
	// EventResync means the hub asked the spoke for a Snapshot (a gap, a Delta
	// without Snapshot, a heartbeat ahead of the hub).
	EventResync Event = "Resync"
	// EventObserveLive means another replica's write, by a replica seen
	// running, was taken in.
	EventObserveLive Event = "ObserveLive"
	// EventObserveRestored means a write by a replica not seen running since
	// this one started (or read back on start) was taken in.
	EventObserveRestored Event = "ObserveRestored"
	// EventConfirmReplica means the replica serving the cluster was seen
	// renewing a Lease, so its figures are current.
	EventConfirmReplica Event = "ConfirmReplica"
)

// transitions is the table of every allowed move; an event not listed for a
// phase is refused and leaves the cluster as it is. Removing a cluster (its
// ManagedCluster was deleted) is allowed from every phase and ends it: it
// leaves the store.
//
//	from \ event | Connect   | Disconnect | Snapshot  | Resync    | ObserveLive | ObserveRestored | ConfirmReplica
//	Idle         | Streaming | -          | Idle      | -         | Remote      | Restored        | -
//	Streaming    | Streaming | Idle       | Streaming | Resyncing | Remote      | Restored        | -
//	Resyncing    | Streaming | Idle       | Streaming | -         | Remote      | Restored        | -
//	Remote       | Streaming | -          | Remote    | -         | Remote      | Restored        | -
//	Restored     | Streaming | -          | Idle      | -         | Remote      | Restored        | Remote
//
// Notes: a stream here ends only from a stream phase; a Resync is asked once
// until the Snapshot comes (Deltas meanwhile are ignored, not answered with
// another Resync), and only on a stream open here; a stream open here yields
// to another replica's write only when that replica heard from the spoke
// later (Store.Observe decides; the table allows it).
var transitions = map[Phase]map[Event]Phase{
	PhaseIdle: {
		EventConnect: PhaseStreaming, EventSnapshot: PhaseIdle,
		EventObserveLive: PhaseRemote, EventObserveRestored: PhaseRestored,
	},
	PhaseStreaming: {
		EventConnect: PhaseStreaming, EventDisconnect: PhaseIdle, EventSnapshot: PhaseStreaming, EventResync: PhaseResyncing,
		EventObserveLive: PhaseRemote, EventObserveRestored: PhaseRestored,
	},
	PhaseResyncing: {
		EventConnect: PhaseStreaming, EventDisconnect: PhaseIdle, EventSnapshot: PhaseStreaming,
		EventObserveLive: PhaseRemote, EventObserveRestored: PhaseRestored,
	},
	PhaseRemote: {
		EventConnect: PhaseStreaming, EventSnapshot: PhaseRemote,
		EventObserveLive: PhaseRemote, EventObserveRestored: PhaseRestored,
	},
	PhaseRestored: {
		EventConnect: PhaseStreaming, EventSnapshot: PhaseIdle,
		EventObserveLive: PhaseRemote, EventObserveRestored: PhaseRestored, EventConfirmReplica: PhaseRemote,
	},
}

// Phases are every Phase, in the order of the table above.
var Phases = []Phase{PhaseIdle, PhaseStreaming, PhaseResyncing, PhaseRemote, PhaseRestored}

// Events are every Event, in the order of the table above.
var Events = []Event{EventConnect, EventDisconnect, EventSnapshot, EventResync, EventObserveLive, EventObserveRestored, EventConfirmReplica}

// Transition returns the phase that ev moves from leads to, and false when
// the table refuses ev in from.
func Transition(from Phase, ev Event) (Phase, bool) {
	to, ok := transitions[from][ev]
	return to, ok
}

// fire moves c by ev when the table allows it and reports whether it did.
func (c *Cluster) fire(ev Event) bool {
	to, ok := Transition(c.Phase, ev)
	if !ok {
		return false
	}
	c.Phase = to
	c.derive()
	return true
}

// setLiveness sets the cluster's liveness and what derives from it.
func (c *Cluster) setLiveness(l Liveness) {
	c.Liveness = l
	c.derive()
}

// streaming is true while a Report stream of the cluster is open here.
func (c *Cluster) streaming() bool { return c.Phase == PhaseStreaming || c.Phase == PhaseResyncing }

// derive sets the views of the cluster's state from Phase and Liveness.
func (c *Cluster) derive() {
	c.Restored = c.Phase == PhaseRestored
	c.Connected = c.streaming() || (c.Phase == PhaseRemote && c.Liveness == LivenessAvailable)
}
