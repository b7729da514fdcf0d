package store

import (
	"sort"
	"time"
)

// DefaultGracePeriod is how long a cluster may stay silent before it becomes
// Unknown: several missed heartbeats, well under OCM's 5 minutes.
const DefaultGracePeriod = 40 * time.Second

// EvaluateLiveness turns clusters silent past the grace period Unknown and
// returns the names of those whose liveness changed. Clusters become Available
// again on their next message.
func (s *Store) EvaluateLiveness() []string {
	now := s.clock.Now()
	var changed []string
	s.mu.Lock()
	for name, c := range s.clusters {
		if live := s.livenessAt(c.LastHeartbeat, now); live != c.Liveness {
			next := *c
			// Another replica's stream goes with its silence (Connected
			// derives from it); one open here stays open.
			next.setLiveness(live)
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
// silent past the grace period and reports whether its liveness changed, and
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
	live := s.livenessAt(c.LastHeartbeat, now)
	if live != c.Liveness {
		next := *c
		next.setLiveness(live)
		s.clusters[name] = &next
		changed = true
	}
	listeners := s.listeners
	s.mu.Unlock()
	if changed {
		notify(listeners, name)
	}
	if live == LivenessAvailable {
		// Just past the grace period: livenessAt needs more than grace.
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

func (s *Store) livenessAt(lastHeartbeat, now time.Time) Liveness {
	if lastHeartbeat.IsZero() || now.Sub(lastHeartbeat) > s.grace {
		return LivenessUnknown
	}
	return LivenessAvailable
}
