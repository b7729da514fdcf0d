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

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"

	"k8s.io/utils/clock"

	"github.com/imperator-federation/imperator/hub/internal/ingest"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// DefaultGracePeriod is how long a cluster may stay silent before it becomes
// Unknown: several missed heartbeats, well under OCM's 5 minutes.
const DefaultGracePeriod = 40 * time.Second

// State is the liveness of a cluster.
type State string

const (
	// StateAvailable means the spoke heartbeated within the grace period.
	StateAvailable State = "Available"
	// StateUnknown means the spoke has been silent past the grace period (or was
	// never heard from since the hub started).
	StateUnknown State = "Unknown"
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
	// arrive within the grace period. Derived from Phase and State.
	Connected bool
	// Replica is the hub replica holding (or that last held) the cluster's
	// Report stream; empty when unknown.
	Replica string
	// Restored is true while the inventory comes from the API server copy and
	// no live replica has confirmed it since this one started: a
	// restarted hub's figures until the spoke reports again. Derived from
	// Phase.
	Restored bool
	// State is the liveness as of the last evaluation.
	State State
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
	return c.Restored || c.State != StateAvailable || c.Outdated != "" || c.APIServerUnreachable()
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

// Store is the thread-safe index of clusters.
type Store struct {
	clock   clock.PassiveClock
	grace   time.Duration
	replica string

	mu       sync.RWMutex
	clusters map[string]*Cluster
	// listeners are never changed in place (readers hold copies);
	// listenerIDs name them for unsubscribe.
	listeners   []func(cluster string)
	listenerIDs []uint64
	nextID      uint64
	limits      ingest.Limits
	// replicaSeen is when this replica last saw each other replica renew
	// its replica Lease, by its own clock.
	replicaSeen map[string]time.Time
}

// New returns an empty store whose clusters become Unknown after grace
// without a message (DefaultGracePeriod when grace <= 0).
func New(clk clock.PassiveClock, grace time.Duration) *Store {
	if grace <= 0 {
		grace = DefaultGracePeriod
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Store{clock: clk, grace: grace, clusters: map[string]*Cluster{}, limits: ingest.DefaultLimits(), replicaSeen: map[string]time.Time{}}
}

// SetLimits replaces the limits spoke messages are checked against
// (ingest.DefaultLimits until then). Set them before the store is used.
func (s *Store) SetLimits(l ingest.Limits) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits = l
}

// Limits are the limits spoke messages are checked against.
func (s *Store) Limits() ingest.Limits {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.limits
}

// GracePeriod is how long a cluster may stay silent before it becomes Unknown.
func (s *Store) GracePeriod() time.Duration { return s.grace }

// SetReplica names the hub replica this store belongs to; the clusters whose
// streams it holds carry the name in Replica. Set it before the store is used.
func (s *Store) SetReplica(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replica = id
}

// Replica is the name of the hub replica this store belongs to.
func (s *Store) Replica() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.replica
}

// Local is true when this replica holds, or last held, the cluster's Report
// stream: its figures in memory are the freshest there are, and this replica
// writes them to the API server.
func (s *Store) Local(c *Cluster) bool { return c.Replica == s.Replica() }

// OnChange registers fn to be called, outside the store's lock, with the name
// of every cluster whose inventory, connection or liveness changed (not on
// heartbeats that change nothing else). Register before the store is used.
func (s *Store) OnChange(fn func(cluster string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subscribeLocked(fn)
}

// subscribe registers fn as OnChange does and returns what unregisters it.
func (s *Store) subscribe(fn func(cluster string)) (unsubscribe func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.subscribeLocked(fn)
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		i := slices.Index(s.listenerIDs, id)
		if i < 0 {
			return
		}
		// New slices: notifications under way keep the old ones.
		s.listeners = slices.Delete(slices.Clone(s.listeners), i, i+1)
		s.listenerIDs = slices.Delete(slices.Clone(s.listenerIDs), i, i+1)
	}
}

func (s *Store) subscribeLocked(fn func(cluster string)) uint64 {
	s.nextID++
	s.listeners = append(slices.Clip(s.listeners), fn)
	s.listenerIDs = append(s.listenerIDs, s.nextID)
	return s.nextID
}

// Get returns the cluster named name.
func (s *Store) Get(name string) (*Cluster, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, ok := s.clusters[name]
	return c, ok
}

// List returns every cluster, sorted by name.
func (s *Store) List() []*Cluster {
	s.mu.RLock()
	out := make([]*Cluster, 0, len(s.clusters))
	for _, c := range s.clusters {
		out = append(out, c)
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// update applies fn to a copy of the named cluster and stores the copy. An
// absent cluster is created when create is true, else left absent (fn is not
// called); fn learns whether the cluster existed. fn returns the result and
// whether listeners must hear of the change.
func (s *Store) update(name string, create bool, fn func(c *Cluster, existed bool) (Result, bool)) Result {
	s.mu.Lock()
	next := &Cluster{Name: name, State: StateUnknown, Phase: PhaseIdle}
	cur, existed := s.clusters[name]
	if !existed && !create {
		s.mu.Unlock()
		return Result{}
	}
	if existed {
		copied := *cur
		next = &copied
	}
	res, changed := fn(next, existed)
	s.clusters[name] = next
	listeners := s.listeners
	s.mu.Unlock()
	if changed {
		notify(listeners, name)
	}
	return res
}

// notify calls every listener with every name, outside the store's lock.
func notify(listeners []func(cluster string), names ...string) {
	for _, name := range names {
		for _, l := range listeners {
			l(name)
		}
	}
}

// Connect records that a Report stream of the cluster opened with hello. The
// spoke must send a Snapshot next: until then Deltas are refused.
func (s *Store) Connect(name string, hello *federationv1.Hello) {
	now := s.clock.Now()
	s.update(name, true, func(c *Cluster, _ bool) (Result, bool) {
		c.AgentVersion = hello.GetAgentVersion()
		c.AgentMode = AgentModeName(hello.GetAgentMode())
		c.Replica = s.replica
		c.LastHeartbeat = now
		c.State = StateAvailable
		if c.Epoch != hello.GetEpoch() {
			c.synced = false
		}
		c.fire(EventConnect)
		c.renewalsSinceConnect = 0
		return Result{}, true
	})
}

// Disconnect records that the cluster's Report stream ended. Its figures stay
// and it stays Available until the grace period runs out. A cluster removed
// meanwhile stays removed.
func (s *Store) Disconnect(name string) {
	s.update(name, false, func(c *Cluster, _ bool) (Result, bool) {
		// A stream another replica took over is not this one's to close.
		if c.Replica != s.replica {
			return Result{}, false
		}
		// Only the spoke's heartbeats say whether its webhooks are
		// reachable; without a stream, this replica no longer knows.
		cleared := c.InjectionUnavailable != ""
		c.InjectionUnavailable = ""
		return Result{}, c.fire(EventDisconnect) || cleared
	})
}

// Remove forgets a cluster (its ManagedCluster was deleted); listeners hear
// of it and find it gone.
func (s *Store) Remove(name string) {
	s.mu.Lock()
	_, ok := s.clusters[name]
	delete(s.clusters, name)
	listeners := s.listeners
	s.mu.Unlock()
	if ok {
		notify(listeners, name)
	}
}

// ApplySnapshot replaces the cluster's inventory with snap, sent in epoch.
// A Snapshot older than (or as old as) the one held in the same epoch is
// ignored; one that breaks the limits is refused (Result.Refused) and the
// inventory held is kept, marked Outdated.
func (s *Store) ApplySnapshot(name string, epoch uint64, snap *federationv1.Snapshot) Result {
	if err := ingest.ValidateSnapshot(snap, s.Limits()); err != nil {
		return s.refuse(name, "Snapshot", err)
	}
	// Outside the lock: the names are unique now, so a plain sort will do.
	machines := slices.Clone(snap.GetMachines())
	sortMachines(machines)
	now := s.clock.Now()
	return s.update(name, true, func(c *Cluster, _ bool) (Result, bool) {
		c.LastHeartbeat = now
		if c.Epoch == epoch && c.synced && snap.GetGeneration() <= c.Generation {
			return Result{Ack: true, Generation: c.Generation, Stale: true}, false
		}
		c.Machines = machines
		c.Epoch = epoch
		c.Generation = snap.GetGeneration()
		c.ObservedAt = snap.GetObservedAt().AsTime()
		c.Outdated = ""
		c.synced = true
		c.State = StateAvailable
		c.fire(EventSnapshot)
		return Result{Ack: true, Generation: c.Generation}, true
	})
}

// maxOutdatedMessage bounds Cluster.Outdated, which is persisted in a
// condition message.
const maxOutdatedMessage = 1024

// refuse records that the cluster's spoke sent a kind of message that broke
// the limits: the spoke is alive, but the inventory held is older than its.
func (s *Store) refuse(name, kind string, err error) Result {
	msg := fmt.Sprintf("the hub refused the spoke's %s: %v", kind, err)
	if len(msg) > maxOutdatedMessage {
		msg = msg[:maxOutdatedMessage-3] + "..."
	}
	now := s.clock.Now()
	return s.update(name, true, func(c *Cluster, _ bool) (Result, bool) {
		c.LastHeartbeat = now
		changed := c.Outdated != msg || c.State != StateAvailable
		c.Outdated = msg
		c.setState(StateAvailable)
		return Result{Refused: err}, changed
	})
}

// ApplyDelta applies delta, sent in epoch, when the cluster holds exactly
// generation-1 of that epoch; it ignores older Deltas and asks for a Resync
// (once until the Snapshot arrives) when it cannot apply one. A Delta that
// breaks the limits, or whose result would, is refused (Result.Refused) and
// the inventory held is kept, marked Outdated.
//
// The Delta is merged into a new Machines slice before the lock is taken;
// under the lock the result is swapped in when the Machines it was built
// from are still those held, else the merge is done again.
func (s *Store) ApplyDelta(name string, epoch uint64, delta *federationv1.Delta) Result {
	limits := s.Limits()
	if err := ingest.ValidateDelta(delta, limits); err != nil {
		return s.refuse(name, "Delta", err)
	}
	now := s.clock.Now()
	for attempt := 1; ; attempt++ {
		var (
			base, merged []*federationv1.Machine
			capErr       error
			prepared     bool
		)
		// Later attempts merge under the lock: the Machines changed under
		// the earlier ones (another replica's write was observed), and a
		// writer that keeps losing must still finish.
		underLock := attempt > maxMergeAttempts
		if cur, ok := s.Get(name); ok && !underLock && deltaVerdict(cur, epoch, delta) == verdictApply {
			base = cur.Machines
			merged, capErr = mergeDelta(base, delta, limits)
			prepared = true
		}
		retry := false
		res := s.update(name, true, func(c *Cluster, _ bool) (Result, bool) {
			c.LastHeartbeat = now
			switch deltaVerdict(c, epoch, delta) {
			case verdictIgnore:
				// Deltas sent before the spoke saw our Resync: the
				// Snapshot will supersede them.
				return Result{}, false
			case verdictNoSnapshot:
				c.fire(EventResync)
				return Result{Resync: "no snapshot of this epoch"}, false
			case verdictStale:
				return Result{Ack: true, Generation: c.Generation, Stale: true}, false
			case verdictGap:
				c.fire(EventResync)
				return Result{Resync: "generation gap"}, false
			}
			switch {
			case underLock:
				merged, capErr = mergeDelta(c.Machines, delta, limits)
			case !prepared || !sameMachines(c.Machines, base):
				retry = true
				return Result{}, false
			}
			if capErr != nil {
				return Result{Refused: capErr}, false
			}
			c.Machines = merged
			c.Generation = delta.GetGeneration()
			if at := delta.GetObservedAt(); at != nil {
				c.ObservedAt = at.AsTime()
			}
			c.setState(StateAvailable)
			return Result{Ack: true, Generation: c.Generation}, true
		})
		switch {
		case retry:
			continue
		case res.Refused != nil:
			return s.refuse(name, "Delta", res.Refused)
		}
		return res
	}
}

// maxMergeAttempts is how often ApplyDelta merges outside the lock before it
// merges under it.
const maxMergeAttempts = 3

// verdict is what the store does with a Delta, given what it holds.
type verdict int

const (
	verdictApply verdict = iota
	// verdictIgnore: a Resync is pending; the Snapshot will supersede it.
	verdictIgnore
	// verdictNoSnapshot: no Snapshot of the Delta's epoch is held.
	verdictNoSnapshot
	// verdictStale: the Delta is older than what is held.
	verdictStale
	// verdictGap: a Delta between the one held and this one is missing.
	verdictGap
)

func deltaVerdict(c *Cluster, epoch uint64, delta *federationv1.Delta) verdict {
	switch {
	case c.Phase == PhaseResyncing:
		return verdictIgnore
	case !c.synced || c.Epoch != epoch:
		return verdictNoSnapshot
	case delta.GetGeneration() <= c.Generation:
		return verdictStale
	case delta.GetGeneration() != c.Generation+1:
		return verdictGap
	}
	return verdictApply
}

// mergeDelta is applyDelta checked against the per-cluster caps: a stream
// of Deltas cannot grow an inventory past them.
func mergeDelta(machines []*federationv1.Machine, delta *federationv1.Delta, limits ingest.Limits) ([]*federationv1.Machine, error) {
	merged := applyDelta(machines, delta)
	var totals ingest.Totals
	for _, m := range merged {
		totals.Add(m)
	}
	if err := totals.Check(ingest.DeltaPath, limits); err != nil {
		return nil, err
	}
	return merged, nil
}

// sameMachines is true when a and b are the same slice: Machines are never
// changed in place, so a Delta merged into a applies to b unchanged.
func sameMachines(a, b []*federationv1.Machine) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// Heartbeat records a heartbeat sent in epoch and asks for a Resync when the
// spoke is ahead of what the hub holds (a Delta was lost). Whether the
// heartbeat says that the agent cannot reach its API server is taken in at
// once, either way.
func (s *Store) Heartbeat(name string, epoch uint64, hb *federationv1.Heartbeat) Result {
	now := s.clock.Now()
	return s.update(name, true, func(c *Cluster, _ bool) (Result, bool) {
		c.LastHeartbeat = now
		changed := c.State != StateAvailable
		c.setState(StateAvailable)
		if since := unreachableSince(hb, c.APIServerUnreachableSince, now); !since.Equal(c.APIServerUnreachableSince) {
			c.APIServerUnreachableSince = since
			changed = true
		}
		if msg := truncate(hb.GetInjectionUnavailable(), maxInjectionMessage); msg != c.InjectionUnavailable {
			c.InjectionUnavailable = msg
			changed = true
		}
		if c.synced && c.Phase != PhaseResyncing && c.Epoch == epoch && hb.GetGeneration() > c.Generation {
			c.fire(EventResync)
			return Result{Resync: "hub is behind the spoke's generation"}, changed
		}
		return Result{}, changed
	})
}

// maxInjectionMessage bounds the injection_unavailable text kept per
// cluster (bytes; a longer one is cut, not refused: it is for people).
const maxInjectionMessage = 1024

// truncate cuts s to at most n bytes on a character boundary, its control
// characters (newlines, terminal escapes) turned into spaces: it is text for
// people, shown in tables.
func truncate(s string, n int) string {
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "")
	}
	if strings.IndexFunc(s, unicode.IsControl) < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
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

// unreachableSince is the time from which a cluster whose agent sent hb
// cannot reach its API server, zero when it can. held is what the store
// holds. The spoke's time is taken as it is, unless it is not a valid
// timestamp or lies ahead of the hub's clock (the spoke's clock runs ahead):
// then the hub's now, or what is held, so that repeated heartbeats change
// nothing.
func unreachableSince(hb *federationv1.Heartbeat, held, now time.Time) time.Time {
	ts := hb.GetApiServerUnreachableSince()
	if ts == nil {
		return time.Time{}
	}
	if ts.CheckValid() == nil {
		if t := ts.AsTime(); !t.After(now) {
			return t
		}
	}
	if !held.IsZero() {
		return held
	}
	return now
}

// Peer is what the hub cluster's API says about a cluster: the inventory last
// persisted by the replica serving it, and the cluster's Lease (who serves it).
type Peer struct {
	// Inventory holds the persisted figures: AgentVersion, AgentMode,
	// InjectionUnavailable, Epoch,
	// Generation, ObservedAt, LastHeartbeat and Machines.
	Inventory Cluster
	// Replica is the lease holder: the replica holding the cluster's stream.
	Replica string
	// RenewTime is when the holder took the cluster's Lease (by its clock);
	// its later renewals are of its replica Lease (ReplicaRenewed).
	RenewTime time.Time
	// Live is true when the lease holder is seen running (its replica
	// Lease renewed within the grace period, or the cluster's Lease taken
	// after this replica started), so the inventory is current.
	Live bool
	// Silent is true when the holder marked the cluster Unknown (the
	// inventory's Available condition): its spoke went silent, or the
	// leader found the holder gone.
	Silent bool
	// Outdated is non-empty when the serving replica reported that the
	// persisted inventory is older than the spoke's: why (see
	// Cluster.Outdated).
	Outdated string
}

// Observe takes in what the API server says about a cluster served by
// another replica, or persisted before this one started. Figures this replica
// holds itself win: while its own stream is open, or when it held the last
// one. It returns true when another replica renewed the cluster's lease after
// the last message of the stream open here: the spoke has moved, and that
// stream is a leftover to end.
//
// Replicas' clocks may disagree, so times written by another replica are
// never compared with this replica's: a Lease renewal counts from when this
// replica first saw it (LeaseSeenAt, its own clock). Only the first Lease
// seen of a cluster (on start, or of a cluster new to it) is judged by the
// times written in it, for want of anything better.
func (s *Store) Observe(name string, p Peer) (superseded bool) {
	now := s.clock.Now()
	s.update(name, true, func(c *Cluster, existed bool) (Result, bool) {
		firstSight := c.LeaseHolder == ""
		prevHolder := c.LeaseHolder
		renewal := p.Replica != "" && (p.Replica != c.LeaseHolder || !p.RenewTime.Equal(c.LeaseRenewTime))
		if renewal {
			c.LeaseHolder, c.LeaseRenewTime, c.LeaseSeenAt = p.Replica, p.RenewTime, now
			if p.Replica != s.replica && c.streaming() {
				c.renewalsSinceConnect++
			}
		}
		if existed && p.Replica != "" && p.Replica == s.replica {
			// This replica's own write coming back: it knows better.
			return Result{}, false
		}
		// Newer evidence: another replica heard from the spoke after we did.
		var moved bool
		switch {
		case p.Replica == "" || p.Replica == s.replica:
		case firstSight:
			moved = p.RenewTime.After(c.LastHeartbeat)
		case c.streaming():
			// While a stream is open here, another replica's renewal
			// written before it opened may still arrive: the spoke has
			// moved when that replica took the Lease from this one or
			// from a third, or renewed it twice since the stream opened.
			moved = renewal && (prevHolder == s.replica || p.Replica != prevHolder || c.renewalsSinceConnect >= 2)
		default:
			moved = renewal
		}
		if c.Replica == s.replica && (c.Connected || c.synced) {
			if !moved {
				return Result{}, false
			}
			superseded = c.Connected
		}
		before := *c
		in := p.Inventory
		if !existed || c.Epoch != in.Epoch || c.Generation != in.Generation {
			machines := slices.Clone(in.Machines)
			sortMachines(machines)
			c.Machines = dedupMachines(machines)
			c.Epoch, c.Generation, c.ObservedAt = in.Epoch, in.Generation, in.ObservedAt
		}
		c.AgentVersion, c.AgentMode, c.InjectionUnavailable = in.AgentVersion, in.AgentMode, in.InjectionUnavailable
		switch {
		case renewal && !firstSight:
			// The serving replica heard from the spoke just now.
			c.LastHeartbeat = now
		case firstSight || c.Replica != p.Replica:
			c.LastHeartbeat = in.LastHeartbeat
			if p.RenewTime.After(c.LastHeartbeat) {
				c.LastHeartbeat = p.RenewTime
			}
			if c.LastHeartbeat.After(now) {
				// Written by a replica whose clock runs ahead.
				c.LastHeartbeat = now
			}
		}
		// A holder that just took the Lease heard from the spoke just now,
		// whatever the inventory written before says.
		c.holderSilent = p.Silent && (!renewal || firstSight)
		if c.holderSilent {
			// Unknown, however fresh the holder's own Lease is.
			if late := now.Add(-s.grace - livenessSlack); c.LastHeartbeat.After(late) {
				c.LastHeartbeat = late
			}
		} else if seen, ok := s.replicaSeen[p.Replica]; ok && p.Replica != "" && seen.After(c.LastHeartbeat) {
			// The holder hears from the spoke as long as it runs and does
			// not say otherwise: the last renewal of its replica Lease
			// this replica saw.
			c.LastHeartbeat = seen
		}
		c.Replica = p.Replica
		c.State = s.stateAt(c.LastHeartbeat, now)
		c.Outdated = p.Outdated
		c.synced = false
		// The holder runs when its Lease was renewed after this replica
		// started (p.Live), when this replica saw it renew, or when it was
		// judged running before and its Lease has not changed since (a
		// write of its inventory alone proves nothing less).
		stillLive := !renewal && !firstSight && before.Phase == PhaseRemote && before.Replica == p.Replica
		if p.Live || (renewal && !firstSight) || stillLive {
			c.fire(EventObserveLive)
		} else {
			c.fire(EventObserveRestored)
		}
		changed := !existed || c.Epoch != before.Epoch || c.Generation != before.Generation || c.State != before.State ||
			c.Connected != before.Connected || c.Restored != before.Restored || c.Replica != before.Replica ||
			c.AgentVersion != before.AgentVersion || c.AgentMode != before.AgentMode ||
			c.InjectionUnavailable != before.InjectionUnavailable || c.Outdated != before.Outdated
		return Result{}, changed
	})
	return superseded
}

// LeaseSeenAt is when, by this replica's clock, it first saw the Lease of
// cluster c held by holder and renewed at renewed (another replica's clock):
// now when it has not seen that renewal yet, renewed itself when it never
// saw a Lease of c.
func (s *Store) LeaseSeenAt(c *Cluster, holder string, renewed time.Time) time.Time {
	switch {
	case c.LeaseHolder == "":
		return renewed
	case c.LeaseHolder == holder && c.LeaseRenewTime.Equal(renewed):
		return c.LeaseSeenAt
	}
	return s.clock.Now()
}

// ConfirmReplica records that the replica named replica is running (it
// renewed a Lease after this one started): the figures of every cluster it
// serves are current, not only those whose Lease was renewed since.
func (s *Store) ConfirmReplica(replica string) {
	s.mu.Lock()
	var changed []string
	for name, c := range s.clusters {
		if c.Replica == replica && replica != s.replica && c.Restored {
			next := *c
			next.fire(EventConfirmReplica)
			s.clusters[name] = &next
			changed = append(changed, name)
		}
	}
	listeners := s.listeners
	s.mu.Unlock()
	sort.Strings(changed)
	notify(listeners, changed...)
}

// ReplicaRenewed records that this replica saw the replica named replica
// renew its replica Lease just now: every cluster that replica serves and
// has not marked silent was heard from now (by this replica's clock), and
// their figures are current (see ConfirmReplica). It is what keeps other
// replicas' clusters live without a write per cluster.
func (s *Store) ReplicaRenewed(replica string) {
	now := s.clock.Now()
	s.mu.Lock()
	if replica == "" || replica == s.replica {
		s.mu.Unlock()
		return
	}
	s.replicaSeen[replica] = now
	var changed []string
	for name, c := range s.clusters {
		if c.Replica != replica || (c.Phase != PhaseRemote && c.Phase != PhaseRestored) {
			continue
		}
		next := *c
		next.fire(EventConfirmReplica)
		if !next.holderSilent {
			next.LastHeartbeat = now
		}
		next.setState(s.stateAt(next.LastHeartbeat, now))
		phaseOrState := next.Phase != c.Phase || next.State != c.State
		if !phaseOrState && next.LastHeartbeat.Equal(c.LastHeartbeat) {
			// Nothing to show (a cluster its replica says is silent):
			// no new snapshot.
			continue
		}
		// Readers outside the store (the query API's heartbeat time and
		// age, the persister) read LastHeartbeat from the snapshot: a
		// renewal that moves it needs a new one.
		updated := next
		s.clusters[name] = &updated
		if phaseOrState {
			changed = append(changed, name)
		}
	}
	listeners := s.listeners
	s.mu.Unlock()
	sort.Strings(changed)
	notify(listeners, changed...)
}

// ReplicaGone forgets the replica named replica, whose Lease is gone: its
// clusters keep the heartbeat time of its last renewal seen, and go
// Unknown when the grace period since then runs out, unless their spokes
// report elsewhere. Replicas get new names when they restart, so without
// this the store would keep one entry per replica ever seen.
func (s *Store) ReplicaGone(replica string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.replicaSeen, replica)
}

// ReplicaLive reports whether this replica saw the replica named replica
// renew its replica Lease within the grace period.
func (s *Store) ReplicaLive(replica string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	seen, ok := s.replicaSeen[replica]
	return ok && s.clock.Since(seen) <= s.grace
}

// EvaluateLiveness turns clusters silent past the grace period Unknown and
// returns the names of those whose state changed. Clusters become Available
// again on their next message.
func (s *Store) EvaluateLiveness() []string {
	now := s.clock.Now()
	var changed []string
	s.mu.Lock()
	for name, c := range s.clusters {
		if st := s.stateAt(c.LastHeartbeat, now); st != c.State {
			next := *c
			// Another replica's stream goes with its silence (Connected
			// derives from it); one open here stays open.
			next.setState(st)
			s.clusters[name] = &next
			changed = append(changed, name)
		}
	}
	listeners := s.listeners
	s.mu.Unlock()
	sort.Strings(changed)
	notify(listeners, changed...)
	return changed
}

// EvaluateLivenessOf turns the cluster named name Unknown when it has been
// silent past the grace period and reports whether its state changed, and
// how long from now it may turn Unknown if nothing is heard from it (zero
// when it is Unknown already or gone: only a message changes it then).
func (s *Store) EvaluateLivenessOf(name string) (changed bool, recheck time.Duration) {
	now := s.clock.Now()
	s.mu.Lock()
	c, ok := s.clusters[name]
	if !ok {
		s.mu.Unlock()
		return false, 0
	}
	st := s.stateAt(c.LastHeartbeat, now)
	if st != c.State {
		next := *c
		next.setState(st)
		s.clusters[name] = &next
		changed = true
	}
	listeners := s.listeners
	s.mu.Unlock()
	if changed {
		notify(listeners, name)
	}
	if st == StateAvailable {
		// Just past the grace period: stateAt needs more than grace.
		recheck = s.grace - now.Sub(c.LastHeartbeat) + livenessSlack
	}
	return changed, recheck
}

// livenessSlack is how long past the end of the grace period a cluster is
// looked at again.
const livenessSlack = 10 * time.Millisecond

// HeartbeatAge returns how long ago every cluster was last heard from.
func (s *Store) HeartbeatAge() map[string]time.Duration {
	now := s.clock.Now()
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]time.Duration, len(s.clusters))
	for name, c := range s.clusters {
		if !c.LastHeartbeat.IsZero() {
			out[name] = now.Sub(c.LastHeartbeat)
		}
	}
	return out
}

func (s *Store) stateAt(lastHeartbeat, now time.Time) State {
	if lastHeartbeat.IsZero() || now.Sub(lastHeartbeat) > s.grace {
		return StateUnknown
	}
	return StateAvailable
}

// applyDelta returns a new sorted slice: machines with delta's upserts
// replacing or adding Machines by name and its removals dropped.
func applyDelta(machines []*federationv1.Machine, delta *federationv1.Delta) []*federationv1.Machine {
	byName := make(map[string]*federationv1.Machine, len(machines)+len(delta.GetUpserts()))
	for _, m := range machines {
		byName[m.GetName()] = m
	}
	for _, m := range delta.GetUpserts() {
		byName[m.GetName()] = m
	}
	for _, name := range delta.GetRemovals() {
		delete(byName, name)
	}
	out := make([]*federationv1.Machine, 0, len(byName))
	for _, m := range byName {
		out = append(out, m)
	}
	sortMachines(out)
	return out
}

func sortMachines(machines []*federationv1.Machine) {
	slices.SortStableFunc(machines, func(a, b *federationv1.Machine) int {
		return strings.Compare(a.GetName(), b.GetName())
	})
}

// dedupMachines keeps the last of sorted Machines sharing a name.
func dedupMachines(sorted []*federationv1.Machine) []*federationv1.Machine {
	out := sorted[:0]
	for i, m := range sorted {
		if i+1 < len(sorted) && sorted[i+1].GetName() == m.GetName() {
			continue
		}
		out = append(out, m)
	}
	return out
}
