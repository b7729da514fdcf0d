package controller

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// countingReader counts the Workload lists of the requeue passes.
type countingReader struct {
	client.Reader
	lists atomic.Int32
}

func (r *countingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	r.lists.Add(1)
	return nil
}

// TestABusyFleetDoesNotMakeTheDispatcherAskAgainAndAgain: a hub whose
// figures change all the time (a busy fleet) must not drive one requeue
// pass of every pending Workload per change, each asking the hub again.
func TestABusyFleetDoesNotMakeTheDispatcherAskAgainAndAgain(t *testing.T) {
	reader := &countingReader{}
	h := &HubWatch{Client: reader, Out: make(chan event.GenericEvent), Spacing: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changed := make(chan struct{}, 1)
	go h.requeueLoop(ctx, changed)
	// 1.5 s of changes, one every millisecond.
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(time.Millisecond) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if got := reader.lists.Load(); got > 3 {
		t.Errorf("%d requeue passes in 1.5 s of changes, want at most 3 (one per second and the first)", got)
	}
	if got := reader.lists.Load(); got == 0 {
		t.Errorf("no requeue pass in 1.5 s of changes")
	}
}
