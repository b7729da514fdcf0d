// Package tokenauth runs the hub's query API with Kubernetes identities of
// the hub cluster on a real harness API server: ServiceAccount tokens bound
// to the shipped ClusterRoles (deploy/hub/rbac/access_roles.yaml), refused
// tokens, and revocation within the decision cache's TTL.
package tokenauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/hub/internal/config"
	"github.com/imperator-federation/imperator/hub/internal/hubca"
	"github.com/imperator-federation/imperator/hub/internal/query"
	"github.com/imperator-federation/imperator/internal/cli"
	"github.com/imperator-federation/imperator/internal/pki"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
	"github.com/imperator-federation/imperator/test/util/framework"
	"github.com/imperator-federation/imperator/test/util/repo"
)

const (
	// identities is the namespace of the test's ServiceAccounts.
	identities = "people"
	teamA      = "team-a"
	teamB      = "team-b"
	issuer     = "https://kubernetes.default.svc.cluster.local"
)

// call is one Query method, called with a request that passes validation.
type call func(ctx context.Context, c queryv1.QueryClient) error

var methods = map[string]call{
	"ListClusters": func(ctx context.Context, c queryv1.QueryClient) error {
		_, err := c.ListClusters(ctx, &queryv1.ListClustersRequest{})
		return err
	},
	"ListMachines": func(ctx context.Context, c queryv1.QueryClient) error {
		_, err := c.ListMachines(ctx, &queryv1.ListMachinesRequest{})
		return err
	},
	"GetUsage": func(ctx context.Context, c queryv1.QueryClient) error {
		_, err := c.GetUsage(ctx, &queryv1.GetUsageRequest{})
		return err
	},
	"FindCapacity": func(ctx context.Context, c queryv1.QueryClient) error {
		_, err := c.FindCapacity(ctx, &queryv1.FindCapacityRequest{Target: &queryv1.FindCapacityRequest_MachineType{MachineType: &queryv1.MachineTypeRef{Type: "compute-xlarge"}}, Count: 1})
		return err
	},
	"Watch": func(ctx context.Context, c queryv1.QueryClient) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		stream, err := c.Watch(ctx, &queryv1.WatchRequest{})
		if err != nil {
			return err
		}
		_, err = stream.Recv()
		return err
	},
	"GetVersion": func(ctx context.Context, c queryv1.QueryClient) error {
		_, err := c.GetVersion(ctx, &queryv1.GetVersionRequest{})
		return err
	},
	"GetHold": func(ctx context.Context, c queryv1.QueryClient) error {
		_, err := c.GetHold(ctx, &queryv1.GetHoldRequest{Name: "no-such-hold"})
		return err
	},
	"ListHolds": func(ctx context.Context, c queryv1.QueryClient) error {
		_, err := c.ListHolds(ctx, &queryv1.ListHoldsRequest{})
		return err
	},
	"CreateHold in team-a":  createHold(teamA),
	"CreateHold in team-b":  createHold(teamB),
	"CreateHold fleet-wide": createHold(),
	"ReleaseHold": func(ctx context.Context, c queryv1.QueryClient) error {
		_, err := c.ReleaseHold(ctx, &queryv1.ReleaseHoldRequest{Name: "no-such-hold"})
		return err
	},
	"CreateToken": func(ctx context.Context, c queryv1.QueryClient) error {
		_, err := c.CreateToken(ctx, &queryv1.CreateTokenRequest{ClusterName: "spoke-z", Ttl: durationpb.New(time.Hour)})
		return err
	},
	"ListTokens": func(ctx context.Context, c queryv1.QueryClient) error {
		_, err := c.ListTokens(ctx, &queryv1.ListTokensRequest{})
		return err
	},
	"RevokeToken": func(ctx context.Context, c queryv1.QueryClient) error {
		_, err := c.RevokeToken(ctx, &queryv1.RevokeTokenRequest{Id: "abcdef"})
		return err
	},
}

func createHold(namespaces ...string) call {
	return func(ctx context.Context, c queryv1.QueryClient) error {
		_, err := c.CreateHold(ctx, &queryv1.CreateHoldRequest{
			Name:       "hold-" + strings.Join(append([]string{"fleet"}, namespaces...), "-"),
			Target:     &queryv1.CreateHoldRequest_MachineType{MachineType: &queryv1.MachineTypeRef{Type: "compute-xlarge"}},
			Count:      1,
			Ttl:        durationpb.New(time.Hour),
			Namespaces: namespaces,
		})
		return err
	}
}

// authorized reports whether a call got past authentication and
// authorization: its answer may still be NotFound or FailedPrecondition (the
// fleet is empty), never a refusal of the caller.
func authorized(err error) bool {
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied, codes.Unavailable, codes.Unimplemented:
		return false
	}
	return true
}

type fixture struct {
	// config reaches the hub cluster as its admin.
	config *rest.Config
	kube   kubernetes.Interface
	hub    *hubtest.Hub
	ca     *pki.CA
	caPEM  []byte
	saKey  *ecdsa.PrivateKey
}

func setUp(t testing.TB) *fixture {
	t.Helper()
	ctx := context.Background()
	opts, err := hubtest.ClusterOptions()
	if err != nil {
		t.Fatal(err)
	}
	opts.Harness = true
	opts.Name = "hub-tokenauth"
	opts.Namespaces = append(opts.Namespaces, identities, teamA, teamB)
	env, err := framework.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	namespace := framework.AgentNamespace
	ca, err := hubca.LoadOrCreate(ctx, env.Client, namespace, config.Default().CASecret)
	if err != nil {
		t.Fatal(err)
	}
	hub, err := hubtest.Start(env.Config, hubtest.Options{Namespace: namespace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := hub.Stop(); err != nil {
			t.Error(err)
		}
	})
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(env.Cluster.Dir, "sa.key"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		t.Fatal("sa.key: no PEM block")
	}
	saKey, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	installShippedRoles(t, kube)
	return &fixture{config: env.Config, kube: kube, hub: hub, ca: ca, caPEM: ca.CertPEM, saKey: saKey}
}

// installShippedRoles creates the ClusterRoles the hub ships, as kustomize
// and the chart install them.
func installShippedRoles(t testing.TB, kube kubernetes.Interface) {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy", "hub", "rbac", "access_roles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	created := 0
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var role rbacv1.ClusterRole
		if err := yaml.UnmarshalStrict([]byte(doc), &role); err != nil {
			t.Fatalf("access_roles.yaml: %v", err)
		}
		if role.Name == "" {
			continue
		}
		if _, err := kube.RbacV1().ClusterRoles().Create(context.Background(), &role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		created++
	}
	if created != 3 {
		t.Fatalf("access_roles.yaml holds %d ClusterRoles, want viewer, holder and admin", created)
	}
}

// serviceAccount creates a ServiceAccount with bindings (ClusterRole name in
// namespace, "" for a ClusterRoleBinding) and returns a token of it.
func (f *fixture) serviceAccount(t testing.TB, name string, bindings map[string]string) (token string, sa *corev1.ServiceAccount) {
	t.Helper()
	ctx := context.Background()
	sa, err := f.kube.CoreV1().ServiceAccounts(identities).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: identities}}
	for role, namespace := range bindings {
		ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}
		meta := metav1.ObjectMeta{Name: name + "-" + role}
		if namespace == "" {
			_, err = f.kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: meta, RoleRef: ref, Subjects: subject}, metav1.CreateOptions{})
		} else {
			_, err = f.kube.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: meta, RoleRef: ref, Subjects: subject}, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	expiry := int64(3600)
	tr, err := f.kube.CoreV1().ServiceAccounts(identities).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token, sa
}

// bearer sends a token with every call.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return true }

// dial connects to the hub with a token and no client certificate.
func (f *fixture) dial(t testing.TB, token string) queryv1.QueryClient {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(f.caPEM)
	conn, err := grpc.NewClient(f.hub.Address(),
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})),
		grpc.WithPerRPCCredentials(bearer(token)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return queryv1.NewQueryClient(conn)
}

// jwt signs claims with key as the API server signs ServiceAccount tokens
// (ES256).
func jwt(t *testing.T, key *ecdsa.PrivateKey, claims map[string]any) string {
	t.Helper()
	enc := func(v any) string {
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(raw)
	}
	signed := enc(map[string]string{"alg": "ES256", "typ": "JWT"}) + "." + enc(claims)
	digest := sha256.Sum256([]byte(signed))
	r, s, err := ecdsa.Sign(rand.Reader, key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func saClaims(sa *corev1.ServiceAccount, expires time.Time) map[string]any {
	now := time.Now()
	return map[string]any{
		"iss": issuer, "aud": []string{issuer},
		"sub": "system:serviceaccount:" + sa.Namespace + ":" + sa.Name,
		"iat": now.Add(-2 * time.Hour).Unix(), "nbf": now.Add(-2 * time.Hour).Unix(), "exp": expires.Unix(),
		"kubernetes.io": map[string]any{"namespace": sa.Namespace, "serviceaccount": map[string]string{"name": sa.Name, "uid": string(sa.UID)}},
	}
}

func TestKubernetesIdentitiesOnTheQueryAPI(t *testing.T) {
	f := setUp(t)
	ctx := context.Background()

	viewerToken, _ := f.serviceAccount(t, "viewer", map[string]string{"imperator-fleet-viewer": ""})
	holderToken, holderSA := f.serviceAccount(t, "holder", map[string]string{"imperator-fleet-viewer": "", "imperator-fleet-holder": teamA})
	adminToken, _ := f.serviceAccount(t, "admin", map[string]string{"imperator-fleet-admin": ""})
	nobodyToken, _ := f.serviceAccount(t, "nobody", nil)

	reads := []string{"ListClusters", "ListMachines", "GetUsage", "FindCapacity", "Watch", "GetVersion", "GetHold", "ListHolds"}
	allowedTo := map[string][]string{
		"viewer": reads,
		"holder": append([]string{"CreateHold in team-a"}, reads...),
		"admin":  append([]string{"CreateHold in team-a", "CreateHold in team-b", "CreateHold fleet-wide", "ReleaseHold", "CreateToken", "ListTokens", "RevokeToken"}, reads...),
		"nobody": nil,
	}
	tokens := map[string]string{"viewer": viewerToken, "holder": holderToken, "admin": adminToken, "nobody": nobodyToken}
	for role, token := range tokens {
		client := f.dial(t, token)
		for method, do := range methods {
			t.Run(role+"/"+method, func(t *testing.T) {
				want := false
				for _, m := range allowedTo[role] {
					want = want || m == method
				}
				err := do(ctx, client)
				if got := authorized(err); got != want {
					t.Errorf("%s %s: %v, want authorized %v", role, method, err, want)
				}
				if !want && status.Code(err) != codes.PermissionDenied {
					t.Errorf("%s %s: %v, want PermissionDenied", role, method, err)
				}
			})
		}
	}

	t.Run("refused tokens are Unauthenticated", func(t *testing.T) {
		foreignKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		cases := map[string]struct {
			token    string
			wantCode codes.Code
		}{
			// The control: the hand-made token is one the API server
			// takes, so the refusals below are for expiry and signer.
			"valid hand-made token":     {token: jwt(t, f.saKey, saClaims(holderSA, time.Now().Add(time.Hour))), wantCode: codes.OK},
			"expired":                   {token: jwt(t, f.saKey, saClaims(holderSA, time.Now().Add(-time.Minute))), wantCode: codes.Unauthenticated},
			"signed by another cluster": {token: jwt(t, foreignKey, saClaims(holderSA, time.Now().Add(time.Hour))), wantCode: codes.Unauthenticated},
			"not a token":               {token: "hello", wantCode: codes.Unauthenticated},
			"beyond the size limit":     {token: strings.Repeat("a", 7<<10+512), wantCode: codes.Unauthenticated},
		}
		for name, tc := range cases {
			t.Run(name, func(t *testing.T) {
				_, err := f.dial(t, tc.token).ListClusters(ctx, &queryv1.ListClustersRequest{})
				if status.Code(err) != tc.wantCode {
					t.Errorf("ListClusters: %v, want %s", err, tc.wantCode)
				}
			})
		}
	})

	t.Run("a token opens the query API only", func(t *testing.T) {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(f.caPEM)
		conn, err := grpc.NewClient(f.hub.Address(),
			grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})),
			grpc.WithPerRPCCredentials(bearer(adminToken)))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		if _, err := federationv1.NewFederationClient(conn).Renew(ctx, &federationv1.RenewRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("Renew with an admin's token: %v, want Unauthenticated (spokes' calls need a spoke certificate)", err)
		}
		stream, err := federationv1.NewFederationClient(conn).Report(ctx)
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("Report with an admin's token: %v, want Unauthenticated", err)
		}
	})

	t.Run("no token and no certificate", func(t *testing.T) {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(f.caPEM)
		conn, err := grpc.NewClient(f.hub.Address(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		if _, err := queryv1.NewQueryClient(conn).ListClusters(ctx, &queryv1.ListClustersRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("ListClusters: %v, want Unauthenticated", err)
		}
	})

	t.Run("imperatorctl through a kubeconfig", func(t *testing.T) {
		dir := t.TempDir()
		caFile := filepath.Join(dir, "hub-ca.crt")
		write := func(name, content string) string {
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			return path
		}
		write("hub-ca.crt", string(f.caPEM))
		// The viewer's token comes from an exec plugin, as OIDC and cloud
		// IAM plugins hand theirs to kubectl; the holder's is static.
		credential := write("credential.json", `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"`+viewerToken+`"}}`)
		kubeconfig := write("kubeconfig", fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: hub
  cluster:
    server: https://127.0.0.1:1
contexts:
- name: viewer
  context: {cluster: hub, user: viewer}
- name: holder
  context: {cluster: hub, user: holder}
current-context: viewer
users:
- name: viewer
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: /bin/cat
      args: [%q]
      interactiveMode: Never
- name: holder
  user:
    token: %s
`, credential, holderToken))
		env := cli.Env{Stdout: io.Discard, Getenv: func(string) string { return "" }}
		cases := map[string]struct {
			args     []string
			wantCode int
		}{
			"viewer lists clusters":          {args: []string{"clusters"}, wantCode: cli.ExitOK},
			"viewer reads usage":             {args: []string{"usage"}, wantCode: cli.ExitOK},
			"viewer may not list tokens":     {args: []string{"token", "list"}, wantCode: cli.ExitDenied},
			"holder may not book for team-b": {args: []string{"hold", "create", "h1", "compute-xlarge", "--count", "1", "--ttl", "1h", "--namespace", teamB, "--kube-context", "holder"}, wantCode: cli.ExitDenied},
			"holder books for team-a":        {args: []string{"hold", "create", "h1", "compute-xlarge", "--count", "1", "--ttl", "1h", "--namespace", teamA, "--kube-context", "holder"}, wantCode: cli.ExitFailure},
			"a kube-context not in the file": {args: []string{"clusters", "--kube-context", "nobody"}, wantCode: cli.ExitUsage},
			"a kubeconfig and a certificate": {args: []string{"clusters", "--cert", caFile, "--key", caFile}, wantCode: cli.ExitUsage},
		}
		for name, tc := range cases {
			t.Run(name, func(t *testing.T) {
				var stderr strings.Builder
				env := env
				env.Stderr = &stderr
				args := append(append([]string{}, tc.args...), "--hub", f.hub.Address(), "--server-name", "127.0.0.1", "--ca", caFile, "--kubeconfig", kubeconfig)
				if code := cli.Run(ctx, args, env); code != tc.wantCode {
					t.Errorf("imperatorctl %s: exit %d, want %d: %s", strings.Join(tc.args, " "), code, tc.wantCode, stderr.String())
				}
			})
		}
	})

	// The caller is not authenticated when the TokenReview fails: what the
	// API server said (its address, the hub's identity, the missing right)
	// stays in the hub's log. Here the hub's client has no right to create
	// TokenReviews (a ServiceAccount without bindings), and then none to
	// reach the API server at all (a closed port).
	t.Run("API server errors do not reach unauthenticated callers", func(t *testing.T) {
		noRights := rest.AnonymousClientConfig(f.config)
		noRights.BearerToken = nobodyToken
		closed := rest.CopyConfig(noRights)
		closed.Host = "https://127.0.0.1:1"
		for name, cfg := range map[string]*rest.Config{"forbidden": noRights, "unreachable": closed} {
			t.Run(name, func(t *testing.T) {
				kube, err := kubernetes.NewForConfig(cfg)
				if err != nil {
					t.Fatal(err)
				}
				auth, err := query.NewTokenAuthorizer(kube, query.TokenAuthOptions{})
				if err != nil {
					t.Fatal(err)
				}
				callCtx := metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+viewerToken))
				_, err = auth.Authorize(callCtx, queryv1.Query_ListClusters_FullMethodName)
				if status.Code(err) != codes.Unavailable {
					t.Fatalf("Authorize: %v, want Unavailable", err)
				}
				msg := status.Convert(err).Message()
				for _, leak := range []string{"forbidden", "tokenreviews", "system:serviceaccount", "127.0.0.1", "dial", "refused"} {
					if strings.Contains(strings.ToLower(msg), leak) {
						t.Errorf("Authorize: %q tells an unauthenticated caller %q of the API server's answer", msg, leak)
					}
				}
				if !strings.Contains(msg, "retry later") {
					t.Errorf("Authorize: %q, want it to say the caller may retry", msg)
				}
			})
		}
	})

	// CreateHold asks one SubjectAccessReview per namespace it names, any
	// namespace: an identity naming a new one at each call has the hub ask
	// the API server a bounded number a second, not one per call.
	t.Run("new decisions of one identity are rate limited", func(t *testing.T) {
		viewer := f.dial(t, viewerToken)
		const calls = 200
		exhausted := 0
		start := time.Now()
		for i := range calls {
			err := createHold(fmt.Sprintf("random-%d", i))(ctx, viewer)
			switch status.Code(err) {
			case codes.PermissionDenied:
			case codes.ResourceExhausted:
				exhausted++
			default:
				t.Fatalf("CreateHold in a new namespace by a viewer: %v, want PermissionDenied or ResourceExhausted", err)
			}
		}
		allowed := query.DefaultUserAccessReviewBurst + int(query.DefaultUserAccessReviewRate*time.Since(start).Seconds()) + 1
		if exhausted < calls-allowed {
			t.Errorf("%d of %d calls in new namespaces refused as ResourceExhausted in %s, want at least %d", exhausted, calls, time.Since(start).Round(time.Millisecond), calls-allowed)
		}
		// The identity's rate refills: its calls are answered again.
		var err error
		_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err = viewer.ListClusters(ctx, &queryv1.ListClustersRequest{})
			return err == nil, nil
		})
		if err != nil {
			t.Errorf("ListClusters after the identity's burst: %v", err)
		}
	})

	// Revocation: the viewer's binding removed and the holder's
	// ServiceAccount deleted are honoured within the cache's TTL.
	t.Run("revocation within the TTL", func(t *testing.T) {
		viewer, holder := f.dial(t, viewerToken), f.dial(t, holderToken)
		for _, c := range []queryv1.QueryClient{viewer, holder} {
			if _, err := c.ListClusters(ctx, &queryv1.ListClustersRequest{}); err != nil {
				t.Fatalf("before revocation: %v", err)
			}
		}
		if err := f.kube.RbacV1().ClusterRoleBindings().Delete(ctx, "viewer-imperator-fleet-viewer", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := f.kube.CoreV1().ServiceAccounts(identities).Delete(ctx, "holder", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		revoked := time.Now()
		deadline := revoked.Add(query.DefaultTokenAuthTTL + 5*time.Second)
		for name, tc := range map[string]struct {
			client   queryv1.QueryClient
			wantCode codes.Code
		}{"binding removed": {viewer, codes.PermissionDenied}, "account deleted": {holder, codes.Unauthenticated}} {
			var err error
			_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Until(deadline), true, func(ctx context.Context) (bool, error) {
				_, err = tc.client.ListClusters(ctx, &queryv1.ListClustersRequest{})
				return status.Code(err) == tc.wantCode, nil
			})
			if status.Code(err) != tc.wantCode {
				t.Errorf("%s: still %v %s after the revocation, want %s within the TTL (%s)", name, err, time.Since(revoked).Round(time.Second), tc.wantCode, query.DefaultTokenAuthTTL)
			}
		}
	})
}

// TestTokenAudiences: a hub started with --token-audiences accepts a token
// issued for its audience and refuses one issued for the API server alone,
// so that tokens people hand to the hub cannot also open the API server.
func TestTokenAudiences(t *testing.T) {
	f := setUp(t)
	ctx := context.Background()
	const audience = "imperator-hub"
	bound, err := hubtest.Start(f.config, hubtest.Options{
		Namespace: framework.AgentNamespace,
		Configure: func(c *config.Config) { c.TokenAudiences = []string{audience} },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := bound.Stop(); err != nil {
			t.Error(err)
		}
	})
	apiServerToken, _ := f.serviceAccount(t, "audience-viewer", map[string]string{"imperator-fleet-viewer": ""})
	expiry := int64(3600)
	tr, err := f.kube.CoreV1().ServiceAccounts(identities).CreateToken(ctx, "audience-viewer", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hubToken := tr.Status.Token
	dial := func(token string) queryv1.QueryClient {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(f.caPEM)
		conn, err := grpc.NewClient(bound.Address(),
			grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})),
			grpc.WithPerRPCCredentials(bearer(token)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return queryv1.NewQueryClient(conn)
	}
	if _, err := dial(hubToken).ListClusters(ctx, &queryv1.ListClustersRequest{}); err != nil {
		t.Errorf("a token issued for audience %s: ListClusters = %v, want it answered", audience, err)
	}
	_, err = dial(apiServerToken).ListClusters(ctx, &queryv1.ListClustersRequest{})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("a token for the API server alone: ListClusters = %v, want Unauthenticated", err)
	}
	// The default hub (no --token-audiences) takes the API server's tokens.
	if _, err := f.dial(t, apiServerToken).ListClusters(ctx, &queryv1.ListClustersRequest{}); err != nil {
		t.Errorf("default hub, a token for the API server: ListClusters = %v, want it answered", err)
	}
}
