package store

import (
	"context"

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
// coalescing. The source listens only while its controller runs (a leader's
// controller, built afresh in every term, leaves nothing behind when the
// term ends); changes meanwhile are not queued, as the controller looks at
// every cluster when it starts.
func (s *Store) Source() source.Source {
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		unsubscribe := s.subscribe(func(cluster string) { q.Add(Request(cluster)) })
		go func() {
			<-ctx.Done()
			unsubscribe()
		}()
		for _, c := range s.List() {
			q.Add(Request(c.Name))
		}
		return nil
	})
}
