package store

import (
	"slices"
	"sort"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/imperator-federation/imperator/hub/internal/ingest"
)

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
	next := &Cluster{Name: name, Liveness: LivenessUnknown, Phase: PhaseIdle}
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
