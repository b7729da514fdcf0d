package reporter

import (
	"context"
	"time"
)

// leading reports whether this replica leads (always, without Options.Leader).
func (r *Reporter) leading() bool { return r.opts.Leader == nil || r.opts.Leader.Leading() }

// awaitLead waits until this replica leads; false when ctx ended first.
func (r *Reporter) awaitLead(ctx context.Context) bool {
	ticker := time.NewTicker(mandateCheck)
	defer ticker.Stop()
	for !r.leading() {
		select {
		case <-ctx.Done():
			return false
		case <-ticker.C:
		}
	}
	return ctx.Err() == nil
}

// mandate ends a turn (end) once this replica has lost the lead, has reached
// the API server since, and has not led again within reclaimWindow of that:
// then another replica leads and reports current figures. Until then — the
// API server is gone for this replica, and with it the Lease — the last
// leader keeps reporting, with heartbeats that say since when the API server
// is unreachable, so that the hub shows the cluster stale instead of silent
// and then Offline. Once the API server is back, the replica usually wins
// its own Lease again (it still names it) and the turn, and the stream to
// the hub, go on.
//
// Two replicas may report for the cluster meanwhile: this one, cut off from
// its API server, and a new leader that reaches it (a partition between one
// replica and the API server, not an outage of the API server). The hub keeps
// one Report stream per cluster, the newest: a new stream ends the older one
// with Aborted (server.openSession), and a Snapshot of another epoch replaces
// the inventory held. A reporter whose stream was replaced while it does not
// lead ends its turn (run), so the new leader's stream wins within one
// reconnect, and the figures the hub holds are the new leader's, which reach
// the API server. At worst the hub shows this replica's stale figures, marked
// stale, between its reconnect and the leader's next one.
func (r *Reporter) mandate(ctx context.Context, end context.CancelFunc) {
	ticker := time.NewTicker(mandateCheck)
	defer ticker.Stop()
	var lostAt, answeredAt time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if r.leading() {
			lostAt, answeredAt = time.Time{}, time.Time{}
			continue
		}
		now := r.now()
		switch {
		case lostAt.IsZero():
			lostAt = now
			r.log.Info("Lost the lead; reporting on until the cluster's API server answers again")
		case answeredAt.IsZero():
			if time.Unix(0, r.lastContact.Load()).After(lostAt) {
				answeredAt = now
			}
		case now.Sub(answeredAt) >= r.reclaim:
			end()
			return
		}
	}
}
