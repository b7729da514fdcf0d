package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/imperator-federation/imperator/hub/internal/holds"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// HoldCapability is the Hello capability of a spoke agent that answers
// HoldRequests. The hub sends HoldRequests only to spokes that listed it: an
// older agent ignores a HubMessage kind it does not know, so asking it would
// only wait out the deadline.
const HoldCapability = "holds"

// outboxSize bounds the HubMessages waiting to be sent on one stream beyond
// the stream's own Acks and Resyncs.
const outboxSize = 64

// ErrStreamEnded is the error of RequestHold when the stream ended before
// the spoke answered; its other errors are those of holds.Spokes.
var ErrStreamEnded = errors.New("the spoke's Report stream ended before it answered")

// holdWaiters routes HoldResponses to the RequestHold calls waiting for them,
// by request ID.
type holdWaiters struct {
	mu      sync.Mutex
	next    uint64
	waiting map[string]holdWaiter
}

type holdWaiter struct {
	cluster string
	answer  chan *federationv1.HoldResponse
}

// HoldStream reports whether the cluster's Report stream is open on this
// replica and whether its agent answers HoldRequests.
func (s *Server) HoldStream(cluster string) (connected, supportsHolds bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.sessions[cluster]
	if !ok {
		return false, false
	}
	return true, sess.holds
}

// RequestHold sends req to the cluster's spoke over its Report stream and
// waits for its HoldResponse until ctx ends. It never waits on a spoke that
// cannot answer: holds.ErrNotConnectedHere, holds.ErrHoldsUnsupported and
// ErrStreamEnded come back at once. The request ID is set here.
func (s *Server) RequestHold(ctx context.Context, cluster string, req *federationv1.HoldRequest) (*federationv1.HoldResponse, error) {
	s.mu.Lock()
	sess, ok := s.sessions[cluster]
	s.mu.Unlock()
	if !ok {
		return nil, holds.ErrNotConnectedHere
	}
	if !sess.holds {
		return nil, holds.ErrHoldsUnsupported
	}
	w := &s.holdWaiters
	w.mu.Lock()
	if w.waiting == nil {
		w.waiting = map[string]holdWaiter{}
	}
	w.next++
	id := strconv.FormatUint(w.next, 10)
	answer := make(chan *federationv1.HoldResponse, 1)
	w.waiting[id] = holdWaiter{cluster: cluster, answer: answer}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.waiting, id)
		w.mu.Unlock()
	}()

	req.RequestId = id
	msg := &federationv1.HubMessage{Kind: &federationv1.HubMessage_HoldRequest{HoldRequest: req}}
	select {
	case sess.outbox <- msg:
	case <-sess.ended:
		return nil, ErrStreamEnded
	case <-ctx.Done():
		return nil, fmt.Errorf("sending the hold request: %w", ctx.Err())
	}
	select {
	case resp := <-answer:
		return resp, nil
	case <-sess.ended:
		return nil, ErrStreamEnded
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the spoke's answer: %w", ctx.Err())
	}
}

// holdAnswered hands a spoke's HoldResponse to the call waiting for it; an
// answer nobody waits for (late, or for another cluster) is dropped.
func (s *Server) holdAnswered(cluster string, resp *federationv1.HoldResponse) {
	w := &s.holdWaiters
	w.mu.Lock()
	waiter, ok := w.waiting[resp.GetRequestId()]
	w.mu.Unlock()
	if !ok || waiter.cluster != cluster {
		return
	}
	select {
	case waiter.answer <- resp:
	default:
	}
}

// supportsHolds reports whether a Hello lists HoldCapability.
func supportsHolds(hello *federationv1.Hello) bool {
	return slices.Contains(hello.GetCapabilities(), HoldCapability)
}

// HubHoldsCapability is the Hello capability of a spoke agent that reports
// the CapacityHolds the hub asked for (Snapshot.hub_holds).
const HubHoldsCapability = "hub-holds"

// maxHubHolds bounds the hub holds one report may carry.
const maxHubHolds = 1000

func reportsHubHolds(hello *federationv1.Hello) bool {
	return slices.Contains(hello.GetCapabilities(), HubHoldsCapability)
}

// recordHubHolds keeps the hub holds a Snapshot or a Delta of sess reports.
// A report over maxHubHolds ends the stream with InvalidArgument.
func (s *Server) recordHubHolds(sess *session, msg *federationv1.SpokeMessage) error {
	if !sess.reportsHubHolds {
		return nil
	}
	var reported []*federationv1.HubHold
	switch {
	case msg.GetSnapshot() != nil:
		reported = msg.GetSnapshot().GetHubHolds()
	case msg.GetDelta().GetHubHoldsChanged():
		reported = msg.GetDelta().GetHubHolds()
	default:
		return nil
	}
	if len(reported) > maxHubHolds {
		return status.Errorf(codes.InvalidArgument, "hub_holds: %d, at most %d", len(reported), maxHubHolds)
	}
	if reported == nil {
		reported = []*federationv1.HubHold{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sess.hubHolds = reported
	return nil
}

// HubHoldReports are, for every spoke whose Report stream is open here and
// that reports them, the hub holds it last reported.
func (s *Server) HubHoldReports() map[string][]*federationv1.HubHold {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]*federationv1.HubHold{}
	for cluster, sess := range s.sessions {
		if sess.reportsHubHolds && sess.hubHolds != nil {
			out[cluster] = sess.hubHolds
		}
	}
	return out
}
