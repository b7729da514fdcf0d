// Package integration runs the hub CA's creation against a real API server.
package integration

import (
	"bytes"
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/imperator-federation/imperator/hub/internal/hubca"
	"github.com/imperator-federation/imperator/internal/pki"
	"github.com/imperator-federation/imperator/test/util/framework"
)

const (
	namespace = "imperator-system"
	secret    = "hub-ca"
)

// Two hub replicas starting at once both find no CA Secret and both try to
// create one. The one whose create comes second must use the CA of the
// first: a replica that failed instead would crash-loop on a fresh install,
// and one that used its own CA would sign certificates the others refuse.
func TestTheReplicaLosingTheRaceToCreateTheHubCAUsesTheWinnersCA(t *testing.T) {
	ctx := context.Background()
	env := startAPIServer(t, framework.Options{})
	direct, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}

	// The other replica creates the Secret after this one found none and
	// before this one's create reaches the API server.
	var winner *pki.CA
	loser := interceptor.NewClient(direct, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if winner == nil {
				var err error
				if winner, err = hubca.LoadOrCreate(ctx, env.Client, namespace, secret); err != nil {
					t.Fatalf("the winning replica: %v", err)
				}
			}
			return c.Create(ctx, obj, opts...)
		},
	})

	got, err := hubca.LoadOrCreate(ctx, loser, namespace, secret)
	if err != nil {
		t.Fatalf("the replica that lost the race: %v", err)
	}
	if winner == nil {
		t.Fatal("the race was not run: the losing replica never tried to create the Secret")
	}
	if !bytes.Equal(got.CertPEM, winner.CertPEM) {
		t.Error("the replica that lost the race uses another CA than the Secret's")
	}
}
