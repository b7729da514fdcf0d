package tokenauth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/imperator-federation/imperator/hub/internal/query"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// coldNamespace holds the benchmark's one-call ServiceAccounts; a group
// binding makes each a viewer without a binding of its own.
const coldNamespace = "bench-cold"

// BenchmarkQueryAuth: ListClusters latency on one connection, by how the
// caller authenticates: a viewer certificate; a ServiceAccount token whose
// TokenReview and SubjectAccessReview are cached (warm); a new
// ServiceAccount's token at every call, so that both reviews go to the hub
// cluster's API server (cold). The cold calls are paced below the hub's
// per-source rate of new tokens (query.DefaultSourceTokenReviewRate), with
// the timer stopped: faster, the hub refuses them (ResourceExhausted).
func BenchmarkQueryAuth(b *testing.B) {
	f := setUp(b)
	ctx := context.Background()
	if _, err := f.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: coldNamespace}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := f.kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-cold-viewers"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "imperator-fleet-viewer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + coldNamespace}},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	viewerToken, _ := f.serviceAccount(b, "viewer", map[string]string{"imperator-fleet-viewer": ""})

	certPEM, keyPEM, err := f.ca.IssueClient("bench-viewer", []string{query.ViewerOrganization}, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		b.Fatal(err)
	}
	conn := func(cert *tls.Certificate) queryv1.QueryClient {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(f.caPEM)
		cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		cc, err := grpc.NewClient(f.hub.Address(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cc.Close() })
		return queryv1.NewQueryClient(cc)
	}
	withCert, withToken := conn(&pair), conn(nil)

	// call times one ListClusters; token is the caller's bearer token
	// ("" for the certificate).
	call := func(c queryv1.QueryClient, token string) time.Duration {
		var opts []grpc.CallOption
		if token != "" {
			opts = append(opts, grpc.PerRPCCredentials(bearer(token)))
		}
		start := time.Now()
		if _, err := c.ListClusters(ctx, &queryv1.ListClustersRequest{}, opts...); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	report := func(b *testing.B, latencies []time.Duration) {
		slices.Sort(latencies)
		b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds())/1000, "p99-ms")
		b.ReportMetric(0, "ns/op")
	}

	b.Run("certificate", func(b *testing.B) {
		call(withCert, "") // the connection's handshake
		latencies := make([]time.Duration, 0, b.N)
		for range b.N {
			latencies = append(latencies, call(withCert, ""))
		}
		report(b, latencies)
	})
	b.Run("token-warm", func(b *testing.B) {
		call(withToken, viewerToken) // the handshake and both reviews
		latencies := make([]time.Duration, 0, b.N)
		for range b.N {
			latencies = append(latencies, call(withToken, viewerToken))
		}
		report(b, latencies)
	})
	b.Run("token-cold", func(b *testing.B) {
		call(withToken, viewerToken)
		latencies := make([]time.Duration, 0, b.N)
		expiry := int64(3600)
		pace := rate.NewLimiter(0.9*query.DefaultSourceTokenReviewRate, query.DefaultSourceTokenReviewBurst/2)
		for i := range b.N {
			b.StopTimer()
			if err := pace.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			name := "cold-" + strconv.Itoa(i) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			if _, err := f.kube.CoreV1().ServiceAccounts(coldNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			tr, err := f.kube.CoreV1().ServiceAccounts(coldNamespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			latencies = append(latencies, call(withToken, tr.Status.Token))
		}
		report(b, latencies)
	})
}
