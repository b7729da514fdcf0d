package ingest

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

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

// Totals counts what an inventory holds, for the per-cluster caps.
type Totals struct {
	Machines, Types, Nodes int
}

// Add adds the counts of m.
func (t *Totals) Add(m *federationv1.Machine) {
	t.Machines++
	t.Types += len(m.GetTypes())
	t.Nodes += len(m.GetNodes())
}

// Entries is how much a message carries for the stream's entry budget: one
// per Machine (upserted or removed), machine type and pool node.
func Entries(msg *federationv1.SpokeMessage) int {
	var machines []*federationv1.Machine
	n := 0
	switch {
	case msg.GetSnapshot() != nil:
		machines = msg.GetSnapshot().GetMachines()
	case msg.GetDelta() != nil:
		machines = msg.GetDelta().GetUpserts()
		n = len(msg.GetDelta().GetRemovals())
	}
	for _, m := range machines {
		n += 1 + len(m.GetTypes()) + len(m.GetNodes())
	}
	return n
}

// Check refuses totals over the per-cluster caps; path names the message
// whose result they are.
func (t Totals) Check(path *field.Path, l Limits) error {
	var errs errorList
	if t.Machines > l.MaxMachines {
		errs.add(field.TooMany(path.Child("machines"), t.Machines, l.MaxMachines))
	}
	if t.Types > l.MaxTypes {
		errs.add(field.Invalid(path.Child("machines").Child("types"), t.Types,
			fmt.Sprintf("the cluster would hold %d machine types, more than the hub's limit of %d per cluster", t.Types, l.MaxTypes)))
	}
	if t.Nodes > l.MaxNodes {
		errs.add(field.Invalid(path.Child("machines").Child("nodes"), t.Nodes,
			fmt.Sprintf("the cluster would hold %d pool nodes, more than the hub's limit of %d per cluster", t.Nodes, l.MaxNodes)))
	}
	return errs.err()
}
