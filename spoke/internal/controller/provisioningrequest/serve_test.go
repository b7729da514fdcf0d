package provisioningrequest

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// TestOneAnswerWithoutTheCRDReleasesNothing: an API server that says once
// that it does not serve ProvisioningRequests (starting behind a load
// balancer, its CRD handler not ready) must not stop the Controller and
// release every booking; answers in a row do.
func TestOneAnswerWithoutTheCRDReleasesNothing(t *testing.T) {
	cl, err := cluster.New(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	answers := []bool{false, true, false, false}
	s := &Server{served: func(*rest.Config) (bool, error) {
		a := answers[0]
		answers = answers[1:]
		return a, nil
	}, clusters: map[multicluster.ClusterName]*clusterServer{}}
	cancelled := 0
	done := make(chan error, 1)
	cs := &clusterServer{cluster: cl, running: &run{cancel: func() { cancelled++; done <- nil }, done: done}}
	ctx := context.Background()

	for i, wantRunning := range []bool{true, true, true, false} {
		s.check(ctx, logr.Discard(), cs, false)
		if running := cs.running != nil; running != wantRunning {
			t.Fatalf("after answer %d: running = %v, want %v", i+1, running, wantRunning)
		}
	}
	if cancelled != 1 {
		t.Errorf("the Controller was stopped %d times, want once", cancelled)
	}
}
