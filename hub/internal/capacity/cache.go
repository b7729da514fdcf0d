package capacity

import (
	"sync"

	"github.com/imperator-federation/imperator/hub/internal/store"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// UsageCache shares ClusterUsageOf between callers: it is computed once per
// cluster value (store.Cluster values are immutable and replaced on every
// change), however many Watch streams and GetUsage calls ask for it. The
// values it returns are shared and must not be modified.
type UsageCache struct {
	mu      sync.Mutex
	entries map[string]*usageEntry
}

type usageEntry struct {
	cluster *store.Cluster
	once    sync.Once
	usage   *queryv1.ClusterUsage
}

// Of returns ClusterUsageOf(c), computed once for c.
func (u *UsageCache) Of(c *store.Cluster) *queryv1.ClusterUsage {
	u.mu.Lock()
	if u.entries == nil {
		u.entries = map[string]*usageEntry{}
	}
	e, ok := u.entries[c.Name]
	if !ok || e.cluster != c {
		e = &usageEntry{cluster: c}
		u.entries[c.Name] = e
	}
	u.mu.Unlock()
	// Outside the cache's lock: callers asking for other clusters do not
	// wait for this one.
	e.once.Do(func() { e.usage = ClusterUsageOf(c) })
	return e.usage
}

// Forget drops the entry of a cluster that left the store.
func (u *UsageCache) Forget(name string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.entries, name)
}
