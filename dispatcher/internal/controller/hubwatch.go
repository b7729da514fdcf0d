package controller

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// Reconnection backoff of the hub's Watch stream.
const (
	watchBackoffBase = 500 * time.Millisecond
	watchBackoffMax  = 30 * time.Second
)

// DefaultRequeueSpacing is the least time between two passes that requeue
// the pending Workloads: a busy fleet changes some cluster's figures many
// times a second, and every pass asks the hub again for every pending
// Workload.
const DefaultRequeueSpacing = time.Second

// HubWatch follows the hub's Watch stream and, at each change of a
// cluster's state or figures (and at each (re)connection, whose initial
// events may carry what was missed), requeues every Workload the dispatcher
// acts on: the figures it was decided on are stale.
type HubWatch struct {
	Hub queryv1.QueryClient
	// Client lists Workloads (from the cache).
	Client client.Reader
	// Out receives the Workloads to requeue.
	Out chan<- event.GenericEvent
	// Spacing is the least time between two requeue passes (changes
	// meanwhile go together into the next); DefaultRequeueSpacing when 0.
	Spacing time.Duration
}

// Start runs until ctx ends (a manager Runnable).
func (h *HubWatch) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("hub-watch")
	changed := make(chan struct{}, 1)
	go h.requeueLoop(ctx, changed)
	backoff := watchBackoffBase
	for ctx.Err() == nil {
		received, err := h.follow(ctx, changed)
		if ctx.Err() != nil {
			return nil
		}
		if received {
			backoff = watchBackoffBase
		}
		log.Info("Hub watch stream ended, reconnecting", "error", err, "after", backoff)
		// Jitter: a fleet of dispatchers does not reconnect in step.
		wait := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		backoff = min(2*backoff, watchBackoffMax)
	}
	return nil
}

// NeedLeaderElection is true: only the leader dispatches.
func (h *HubWatch) NeedLeaderElection() bool { return true }

// follow reads one stream until it fails; received says whether any event came.
func (h *HubWatch) follow(ctx context.Context, changed chan<- struct{}) (received bool, err error) {
	stream, err := h.Hub.Watch(ctx, &queryv1.WatchRequest{})
	if err != nil {
		return false, err
	}
	for {
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the hub closed the stream")
			}
			return received, err
		}
		received = true
		select {
		case changed <- struct{}{}:
		default: // a requeue is due already
		}
	}
}

// requeueLoop requeues the pending Workloads once per burst of changes,
// at most once per Spacing.
func (h *HubWatch) requeueLoop(ctx context.Context, changed <-chan struct{}) {
	log := ctrl.LoggerFrom(ctx).WithName("hub-watch")
	spacing := h.Spacing
	if spacing <= 0 {
		spacing = DefaultRequeueSpacing
	}
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		if wait := spacing - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		last = time.Now()
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(WorkloadGVK.GroupVersion().WithKind("WorkloadList"))
		if err := h.Client.List(ctx, list); err != nil {
			log.Error(err, "Listing Workloads to requeue")
			continue
		}
		for i := range list.Items {
			if !pending(&list.Items[i]) {
				continue
			}
			select {
			case h.Out <- event.GenericEvent{Object: &list.Items[i]}:
			case <-ctx.Done():
				return
			}
		}
	}
}
