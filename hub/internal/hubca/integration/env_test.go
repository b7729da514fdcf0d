package integration

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/hub/internal/hubca"
	"github.com/imperator-federation/imperator/hub/internal/hubca/hubcatest"
	"github.com/imperator-federation/imperator/test/util/framework"
)

// startAPIServer starts a real API server with the hub CA's namespace (and
// opts' CRDs and scheme), stopped when the test ends.
func startAPIServer(t *testing.T, opts framework.Options) *framework.Environment {
	t.Helper()
	opts.Namespaces = append(opts.Namespaces, namespace)
	env, err := framework.Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	return env
}

// startReplica is a hub replica's Authority named replica, over the CA
// Secret as it is now, and the serving certificate rotator it presents.
func startReplica(ctx context.Context, t *testing.T, c client.Client, replica string) (*hubca.Authority, *hubca.ServingRotator) {
	t.Helper()
	trust, err := hubca.LoadTrust(ctx, c, namespace, secret)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := hubca.NewServingRotator(trust.Current, "imperator-hub", []string{hubcatest.HubName}, time.Hour, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	authority := hubca.NewAuthority(trust, hubca.AuthorityOptions{
		Client: c, Secret: types.NamespacedName{Namespace: namespace, Name: secret}, Replica: replica, Serving: serving, Log: logr.Discard(),
	})
	return authority, serving
}
