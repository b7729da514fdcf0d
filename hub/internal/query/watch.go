package query

import (
	"slices"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// broadcaster fans the store's change notifications out to Watch streams.
// It never blocks the store: each subscriber keeps the set of clusters that
// changed since it last sent, and sends their latest state when it can, so a
// slow client gets coalesced, never outdated, events.
type broadcaster struct {
	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	closed bool
	done   chan struct{}
}

type subscriber struct {
	only map[string]bool // nil: every cluster

	mu      sync.Mutex
	pending map[string]struct{}
	wake    chan struct{} // capacity 1
}

func newBroadcaster() *broadcaster {
	return &broadcaster{subs: map[*subscriber]struct{}{}, done: make(chan struct{})}
}

// publish is the store's change listener.
func (b *broadcaster) publish(cluster string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for sub := range b.subs {
		if sub.only != nil && !sub.only[cluster] {
			continue
		}
		sub.mu.Lock()
		sub.pending[cluster] = struct{}{}
		sub.mu.Unlock()
		select {
		case sub.wake <- struct{}{}:
		default:
		}
	}
}

func (b *broadcaster) subscribe(only map[string]bool) (*subscriber, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, false
	}
	sub := &subscriber{only: only, pending: map[string]struct{}{}, wake: make(chan struct{}, 1)}
	b.subs[sub] = struct{}{}
	return sub, true
}

func (b *broadcaster) unsubscribe(sub *subscriber) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.subs, sub)
}

func (b *broadcaster) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		close(b.done)
	}
}

// take returns the clusters changed since the last take, sorted.
func (sub *subscriber) take() []string {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	out := make([]string, 0, len(sub.pending))
	for name := range sub.pending {
		out = append(out, name)
	}
	clear(sub.pending)
	slices.Sort(out)
	return out
}

// errShuttingDown ends Watch streams when the hub stops; clients reconnect.
var errShuttingDown = status.Error(codes.Unavailable, "the hub is shutting down: reconnect")

// Watch implements queryv1.QueryServer.
func (s *Service) Watch(req *queryv1.WatchRequest, stream queryv1.Query_WatchServer) error {
	ctx := stream.Context()
	if _, err := authorize(ctx, RoleViewer); err != nil {
		return err
	}
	only, err := validateWatch(req)
	if err != nil {
		return err
	}
	// Subscribe before reading the initial state so that no change falls
	// between the two; a change seen twice is harmless.
	sub, ok := s.watch.subscribe(only)
	if !ok {
		return errShuttingDown
	}
	defer s.watch.unsubscribe(sub)
	if !req.GetSkipInitial() {
		now := s.clock.Now()
		for _, c := range s.store.List() {
			if only != nil && !only[c.Name] {
				continue
			}
			if err := stream.Send(s.watchEvent(c.Name, now, true)); err != nil {
				return err
			}
		}
	}
	for {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.watch.done:
			return errShuttingDown
		case <-sub.wake:
		}
		now := s.clock.Now()
		for _, name := range sub.take() {
			if err := stream.Send(s.watchEvent(name, now, false)); err != nil {
				return err
			}
		}
	}
}
