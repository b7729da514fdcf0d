package scores

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/imperator-federation/imperator/hub/internal/store"
	"github.com/imperator-federation/imperator/internal/schemes"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// TestANewTermWaitsForTheLastOne: when the Lease is lost, controller-runtime
// does not wait for the term's controllers, and the publisher's controller
// is built again in the next term. A write of the ending term still under
// way must not race the new term's: the new term waits for it, then
// publishes.
func TestANewTermWaitsForTheLastOne(t *testing.T) {
	scheme, err := schemes.Hub()
	if err != nil {
		t.Fatal(err)
	}
	var reads atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&clusterv1alpha1.AddOnPlacementScore{}).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if reads.Add(1) == 1 {
				// The first term's write hangs, as on a slow API server.
				close(entered)
				<-release
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	st := store.New(nil, time.Minute)
	st.Connect("a", &federationv1.Hello{ClusterName: "a"})
	snap := &federationv1.Snapshot{Generation: 1, ObservedAt: timestamppb.Now(), Machines: []*federationv1.Machine{
		{Name: "m", Group: "g", Types: []*federationv1.MachineType{{Name: "t", Cpu: "4", Memory: "16Gi", Available: 2,
			Usage: &federationv1.Usage{Maximum: 2, Reserved: 2}}}},
	}}
	if res := st.ApplySnapshot("a", 0, snap); res.Refused != nil {
		t.Fatalf("snapshot refused: %v", res.Refused)
	}
	p := New(c, st, Options{MinInterval: time.Millisecond})

	first, stopFirst := context.WithCancel(context.Background())
	firstDone := make(chan struct{})
	go func() { _, _ = p.newTerm().Reconcile(first, store.Request("a")); close(firstDone) }()
	<-entered
	stopFirst() // the Lease is lost while the first term writes

	second, stopSecond := context.WithCancel(context.Background())
	defer stopSecond()
	type outcome struct {
		res reconcile.Result
		err error
	}
	secondDone := make(chan outcome, 1)
	go func() {
		res, err := p.newTerm().Reconcile(second, store.Request("a"))
		secondDone <- outcome{res, err}
	}()
	time.Sleep(100 * time.Millisecond) // give a second term that did not wait the time to start writing
	if n := reads.Load(); n != 1 {
		t.Errorf("the new term read %d times while the last one was still writing; want it to wait", n-1)
	}
	close(release)
	<-firstDone
	got := <-secondDone
	if got.err != nil {
		t.Fatalf("the new term's reconcile failed: %v", got.err)
	}
	if reads.Load() < 2 {
		t.Fatal("the new term never published once the last one had ended")
	}
	// Fresh scores are refreshed before they expire.
	if got.res.RequeueAfter <= 0 || got.res.RequeueAfter > DefaultValidFor {
		t.Errorf("RequeueAfter = %s after publishing fresh scores, want a refresh within %s", got.res.RequeueAfter, DefaultValidFor)
	}
}
