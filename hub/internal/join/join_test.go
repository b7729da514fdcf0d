package join

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	testingclock "k8s.io/utils/clock/testing"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/pki"
	"github.com/imperator-federation/imperator/internal/schemes"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// newJoinService returns a Service over a fake hub cluster, with funcs
// intercepting its client, and the Tokens it consumes.
func newJoinService(t *testing.T, funcs interceptor.Funcs) (*Service, *Tokens) {
	t.Helper()
	scheme, err := schemes.Hub()
	if err != nil {
		t.Fatal(err)
	}
	// The API server gives every object a UID; the fake client does not.
	create := funcs.Create
	funcs.Create = func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		obj.SetUID(uuid.NewUUID())
		if create != nil {
			return create(ctx, c, obj, opts...)
		}
		return c.Create(ctx, obj, opts...)
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

// issuedSpoke is the identity the hub reads from a certificate it issued.
func issuedSpoke(t *testing.T, certPEM []byte) identity.Spoke {
	t.Helper()
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	spoke, err := identity.SpokeFromCertificate(cert)
	if err != nil {
		t.Fatal(err)
	}
	return spoke
}

func currentUID(t *testing.T, c client.Client, cluster string) string {
	t.Helper()
	var mc clusterv1.ManagedCluster
	if err := c.Get(context.Background(), client.ObjectKey{Name: cluster}, &mc); err != nil {
		t.Fatal(err)
	}
	return string(mc.UID)
}

// registration is the part of a spoke identity that names its registration.
func registration(s identity.Spoke) identity.Spoke {
	return identity.Spoke{Cluster: s.Cluster, RegistrationUID: s.RegistrationUID}
}

// admission is the hub's decision at now on spoke, read from the fake hub
// cluster.
func admission(t *testing.T, c client.Client, spoke identity.Spoke, now time.Time) error {
	t.Helper()
	var mc clusterv1.ManagedCluster
	if err := c.Get(context.Background(), client.ObjectKey{Name: spoke.Cluster}, &mc); err != nil {
		if apierrors.IsNotFound(err) {
			return registry.Admission(nil, spoke, now)
		}
		t.Fatal(err)
	}
	return registry.Admission(&mc, spoke, now)
}

func refusalOf(err error) registry.RefusalReason {
	var refused *registry.RefusedError
	if errors.As(err, &refused) {
		return refused.Reason
	}
	return ""
}

func TestCertificatesAreBoundToTheRegistration(t *testing.T) {
	ctx := context.Background()
	svc, tokens := newJoinService(t, interceptor.Funcs{})
	clk := testingclock.NewFakeClock(time.Now())
	svc.Clock = clk
	svc.RenewalOverlap = time.Minute
	bound := func() string {
		t.Helper()
		token, _, err := tokens.Create(ctx, CreateOptions{ClusterName: "prod-a"})
		if err != nil {
			t.Fatal(err)
		}
		return token
	}

	first, err := svc.Join(ctx, joinRequest(t, "prod-a", createToken(t, tokens)))
	if err != nil {
		t.Fatalf("Join() = %v", err)
	}
	firstSpoke := issuedSpoke(t, first.GetCertificate())
	if want := (identity.Spoke{Cluster: "prod-a", RegistrationUID: currentUID(t, svc.Client, "prod-a")}); registration(firstSpoke) != want {
		t.Fatalf("certificate identifies %+v, want %+v", firstSpoke, want)
	}
	if err := admission(t, svc.Client, firstSpoke, clk.Now()); err != nil {
		t.Fatalf("Admission(joined certificate) = %v, want nil", err)
	}

	// A re-join of the registered cluster keeps its ManagedCluster but
	// retires every certificate issued before it.
	adopted, err := svc.Join(ctx, joinRequest(t, "prod-a", bound()))
	if err != nil {
		t.Fatalf("re-Join() of a registered cluster = %v", err)
	}
	adoptedSpoke := issuedSpoke(t, adopted.GetCertificate())
	if registration(adoptedSpoke) != registration(firstSpoke) {
		t.Errorf("re-joined certificate identifies %+v, want the same registration %+v", adoptedSpoke, firstSpoke)
	}
	if got := refusalOf(admission(t, svc.Client, firstSpoke, clk.Now())); got != registry.RefusedEarlierRegistration {
		t.Errorf("Admission(certificate from before the re-join) refusal = %q, want %q", got, registry.RefusedEarlierRegistration)
	}
	if err := admission(t, svc.Client, adoptedSpoke, clk.Now()); err != nil {
		t.Errorf("Admission(re-joined certificate) = %v, want nil", err)
	}

	// Renewing keeps the registration; the replaced certificate stays good
	// for the overlap, then is retired, and may not renew again meanwhile.
	csr, _, err := pki.NewCSR("prod-a")
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := svc.Renew(ctx, adoptedSpoke, &federationv1.RenewRequest{Csr: csr})
	if err != nil {
		t.Fatalf("Renew() = %v", err)
	}
	renewedSpoke := issuedSpoke(t, renewed.GetCertificate())
	if registration(renewedSpoke) != registration(firstSpoke) {
		t.Errorf("renewed certificate identifies %+v, want %+v", renewedSpoke, firstSpoke)
	}
	if err := admission(t, svc.Client, adoptedSpoke, clk.Now().Add(59*time.Second)); err != nil {
		t.Errorf("Admission(replaced certificate within the overlap) = %v, want nil", err)
	}
	if got := refusalOf(admission(t, svc.Client, adoptedSpoke, clk.Now().Add(time.Minute))); got != registry.RefusedReplacedCertificate {
		t.Errorf("Admission(replaced certificate at the end of the overlap) refusal = %q, want %q", got, registry.RefusedReplacedCertificate)
	}
	// The agent lost the answer and renews again with the replaced
	// certificate, within the overlap: it gets a certificate, the one it
	// lost is retired, and the overlap is not extended.
	clk.Step(30 * time.Second)
	lost := renewedSpoke
	retried, err := svc.Renew(ctx, adoptedSpoke, &federationv1.RenewRequest{Csr: csr})
	if err != nil {
		t.Fatalf("Renew() retried by the replaced certificate within the overlap = %v, want a certificate", err)
	}
	renewedSpoke = issuedSpoke(t, retried.GetCertificate())
	if got := refusalOf(admission(t, svc.Client, lost, clk.Now())); got != registry.RefusedReplacedCertificate {
		t.Errorf("Admission(certificate of the lost answer) refusal = %q, want %q", got, registry.RefusedReplacedCertificate)
	}
	clk.Step(30 * time.Second)
	if got := refusalOf(admission(t, svc.Client, adoptedSpoke, clk.Now())); got != registry.RefusedReplacedCertificate {
		t.Errorf("Admission(replaced certificate after the overlap) refusal = %q, want %q", got, registry.RefusedReplacedCertificate)
	}
	otherKey, _, err := pki.NewCSR("prod-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Renew(ctx, adoptedSpoke, &federationv1.RenewRequest{Csr: otherKey}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Renew() by the replaced certificate after the overlap, for a new key = %v, want PermissionDenied", err)
	}
	if err := admission(t, svc.Client, renewedSpoke, clk.Now().Add(time.Hour)); err != nil {
		t.Errorf("Admission(renewed certificate) = %v, want nil", err)
	}

	// The agent stored the key of its renewed certificate before it asked
	// for it, then lost the certificate (restarted before storing it) and
	// came back after the overlap: a retired certificate of the
	// registration renewing for the current certificate's key gets a
	// certificate, and the lost one is replaced, good for the overlap.
	clk.Step(time.Hour)
	recovered, err := svc.Renew(ctx, adoptedSpoke, &federationv1.RenewRequest{Csr: csr})
	if err != nil {
		t.Fatalf("Renew() by a retired certificate for the current certificate's key = %v, want a certificate", err)
	}
	recoveredSpoke := issuedSpoke(t, recovered.GetCertificate())
	if err := admission(t, svc.Client, recoveredSpoke, clk.Now()); err != nil {
		t.Errorf("Admission(recovered certificate) = %v, want nil", err)
	}
	if err := admission(t, svc.Client, renewedSpoke, clk.Now()); err != nil {
		t.Errorf("Admission(certificate it replaced, within the overlap) = %v, want nil", err)
	}
	if got := refusalOf(admission(t, svc.Client, adoptedSpoke, clk.Now())); got != registry.RefusedReplacedCertificate {
		t.Errorf("Admission(retired certificate that asked) refusal = %q, want %q: it renews, it is not good again", got, registry.RefusedReplacedCertificate)
	}
	renewedSpoke = recoveredSpoke

	// Deregistered, then joined again: a new registration, and the hub no
	// longer admits the certificates of the first one.
	if err := svc.Client.Delete(ctx, &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: "prod-a"}}); err != nil {
		t.Fatal(err)
	}
	again, err := svc.Join(ctx, joinRequest(t, "prod-a", createToken(t, tokens)))
	if err != nil {
		t.Fatalf("Join() after deregistration = %v", err)
	}
	againSpoke := issuedSpoke(t, again.GetCertificate())
	if againSpoke.RegistrationUID == firstSpoke.RegistrationUID || againSpoke.RegistrationUID != currentUID(t, svc.Client, "prod-a") {
		t.Errorf("certificate after re-registration identifies %+v, want the new ManagedCluster's UID %s", againSpoke, currentUID(t, svc.Client, "prod-a"))
	}
	if err := registry.Admit(ctx, svc.Client, nil, againSpoke); err != nil {
		t.Errorf("Admit(new certificate) = %v, want nil", err)
	}
	if err := registry.Admit(ctx, svc.Client, nil, renewedSpoke); refusalOf(err) != registry.RefusedEarlierRegistration {
		t.Errorf("Admit(certificate of the first registration) = %v, want %s", err, registry.RefusedEarlierRegistration)
	}
}

func TestJoinRetriedWithTheSameKeyIsAnsweredAgain(t *testing.T) {
	ctx := context.Background()
	svc, tokens := newJoinService(t, interceptor.Funcs{})
	clk := testingclock.NewFakeClock(time.Now())
	tokens.clock = clk
	token := createToken(t, tokens)
	req := joinRequest(t, "prod-a", token)

	first, err := svc.Join(ctx, req)
	if err != nil {
		t.Fatalf("Join() = %v", err)
	}
	// The response was lost: the agent retries with the same key.
	clk.Step(JoinRetryWindow - time.Second)
	retried, err := svc.Join(ctx, req)
	if err != nil {
		t.Fatalf("retried Join() with the same token and key = %v, want a certificate", err)
	}
	if registration(issuedSpoke(t, retried.GetCertificate())) != registration(issuedSpoke(t, first.GetCertificate())) {
		t.Errorf("retried Join() issued for another registration")
	}
	if err := admission(t, svc.Client, issuedSpoke(t, retried.GetCertificate()), time.Now()); err != nil {
		t.Errorf("Admission(certificate of the retried join) = %v, want nil", err)
	}

	// Another key with the used token: refused.
	if _, err := svc.Join(ctx, joinRequest(t, "prod-a", token)); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Join() with the used token and another key = %v, want Unauthenticated (token already used)", err)
	}
	// The same key after the window: refused.
	clk.Step(2 * time.Second)
	if _, err := svc.Join(ctx, req); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Join() with the same key after the retry window = %v, want Unauthenticated (token already used)", err)
	}
}

func TestJoinRefusesReservedNamesAndMalformedTokensWithoutReadingTheAPI(t *testing.T) {
	cases := map[string]struct {
		cluster, token string
		wantCode       codes.Code
	}{
		"kube-system":               {cluster: "kube-system", wantCode: codes.InvalidArgument},
		"kube- prefix":              {cluster: "kube-node-lease", wantCode: codes.InvalidArgument},
		"default":                   {cluster: "default", wantCode: codes.InvalidArgument},
		"open-cluster-management":   {cluster: "open-cluster-management-agent", wantCode: codes.InvalidArgument},
		"the hub's own namespace":   {cluster: "hub", wantCode: codes.InvalidArgument},
		"malformed token":           {cluster: "prod-a", token: "not-a-token", wantCode: codes.Unauthenticated},
		"token of the wrong shape":  {cluster: "prod-a", token: "ABCDEF.0123456789abcdef", wantCode: codes.Unauthenticated},
		"oversized token":           {cluster: "prod-a", token: strings.Repeat("a", 1<<16), wantCode: codes.Unauthenticated},
		"name that is no DNS label": {cluster: "Prod_A", wantCode: codes.InvalidArgument},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var reads int
			svc, tokens := newJoinService(t, interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					reads++
					return c.Get(ctx, key, obj, opts...)
				},
			})
			svc.HubNamespace = "hub"
			token := tc.token
			if token == "" {
				token = createToken(t, tokens)
			}
			_, err := svc.Join(context.Background(), joinRequest(t, tc.cluster, token))
			if got := status.Code(err); got != tc.wantCode {
				t.Errorf("Join() = %v, want %v", err, tc.wantCode)
			}
			if reads != 0 {
				t.Errorf("Join() read the hub cluster's API %d times, want none", reads)
			}
		})
	}
}

func TestRenewRefusesACertificateWithoutRegistration(t *testing.T) {
	svc, _ := newJoinService(t, interceptor.Funcs{})
	csr, _, err := pki.NewCSR("prod-a")
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.Renew(context.Background(), identity.Spoke{Cluster: "prod-a"}, &federationv1.RenewRequest{Csr: csr})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("Renew() without registration = %v, want PermissionDenied", err)
	}
}

func TestABadCSRDoesNotBurnTheToken(t *testing.T) {
	svc, tokens := newJoinService(t, interceptor.Funcs{})
	token := createToken(t, tokens)
	req := joinRequest(t, "prod-a", token)
	req.Csr = []byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n")
	if _, err := svc.Join(context.Background(), req); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Join() with a bad CSR = %v, want InvalidArgument", err)
	}
	for id, user := range usedBy(t, tokens) {
		if user != "" {
			t.Errorf("token %s is used by %q after a refused CSR, want it unused", id, user)
		}
	}
	if exists, err := registry.Exists(context.Background(), svc.Client, "prod-a"); err != nil || exists {
		t.Errorf("cluster registered after a refused CSR: %t, %v", exists, err)
	}
}

func TestAJoinWhoseRecordFailedIsAnsweredOnTheRetryWithTheSameKey(t *testing.T) {
	ctx := context.Background()
	failures := 1
	svc, tokens := newJoinService(t, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*clusterv1.ManagedCluster); ok && failures > 0 {
				failures--
				return apierrors.NewServiceUnavailable("hub API hiccup")
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	req := joinRequest(t, "prod-a", createToken(t, tokens))
	if _, err := svc.Join(ctx, req); status.Code(err) != codes.Unavailable {
		t.Fatalf("Join() whose record write failed = %v, want Unavailable", err)
	}
	resp, err := svc.Join(ctx, req)
	if err != nil {
		t.Fatalf("retried Join() with the same key = %v, want a certificate", err)
	}
	if err := admission(t, svc.Client, issuedSpoke(t, resp.GetCertificate()), time.Now()); err != nil {
		t.Errorf("Admission(certificate of the retried join) = %v, want nil", err)
	}
}

// A deregistered cluster registered again (by a new token) cannot be taken
// over by the holder of the old token retrying its join within the window.
func TestAJoinRetryIsNotAnsweredForALaterRegistration(t *testing.T) {
	ctx := context.Background()
	svc, tokens := newJoinService(t, interceptor.Funcs{})
	oldReq := joinRequest(t, "prod-a", createToken(t, tokens))
	if _, err := svc.Join(ctx, oldReq); err != nil {
		t.Fatalf("Join() = %v", err)
	}
	if err := svc.Client.Delete(ctx, &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: "prod-a"}}); err != nil {
		t.Fatal(err)
	}
	rebuilt, err := svc.Join(ctx, joinRequest(t, "prod-a", createToken(t, tokens)))
	if err != nil {
		t.Fatalf("Join() of the rebuilt cluster = %v", err)
	}

	_, err = svc.Join(ctx, oldReq)
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("retry of the first join after the cluster was registered again = %v, want PermissionDenied", err)
	}
	if err := admission(t, svc.Client, issuedSpoke(t, rebuilt.GetCertificate()), time.Now()); err != nil {
		t.Errorf("Admission(certificate of the rebuilt cluster) after the old token's retry = %v, want nil", err)
	}
}

// A join that could not record its registration in the token leaves the
// token used, and its retry is refused rather than answered for whatever
// registration the name has by then.
func TestAJoinRetryIsRefusedWhenTheFirstJoinRecordedNoRegistration(t *testing.T) {
	ctx := context.Background()
	failures := 1
	svc, tokens := newJoinService(t, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if s, ok := obj.(*corev1.Secret); ok && len(s.Data[keyUsedRegistration]) > 0 && failures > 0 {
				failures--
				return apierrors.NewServiceUnavailable("hub API hiccup")
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	req := joinRequest(t, "prod-a", createToken(t, tokens))
	if _, err := svc.Join(ctx, req); status.Code(err) != codes.Unavailable {
		t.Fatalf("Join() whose token binding failed = %v, want Unavailable", err)
	}
	_, err := svc.Join(ctx, req)
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), "new token") {
		t.Errorf("retried Join() = %v, want PermissionDenied asking for a new token", err)
	}
}

func TestRenewInALoopIsLimitedPerCluster(t *testing.T) {
	ctx := context.Background()
	svc, tokens := newJoinService(t, interceptor.Funcs{})
	clk := testingclock.NewFakeClock(time.Now())
	svc.Clock = clk
	svc.RenewalOverlap = time.Hour
	joinedSpoke := func(cluster string) identity.Spoke {
		t.Helper()
		resp, err := svc.Join(ctx, joinRequest(t, cluster, createToken(t, tokens)))
		if err != nil {
			t.Fatalf("Join(%s) = %v", cluster, err)
		}
		return issuedSpoke(t, resp.GetCertificate())
	}
	renew := func(spoke identity.Spoke) (identity.Spoke, error) {
		t.Helper()
		csr, _, err := pki.NewCSR(spoke.Cluster)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := svc.Renew(ctx, spoke, &federationv1.RenewRequest{Csr: csr})
		if err != nil {
			return identity.Spoke{}, err
		}
		return issuedSpoke(t, resp.GetCertificate()), nil
	}
	a, b := joinedSpoke("prod-a"), joinedSpoke("prod-b")
	current := a
	for i := range RenewBurstPerCluster {
		renewed, err := renew(current)
		if err != nil {
			t.Fatalf("renewal %d of the burst = %v", i+1, err)
		}
		current = renewed
	}
	_, err := renew(current)
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("renewal beyond the burst = %v, want ResourceExhausted", err)
	}
	if err := admission(t, svc.Client, current, clk.Now()); err != nil {
		t.Errorf("Admission(current certificate after a refused renewal) = %v, want nil: nothing was retired", err)
	}
	if _, err := renew(b); err != nil {
		t.Errorf("another cluster's renewal = %v, want a certificate", err)
	}
	clk.Step(RenewIntervalPerCluster)
	if _, err := renew(current); err != nil {
		t.Errorf("renewal after %s = %v, want a certificate", RenewIntervalPerCluster, err)
	}
}

func TestJoinAndRenewTellTheReplicasAdmissionWhichRecordTheyWrote(t *testing.T) {
	ctx := context.Background()
	svc, tokens := newJoinService(t, interceptor.Funcs{})
	type write struct{ cluster, resourceVersion string }
	var told []write
	svc.RecordWritten = func(cluster, resourceVersion string) { told = append(told, write{cluster, resourceVersion}) }
	// wantTold checks that the last call told the ManagedCluster's
	// resourceVersion as the call left it.
	wantTold := func(call string) {
		t.Helper()
		var mc clusterv1.ManagedCluster
		if err := svc.Client.Get(ctx, client.ObjectKey{Name: "prod-a"}, &mc); err != nil {
			t.Fatal(err)
		}
		if len(told) == 0 || told[len(told)-1] != (write{"prod-a", mc.ResourceVersion}) {
			t.Errorf("after %s the admission was told %v, want last {prod-a %s}: a certificate it retired would be admitted from a stale cache", call, told, mc.ResourceVersion)
		}
	}

	joined, err := svc.Join(ctx, joinRequest(t, "prod-a", createToken(t, tokens)))
	if err != nil {
		t.Fatalf("Join() = %v", err)
	}
	wantTold("Join")
	csr, _, err := pki.NewCSR("prod-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Renew(ctx, issuedSpoke(t, joined.GetCertificate()), &federationv1.RenewRequest{Csr: csr}); err != nil {
		t.Fatalf("Renew() = %v", err)
	}
	wantTold("Renew")
	if len(told) != 2 {
		t.Errorf("a Join and a Renew told %d writes, want 2", len(told))
	}
}
