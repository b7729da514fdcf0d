package join

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/imperator-federation/imperator/internal/pki"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// newJoinService returns a Service over a fake hub cluster, with funcs
// intercepting its client, and the Tokens it consumes.
func newJoinService(t *testing.T, funcs interceptor.Funcs) (*Service, *Tokens) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), clusterv1.Install(scheme)); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(funcs).Build()
	ca, err := pki.NewCA("hub-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tokens := NewTokens(c, "hub", nil)
	return &Service{Tokens: tokens, CA: ca, Client: c}, tokens
}

func joinRequest(t *testing.T, cluster, token string) *federationv1.JoinRequest {
	t.Helper()
	csr, _, err := pki.NewCSR(cluster)
	if err != nil {
		t.Fatal(err)
	}
	return &federationv1.JoinRequest{ClusterName: cluster, Token: token, Csr: csr}
}

func createToken(t *testing.T, tokens *Tokens) string {
	t.Helper()
	token, _, err := tokens.Create(context.Background(), CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return token
}

func usedBy(t *testing.T, tokens *Tokens) map[string]string {
	t.Helper()
	list, err := tokens.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]string{}
	for _, info := range list {
		used[info.ID] = info.UsedBy
	}
	return used
}

func TestOnlyOneOfTwoJoinsForANewNameGetsItsIdentity(t *testing.T) {
	ctx := context.Background()
	// staleRead makes the registration check miss the first join's
	// ManagedCluster, as when two joins race.
	staleRead := false
	svc, tokens := newJoinService(t, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*clusterv1.ManagedCluster); ok && staleRead {
				return apierrors.NewNotFound(clusterv1.Resource("managedclusters"), key.Name)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	first, second := createToken(t, tokens), createToken(t, tokens)
	if _, err := svc.Join(ctx, joinRequest(t, "prod-a", first)); err != nil {
		t.Fatalf("first Join() = %v", err)
	}
	staleRead = true
	_, err := svc.Join(ctx, joinRequest(t, "prod-a", second))
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("second Join() racing for the same new name = %v, want PermissionDenied", err)
	}
	users := map[string]int{}
	for _, user := range usedBy(t, tokens) {
		users[user]++
	}
	if users["prod-a"] != 1 || users[""] != 1 {
		t.Errorf("token users = %v, want one used by prod-a and the loser's token given back", users)
	}
}

func TestAFailedRegistrationLeavesTheTokenUsable(t *testing.T) {
	ctx := context.Background()
	failing := true
	svc, tokens := newJoinService(t, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*clusterv1.ManagedCluster); ok && failing {
				return errors.New("etcdserver: request timed out")
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	token := createToken(t, tokens)
	_, err := svc.Join(ctx, joinRequest(t, "prod-a", token))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Join() while the hub cluster fails = %v, want Unavailable", err)
	}
	for id, user := range usedBy(t, tokens) {
		if user != "" {
			t.Fatalf("token %s is used by %q after a failed join, want it unused", id, user)
		}
	}
	failing = false
	if _, err := svc.Join(ctx, joinRequest(t, "prod-a", token)); err != nil {
		t.Fatalf("retried Join() with the same token = %v", err)
	}
}
