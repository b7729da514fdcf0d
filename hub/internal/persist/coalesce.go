package persist

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// remembered is what the persister remembers of one cluster.
type remembered struct {
	// last is the ClusterInventory and lease the Lease as last read or
	// written (nil: read them again).
	last  *imperatorv1alpha1.ClusterInventory
	lease *coordinationv1.Lease
	// withheld is true while the cluster's Lease is not renewed: neither
	// its inventory nor the condition saying it is not current could be
	// written (see writeFailed).
	withheld bool
}

// changeCount counts the store's changes of one cluster, and records the
// count its last successful sync saw.
type changeCount struct {
	changes, synced uint64
	// ok: a sync succeeded since the persister started or forgot the cluster.
	ok bool
}

// changed counts a change of cluster in the store (or a request to look at
// it afresh). The store calls it before its Source queues the cluster.
func (p *Persister) changed(cluster string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.changeCountLocked(cluster).changes++
}

// changeCountLocked is cluster's changeCount, made when it has none; p.mu
// is held.
func (p *Persister) changeCountLocked(cluster string) *changeCount {
	c, ok := p.changes[cluster]
	if !ok {
		c = &changeCount{}
		p.changes[cluster] = c
	}
	return c
}

// clean reports whether nothing changed in cluster since its last
// successful sync, and returns the count to hand synced after the next one.
func (p *Persister) clean(cluster string) (*changeCount, uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.changeCountLocked(cluster)
	return c, c.changes, c.ok && c.synced == c.changes
}

// synced records that a sync of cluster saw every change up to count
// (changes during the sync count after it), unless the cluster was
// forgotten meanwhile.
func (p *Persister) synced(cluster string, c *changeCount, count uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.changes[cluster] == c {
		c.synced, c.ok = count, true
	}
}

// state is what the persister remembers of cluster, an empty record when
// nothing. Only the reconcile handling cluster (or the flush) may call it.
func (p *Persister) state(cluster string) *remembered {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.clusters[cluster]
	if !ok {
		r = &remembered{}
		p.clusters[cluster] = r
	}
	return r
}

// drop forgets the inventory, Lease and withholding of cluster, not when it
// was last written.
func (p *Persister) drop(cluster string) {
	p.mu.Lock()
	delete(p.clusters, cluster)
	p.mu.Unlock()
	inventoryNotCurrent.DeleteLabelValues(cluster)
}

// nextWrite is how long a change of cluster waits to be written: until an
// interval has passed since its last write.
func (p *Persister) nextWrite(cluster string) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(0, p.interval-p.clock.Since(p.written[cluster]))
}

func (p *Persister) wrote(cluster string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.written[cluster] = p.clock.Now()
}

// forget drops everything the persister remembers of cluster.
func (p *Persister) forget(cluster string) {
	p.drop(cluster)
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.written, cluster)
	delete(p.changes, cluster)
}
