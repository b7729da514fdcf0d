package server

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/imperator-federation/imperator/hub/internal/registry"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// session is one open Report stream; a newer stream of the same cluster
// replaces it.
type session struct {
	id uint64
	// ended is closed when the stream ends, by the hub (reason says why)
	// or by the spoke: a hold request waiting for its answer learns at once.
	ended  chan struct{}
	reason error
	// deregistered is set when the cluster's ManagedCluster was deleted.
	deregistered bool
	// holds is set when the spoke's Hello listed HoldCapability; outbox
	// carries HoldRequests to the goroutine that sends on the stream.
	holds  bool
	outbox chan *federationv1.HubMessage
	// reportsHubHolds is set when the Hello listed HubHoldsCapability;
	// hubHolds is what the spoke last reported of them (guarded by the
	// Server's mu), nil until its first Snapshot.
	reportsHubHolds bool
	hubHolds        []*federationv1.HubHold
}

// EndSession ends the cluster's Report stream, if one is open here (its
// ManagedCluster was deleted).
func (s *Server) EndSession(cluster string) {
	s.endSession(cluster, true, refusal(registry.RefusedNotRegistered, cluster,
		fmt.Sprintf("cluster %q was deregistered from the hub; join again with a new token", cluster)))
}

// EndStaleSession ends the cluster's Report stream, if one is open here,
// because the spoke reports to another hub replica now: what is left here
// is a connection the spoke gave up (the spoke would reconnect if not).
func (s *Server) EndStaleSession(cluster string) {
	s.endSession(cluster, false, status.Error(codes.Aborted, "the spoke reports to another hub replica now"))
}

// endSession ends the cluster's open stream with reason.
func (s *Server) endSession(cluster string, deregistered bool, reason error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if deregistered {
		delete(s.budgets, cluster)
	}
	if sess, ok := s.sessions[cluster]; ok {
		sess.reason = reason
		sess.deregistered = deregistered
		close(sess.ended)
		delete(s.sessions, cluster)
		s.metrics.connectedSpokes.Dec()
	}
}

// budgetOf is the cluster's message budget, one for all of its Report
// streams (kept while the hub runs, dropped when the cluster is
// deregistered): a spoke that reopens its stream does not get a fresh burst.
func (s *Server) budgetOf(cluster string) *messageBudget {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.budgets[cluster]
	if !ok {
		b = newMessageBudget(s.store.Limits(), s.opts.Clock)
		s.budgets[cluster] = b
	}
	return b
}

func (s *Server) openSession(cluster string, holds bool) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	sess := &session{id: s.nextID, ended: make(chan struct{}), holds: holds, outbox: make(chan *federationv1.HubMessage, outboxSize)}
	if old, ok := s.sessions[cluster]; ok {
		old.reason = status.Error(codes.Aborted, "a newer Report stream of this cluster replaced this one")
		close(old.ended)
	} else {
		s.metrics.connectedSpokes.Inc()
	}
	s.sessions[cluster] = sess
	return sess
}

func (s *Server) closeSession(cluster string, sess *session) {
	s.mu.Lock()
	cur, ok := s.sessions[cluster]
	current := ok && cur.id == sess.id
	if current {
		// Still in the map, so nobody closed ended (endSession and a
		// replacing openSession close it as they take it out).
		delete(s.sessions, cluster)
		s.metrics.connectedSpokes.Dec()
		close(sess.ended)
	}
	deregistered := sess.deregistered
	s.mu.Unlock()
	switch {
	case deregistered:
		// A message applied while the cluster was being forgotten may have
		// brought it back; the stream is over now, forget it for good.
		s.store.Remove(cluster)
	case current:
		s.store.Disconnect(cluster)
	}
}
