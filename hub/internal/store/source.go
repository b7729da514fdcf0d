package store

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Request is the reconcile.Request of the cluster named cluster, as Source
// queues it: the cluster's name, no namespace.
func Request(cluster string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Name: cluster}}
}

// Source is a controller-runtime source of the store's clusters for one
// controller: when the controller starts it queues every cluster, then every
// cluster whose inventory, connection or liveness changes (see OnChange) —
// heartbeats that change nothing else are not queued; controllers that need
// to look again later return a RequeueAfter. The controller's queue holds a
// cluster once however often it changes before its reconcile: that is the
// coalescing. Changes while the controller is not running are not queued
// (it looks at every cluster when it starts again). Call Source once per
// controller start: a leader's controller, built afresh in every term,
// calls it in every term.
func (s *Store) Source() source.Source {
	var (
		mu    sync.Mutex
		queue workqueue.TypedRateLimitingInterface[reconcile.Request]
	)
	s.OnChange(func(cluster string) {
		mu.Lock()
		q := queue
		mu.Unlock()
		if q != nil {
			q.Add(Request(cluster))
		}
	})
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		mu.Lock()
		queue = q
		mu.Unlock()
		go func() {
			<-ctx.Done()
			mu.Lock()
			queue = nil
			mu.Unlock()
		}()
		for _, c := range s.List() {
			q.Add(Request(c.Name))
		}
		return nil
	})
}
