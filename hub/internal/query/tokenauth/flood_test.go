package tokenauth

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/hub/internal/query"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
	"github.com/imperator-federation/imperator/test/util/framework"
)

// countTokenReviews counts the TokenReviews that reach the API server.
type countTokenReviews struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (c countTokenReviews) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.URL.Path, "/tokenreviews") {
		c.n.Add(1)
	}
	return c.next.RoundTrip(req)
}

// callFrom is a call carrying token from the address ip, as the hub's
// anonymous server hands it to the authorizer.
func callFrom(ip, token string) context.Context {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}})
	return metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+token))
}

// Anyone may send a new random token with each call on the anonymous port:
// the hub must not turn each into a TokenReview of the hub cluster's API
// (whose fairness share its own writes and leases use), and a flood of
// refused tokens must not evict the people it knows.
func TestUnknownTokensDoNotFloodTheHubCluster(t *testing.T) {
	opts, err := hubtest.ClusterOptions()
	if err != nil {
		t.Fatal(err)
	}
	opts.Namespaces = append(opts.Namespaces, identities)
	env, err := framework.Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	var reviews atomic.Int64
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS = -1 // as the hub runs: no client-side limit
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countTokenReviews{next: rt, n: &reviews} })
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := kube.CoreV1().ServiceAccounts(identities).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "person"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := kube.CoreV1().ServiceAccounts(identities).CreateToken(ctx, "person", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	person := tr.Status.Token

	const (
		size        = 4
		burst       = 10
		sourceBurst = 3
	)
	clock := clocktesting.NewFakeClock(time.Now())
	auth, err := query.NewTokenAuthorizer(kube, query.TokenAuthOptions{
		TTL: time.Minute, Size: size, Clock: clock,
		ReviewRate: 0.01, ReviewBurst: burst, SourceReviewRate: 0.01, SourceReviewBurst: sourceBurst,
	})
	if err != nil {
		t.Fatal(err)
	}
	authenticated := func(err error) bool {
		c := status.Code(err)
		return c == codes.OK || c == codes.PermissionDenied
	}
	method := queryv1.Query_ListClusters_FullMethodName
	if _, err := auth.Authorize(callFrom("10.0.0.1", person), method); !authenticated(err) {
		t.Fatalf("the person's token: %v, want it authenticated", err)
	}
	if got := reviews.Load(); got != 1 {
		t.Fatalf("%d TokenReviews for one token, want 1", got)
	}

	// One source, 100 random tokens: its burst is reviewed, the rest
	// refused before the API server is asked.
	exhausted := 0
	for i := range 100 {
		_, err := auth.Authorize(callFrom("192.0.2.7", fmt.Sprintf("random-%d", i)), method)
		switch status.Code(err) {
		case codes.Unauthenticated:
		case codes.ResourceExhausted:
			exhausted++
		default:
			t.Fatalf("random token %d: %v, want Unauthenticated or ResourceExhausted", i, err)
		}
	}
	if got := reviews.Load() - 1; got > sourceBurst+1 {
		t.Errorf("one source's 100 random tokens made %d TokenReviews, want at most %d", got, sourceBurst+1)
	}
	if exhausted < 100-sourceBurst-1 {
		t.Errorf("%d of 100 random tokens of one source refused as ResourceExhausted, want at least %d", exhausted, 100-sourceBurst-1)
	}

	// Many sources, one random token each: the hub's burst in all.
	before := reviews.Load()
	for i := range 100 {
		_, err := auth.Authorize(callFrom(fmt.Sprintf("198.51.100.%d", i+1), fmt.Sprintf("spread-%d", i)), method)
		if c := status.Code(err); c != codes.Unauthenticated && c != codes.ResourceExhausted {
			t.Fatalf("spread token %d: %v, want Unauthenticated or ResourceExhausted", i, err)
		}
	}
	if got := reviews.Load() - before; got > burst+1 {
		t.Errorf("100 sources' random tokens made %d TokenReviews, want at most %d", got, burst+1)
	}

	// More refused tokens than the cache holds: the person is still known,
	// without a review, from the source the flood came from too.
	before = reviews.Load()
	if _, err := auth.Authorize(callFrom("192.0.2.7", person), method); !authenticated(err) {
		t.Fatalf("the person's token after the flood: %v, want it authenticated", err)
	}
	if got := reviews.Load() - before; got != 0 {
		t.Errorf("the person's token after the flood made %d TokenReviews, want 0 (evicted by refused tokens)", got)
	}

	// Past the TTL the person's token is reviewed again, from a source
	// that sent nothing yet, while the flood has taken the hub's rate: a
	// token the API server accepted before is not locked out, a new one is.
	clock.Step(2 * time.Minute)
	before = reviews.Load()
	if _, err := auth.Authorize(callFrom("203.0.113.9", person), method); !authenticated(err) {
		t.Fatalf("the person's token past the TTL, the hub's review rate taken: %v, want it authenticated", err)
	}
	if got := reviews.Load() - before; got != 1 {
		t.Errorf("the person's token past the TTL made %d TokenReviews, want 1", got)
	}
	if _, err := auth.Authorize(callFrom("203.0.113.9", "random-new"), method); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a new token with the hub's review rate taken: %v, want ResourceExhausted", err)
	}
}
