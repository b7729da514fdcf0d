package store

import (
	"fmt"
	"slices"
	"strings"
	"time"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// Liveness is whether a cluster's spoke is heard from: Available or
// Unknown, moved only by time (the grace period) and the spoke's messages.
// See the package doc for what derives from it.
type Liveness string

const (
	// LivenessAvailable means the spoke heartbeated within the grace period.
	LivenessAvailable Liveness = "Available"
	// LivenessUnknown means the spoke has been silent past the grace period
	// (or was never heard from since the hub started).
	LivenessUnknown Liveness = "Unknown"
)

// Cluster is what the hub knows about one spoke cluster. Values returned by
// the Store are shared and must not be modified.
type Cluster struct {
	Name         string
	AgentVersion string
	// AgentMode is how the cluster's agent runs, from its Hello: "in-cluster"
	// or "hosted"; empty for an agent that predates the field.
	AgentMode string
	// InjectionUnavailable says why the cluster's API server cannot reach
	// the agent's webhooks, as the spoke's last heartbeat said; empty when it
	// can. Only the replica holding the stream knows it.
	InjectionUnavailable string

	// Epoch and Generation identify the inventory held: Generation is only
	// meaningful within Epoch (one run of the spoke agent).
	Epoch      uint64
	Generation uint64
	// ObservedAt is when the spoke read the figures from its API server.
	ObservedAt time.Time
	// LastHeartbeat is when the hub last heard from the spoke (any message),
	// by this replica's clock: for a cluster another replica serves, when
	// this replica saw that replica renew the cluster's Lease (only the
	// first Lease seen is taken at the times written in it).
	LastHeartbeat time.Time

	// Machines are sorted by name.
	Machines []*federationv1.Machine

	// Phase is where the figures come from (see Phase and its transition
	// table); it only moves through the table.
	Phase Phase

	// Connected is true while a Report stream of the cluster is open: on this
	// replica, or on the replica named Replica while its lease renewals
	// arrive within the grace period. Derived from Phase and Liveness.
	Connected bool
	// Replica is the hub replica holding (or that last held) the cluster's
	// Report stream; empty when unknown.
	Replica string
	// Restored is true while the inventory comes from the API server copy and
	// no live replica has confirmed it since this one started: a
	// restarted hub's figures until the spoke reports again. Derived from
	// Phase.
	Restored bool
	// Liveness is the cluster's liveness as of the last evaluation.
	Liveness Liveness
	// Outdated is non-empty when the figures held are known to be older
	// than the spoke's: the hub refused the spoke's last inventory message
	// (it broke a limit), or the replica serving the cluster could not
	// persist it. It says why, and clears with the next Snapshot applied.
	Outdated string
	// APIServerUnreachableSince is set while the spoke's heartbeats say its
	// agent has not reached its own API server since then: the figures come
	// from the agent's cache and may be old, so the cluster is stale (not
	// Available in queries, no free capacity, no placement score) although
	// it heartbeats. It clears with the first heartbeat that does not carry
	// it. Only the replica holding the stream knows it.
	APIServerUnreachableSince time.Time

	// LeaseHolder and LeaseRenewTime are the cluster's Lease (who serves it) as
	// this replica last saw it (RenewTime by the holder's clock), and
	// LeaseSeenAt when it first saw that renewal, by its own clock.
	LeaseHolder    string
	LeaseRenewTime time.Time
	LeaseSeenAt    time.Time

	// synced is true once a Snapshot of Epoch was applied; Deltas need it.
	// It is a property of the figures held, not of the stream.
	synced bool
	// renewalsSinceConnect counts the renewals of the Lease by other
	// replicas seen since the stream open here opened.
	renewalsSinceConnect int
	// holderSilent is true while the replica serving the cluster says (in
	// the persisted inventory) that its spoke went silent: that replica's
	// own Lease renewals then say nothing about the cluster.
	holderSilent bool
}

// Stale is true when the figures may not reflect the cluster any more:
// restored from the API server and not yet confirmed, the spoke is silent,
// its current inventory could not be taken in, or its agent cannot reach its
// own API server. Stale clusters never count as free capacity.
func (c *Cluster) Stale() bool {
	return c.Restored || c.Liveness != LivenessAvailable || c.Outdated != "" || c.APIServerUnreachable()
}

// APIServerUnreachable is true while the spoke's heartbeats say that its
// agent cannot reach its own API server (see APIServerUnreachableSince).
func (c *Cluster) APIServerUnreachable() bool { return !c.APIServerUnreachableSince.IsZero() }

// APIServerUnreachableMessage says, for users, why a cluster whose agent
// cannot reach its API server is stale; empty when it can.
func (c *Cluster) APIServerUnreachableMessage() string {
	if !c.APIServerUnreachable() {
		return ""
	}
	return fmt.Sprintf("the spoke agent cannot reach its own cluster's API server since %s: its figures come from its cache and may be out of date",
		c.APIServerUnreachableSince.UTC().Format(time.RFC3339))
}

// Synced is true once the spoke sent a Snapshot on the stream held here, so
// that Machines are the spoke's current ones.
func (c *Cluster) Synced() bool { return c.synced }

// Machine returns the Machine with the given name.
func (c *Cluster) Machine(name string) (*federationv1.Machine, bool) {
	i, ok := slices.BinarySearchFunc(c.Machines, name, func(m *federationv1.Machine, n string) int {
		return strings.Compare(m.GetName(), n)
	})
	if !ok {
		return nil, false
	}
	return c.Machines[i], true
}

// Result tells the stream handler what to answer a spoke message with.
type Result struct {
	// Ack is true when the hub should acknowledge Generation.
	Ack        bool
	Generation uint64
	// Resync is non-empty when the hub must ask for a Snapshot; it says why.
	Resync string
	// Stale is true when the message was older than what the hub holds and
	// was ignored.
	Stale bool
	// Refused is the *ingest.Error of a message that broke a limit; the
	// store kept what it held. The hub ends the stream with InvalidArgument.
	Refused error
}

// AgentModeName is the name of an agent mode shown to people: "in-cluster",
// "hosted", or "" when the agent did not say (or said something this hub
// does not know).
func AgentModeName(mode federationv1.AgentMode) string {
	switch mode {
	case federationv1.AgentMode_AGENT_MODE_IN_CLUSTER:
		return "in-cluster"
	case federationv1.AgentMode_AGENT_MODE_HOSTED:
		return "hosted"
	}
	return ""
}
