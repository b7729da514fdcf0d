package reporter

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// probeInterval is how often the freshness probe reads the agent's
// Namespace: often enough that a lost API server is noticed well within
// staleAfter, and at most every heartbeat.
func probeInterval(heartbeat, staleAfter time.Duration) time.Duration {
	return max(min(heartbeat, staleAfter/3), 50*time.Millisecond)
}

// probeAPIServer reads the agent's own Namespace from the API server (with
// the uncached client) every probeInterval until ctx is done, and records
// each time it got an answer from it.
func (r *Reporter) probeAPIServer(ctx context.Context) {
	interval := probeInterval(r.opts.HeartbeatInterval, r.opts.APIServerStaleAfter)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	stale := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		probeCtx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
		err := r.opts.Client.Get(probeCtx, client.ObjectKey{Name: r.opts.Namespace}, &corev1.Namespace{})
		cancel()
		now := r.now()
		if apiServerAnswered(err) {
			r.lastContact.Store(now.UnixNano())
		}
		switch since := r.unreachableSince(now); {
		case !since.IsZero() && !stale:
			stale = true
			r.log.Error(err, "Cannot reach the cluster's API server; heartbeats say the figures are stale", "lastContact", since)
		case since.IsZero() && stale:
			stale = false
			r.log.Info("Reached the cluster's API server again; figures are current")
		}
	}
}

// apiServerAnswered reports whether a read that returned err reached the API
// server: it answered, even if only to say the object is missing or not
// readable with the agent's RBAC (the agent's informers are unaffected by a
// missing permission to read Namespaces).
func apiServerAnswered(err error) bool {
	return err == nil || apierrors.IsNotFound(err) || apierrors.IsForbidden(err)
}

// unreachableSince is the time of the last contact with the API server when
// that is more than APIServerStaleAfter before now, else zero.
func (r *Reporter) unreachableSince(now time.Time) time.Time {
	last := time.Unix(0, r.lastContact.Load())
	if now.Sub(last) <= r.opts.APIServerStaleAfter {
		return time.Time{}
	}
	return last
}

// heartbeat is the Heartbeat sent at now.
func (r *Reporter) heartbeat(now time.Time) *federationv1.Heartbeat {
	hb := &federationv1.Heartbeat{Generation: r.generation, SentAt: timestamp(now)}
	if since := r.unreachableSince(now); !since.IsZero() {
		hb.ApiServerUnreachableSince = timestamp(since)
	}
	if r.opts.InjectionUnavailable != nil {
		hb.InjectionUnavailable = r.opts.InjectionUnavailable()
	}
	return hb
}
