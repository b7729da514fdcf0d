package store

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// TestSourceQueuesEveryClusterThenChangesWhileItsControllerRuns: a
// controller fed by Source hears of every cluster when it starts and of each
// change after, once however often the cluster changed; once it stops, the
// store keeps no listener of it (a leader term leaves nothing behind).
func TestSourceQueuesEveryClusterThenChangesWhileItsControllerRuns(t *testing.T) {
	s := New(nil, time.Minute)
	s.Connect("a", &federationv1.Hello{Epoch: 1})
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Source().Start(ctx, q); err != nil {
		t.Fatal(err)
	}
	if q.Len() != 1 {
		t.Fatalf("queue holds %d clusters on start, want 1 (a)", q.Len())
	}
	s.Connect("b", &federationv1.Hello{Epoch: 1})
	s.Disconnect("b")
	if q.Len() != 2 {
		t.Fatalf("queue holds %d clusters after b changed twice, want 2 (a, b once)", q.Len())
	}
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.RLock()
		n := len(s.listeners)
		s.mu.RUnlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d listeners left after the controller stopped, want none", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
