package store

import (
	"slices"
	"sort"
	"time"
)

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
		lease := s.observeLease(c, p, now)
		if existed && p.Replica != "" && p.Replica == s.replica {
			// This replica's own write coming back: it knows better.
			return Result{}, false
		}
		moved := s.peerMoved(c, p, lease)
		if c.Replica == s.replica && (c.Connected || c.synced) {
			if !moved {
				return Result{}, false
			}
			superseded = c.Connected
		}
		before := *c
		takeInventory(c, p.Inventory, existed)
		s.observeHeartbeat(c, p, lease, now)
		c.Replica = p.Replica
		c.Liveness = s.livenessAt(c.LastHeartbeat, now)
		c.Outdated = p.Outdated
		c.synced = false
		// The holder runs when its Lease was renewed after this replica
		// started (p.Live), when this replica saw it renew, or when it was
		// judged running before and its Lease has not changed since (a
		// write of its inventory alone proves nothing less).
		stillLive := !lease.renewal && !lease.firstSight && before.Phase == PhaseRemote && before.Replica == p.Replica
		if p.Live || (lease.renewal && !lease.firstSight) || stillLive {
			c.fire(EventObserveLive)
		} else {
			c.fire(EventObserveRestored)
		}
		return Result{}, !existed || observedChange(&before, c)
	})
	return superseded
}

// leaseSight is what one Peer said of the cluster's Lease, against what this
// replica saw of it before.
type leaseSight struct {
	// firstSight: this replica had seen no Lease of the cluster.
	firstSight bool
	// renewal: the holder or its renewal time changed.
	renewal bool
	// prevHolder held the Lease before.
	prevHolder string
}

// observeLease records the Lease of p in c: its holder, its renewal time and
// when this replica first saw that renewal (its own clock).
func (s *Store) observeLease(c *Cluster, p Peer, now time.Time) leaseSight {
	l := leaseSight{firstSight: c.LeaseHolder == "", prevHolder: c.LeaseHolder}
	l.renewal = p.Replica != "" && (p.Replica != c.LeaseHolder || !p.RenewTime.Equal(c.LeaseRenewTime))
	if l.renewal {
		c.LeaseHolder, c.LeaseRenewTime, c.LeaseSeenAt = p.Replica, p.RenewTime, now
		if p.Replica != s.replica && c.streaming() {
			c.renewalsSinceConnect++
		}
	}
	return l
}

// peerMoved reports whether p is newer evidence than this replica's: another
// replica heard from the spoke after this one did.
func (s *Store) peerMoved(c *Cluster, p Peer, l leaseSight) bool {
	switch {
	case p.Replica == "" || p.Replica == s.replica:
		return false
	case l.firstSight:
		return p.RenewTime.After(c.LastHeartbeat)
	case c.streaming():
		// While a stream is open here, another replica's renewal
		// written before it opened may still arrive: the spoke has
		// moved when that replica took the Lease from this one or
		// from a third, or renewed it twice since the stream opened.
		return l.renewal && (l.prevHolder == s.replica || p.Replica != l.prevHolder || c.renewalsSinceConnect >= 2)
	default:
		return l.renewal
	}
}

// takeInventory takes the persisted figures of in: the Machines when they
// are of another epoch or generation, the agent's version and mode always.
func takeInventory(c *Cluster, in Cluster, existed bool) {
	if !existed || c.Epoch != in.Epoch || c.Generation != in.Generation {
		machines := slices.Clone(in.Machines)
		sortMachines(machines)
		c.Machines = dedupMachines(machines)
		c.Epoch, c.Generation, c.ObservedAt = in.Epoch, in.Generation, in.ObservedAt
	}
	c.AgentVersion, c.AgentMode, c.InjectionUnavailable = in.AgentVersion, in.AgentMode, in.InjectionUnavailable
}

// observeHeartbeat sets when the spoke was last heard of, by this replica's
// clock, from what p says and what this replica saw of the holder.
func (s *Store) observeHeartbeat(c *Cluster, p Peer, l leaseSight, now time.Time) {
	switch {
	case l.renewal && !l.firstSight:
		// The serving replica heard from the spoke just now.
		c.LastHeartbeat = now
	case l.firstSight || c.Replica != p.Replica:
		c.LastHeartbeat = p.Inventory.LastHeartbeat
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
	c.holderSilent = p.Silent && (!l.renewal || l.firstSight)
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
}

// observedChange reports whether Observe changed what listeners of the
// cluster see.
func observedChange(before, c *Cluster) bool {
	return c.Epoch != before.Epoch || c.Generation != before.Generation || c.Liveness != before.Liveness ||
		c.Connected != before.Connected || c.Restored != before.Restored || c.Replica != before.Replica ||
		c.AgentVersion != before.AgentVersion || c.AgentMode != before.AgentMode ||
		c.InjectionUnavailable != before.InjectionUnavailable || c.Outdated != before.Outdated
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
		next.setLiveness(s.livenessAt(next.LastHeartbeat, now))
		phaseOrLiveness := next.Phase != c.Phase || next.Liveness != c.Liveness
		if !phaseOrLiveness && next.LastHeartbeat.Equal(c.LastHeartbeat) {
			// Nothing to show (a cluster its replica says is silent):
			// no new snapshot.
			continue
		}
		// Readers outside the store (the query API's heartbeat time and
		// age, the persister) read LastHeartbeat from the snapshot: a
		// renewal that moves it needs a new one.
		updated := next
		s.clusters[name] = &updated
		if phaseOrLiveness {
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
