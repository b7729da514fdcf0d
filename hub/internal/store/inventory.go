package store

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/imperator-federation/imperator/internal/text"

	"github.com/imperator-federation/imperator/hub/internal/ingest"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// Connect records that a Report stream of the cluster opened with hello. The
// spoke must send a Snapshot next: until then Deltas are refused.
func (s *Store) Connect(name string, hello *federationv1.Hello) {
	now := s.clock.Now()
	s.update(name, true, func(c *Cluster, _ bool) (Result, bool) {
		c.AgentVersion = hello.GetAgentVersion()
		c.AgentMode = AgentModeName(hello.GetAgentMode())
		c.Replica = s.replica
		c.LastHeartbeat = now
		c.Liveness = LivenessAvailable
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
		c.Liveness = LivenessAvailable
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
	msg = text.Truncate(msg, maxOutdatedMessage)
	now := s.clock.Now()
	return s.update(name, true, func(c *Cluster, _ bool) (Result, bool) {
		c.LastHeartbeat = now
		changed := c.Outdated != msg || c.Liveness != LivenessAvailable
		c.Outdated = msg
		c.setLiveness(LivenessAvailable)
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
			c.setLiveness(LivenessAvailable)
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
		changed := c.Liveness != LivenessAvailable
		c.setLiveness(LivenessAvailable)
		if since := unreachableSince(hb, c.APIServerUnreachableSince, now); !since.Equal(c.APIServerUnreachableSince) {
			c.APIServerUnreachableSince = since
			changed = true
		}
		if msg := text.Printable(text.Truncate(hb.GetInjectionUnavailable(), maxInjectionMessage)); msg != c.InjectionUnavailable {
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
