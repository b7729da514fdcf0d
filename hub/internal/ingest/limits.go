// Package ingest decides what the hub accepts from a spoke. Every Snapshot
// and Delta is checked against the limits the spoke's own CRDs enforce
// (api/v1alpha1: names are DNS-1123, counts are never negative, list entries
// are unique by name, enums hold known values, quantities parse) and against
// per-cluster caps that keep one spoke from exhausting the hub's memory, its
// aggregation time or the 1.5 MiB an object may take in etcd. A refused
// message is reported as an *Error naming the field; the store keeps the
// last good inventory.
//
// The checks are pure functions over the wire messages: the store runs them
// before it takes its lock.
package ingest

// Limits bound what one spoke cluster may report. The per-Machine ones are
// the spoke CRDs' own; the per-cluster ones are set far above real clusters
// (a few dozen Machines, hundreds of types, a few thousand nodes).
type Limits struct {
	// MaxMachines is the most Machines one cluster may hold: the
	// ClusterInventory CRD's status.machines MaxItems. Within it an
	// inventory can still be too large for one object in etcd (1.5 MiB);
	// the persister reports that as InventoryCurrent=False (PersistFailed)
	// and other replicas serve the cluster as stale.
	MaxMachines int
	// MaxTypesPerMachine is the Machine CRD's spec.machineTypes MaxItems.
	MaxTypesPerMachine int
	// MaxNodesPerMachine is the Machine CRD's spec.nodePool MaxItems.
	MaxNodesPerMachine int
	// MaxTypes bounds the machine types of a whole cluster: what one
	// cluster adds to every usage and capacity query.
	MaxTypes int
	// MaxNodes bounds the pool nodes of a whole cluster (Kubernetes itself
	// supports 5,000 nodes; listed nodes may not exist yet).
	MaxNodes int
	// MessagesPerSecond and MessageBurst bound the messages of one Report
	// stream after its Hello (a token bucket). A spoke sends a Heartbeat
	// every 5 s and at most one Delta per debounce (500 ms by default); the
	// benchmark of a spoke streaming at this rate shows no effect on other
	// clusters' queries.
	MessagesPerSecond float64
	MessageBurst      int
	// EntriesPerSecond and EntryBurst bound what the Snapshots and Deltas
	// of one Report stream carry, counting every Machine, machine type and
	// pool node as an entry (see Entries): the message rate alone would let
	// a stream send a cluster at the caps a hundred times a second. The
	// burst takes two whole clusters at the caps (a Snapshot and a Resync's);
	// a real spoke sends its Snapshot once and Deltas of a few entries.
	EntriesPerSecond float64
	EntryBurst       int
}

// The caps of DefaultLimits.
const (
	DefaultMaxMachines        = 10_000
	DefaultMaxTypesPerMachine = 64
	DefaultMaxNodesPerMachine = 1_000
	DefaultMaxTypes           = 50_000
	DefaultMaxNodes           = 20_000
	DefaultMessagesPerSecond  = 100
	DefaultMessageBurst       = 200
	DefaultEntriesPerSecond   = 10_000
	DefaultEntryBurst         = 2 * (DefaultMaxMachines + DefaultMaxTypes + DefaultMaxNodes)
)

// Length bounds of free-form strings, from the CRDs where they have one.
const (
	// maxQuantityLength bounds a cpu or memory quantity string; a canonical
	// Quantity (what the spoke sends) is a handful of characters.
	maxQuantityLength = 64
	// maxGPUSelectorLength is the GPU product, family and machine's MaxLength.
	maxGPUSelectorLength = 63
	// maxResourceNameLength is the GPU type's MaxLength.
	maxResourceNameLength = 253
	// MaxAgentVersionLength bounds the agent version a Hello announces; it
	// is stored and persisted.
	MaxAgentVersionLength = 256
	// maxReportedErrors bounds the problems one refusal lists.
	maxReportedErrors = 10
)

// DefaultLimits are the limits the hub enforces unless told otherwise.
func DefaultLimits() Limits {
	return Limits{
		MaxMachines:        DefaultMaxMachines,
		MaxTypesPerMachine: DefaultMaxTypesPerMachine,
		MaxNodesPerMachine: DefaultMaxNodesPerMachine,
		MaxTypes:           DefaultMaxTypes,
		MaxNodes:           DefaultMaxNodes,
		MessagesPerSecond:  DefaultMessagesPerSecond,
		MessageBurst:       DefaultMessageBurst,
		EntriesPerSecond:   DefaultEntriesPerSecond,
		EntryBurst:         DefaultEntryBurst,
	}
}
