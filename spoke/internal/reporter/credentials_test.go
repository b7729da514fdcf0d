package reporter

import (
	"context"
	"crypto"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/pki"
	"github.com/imperator-federation/imperator/internal/schemes"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	"github.com/imperator-federation/imperator/spoke/internal/config"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

const (
	testCluster   = "alpha"
	testNamespace = "imperator-system"
	testSecret    = "imperator-hub-credentials"
)

// testScheme has the core and Imperator kinds.
func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme, err := schemes.Spoke()
	if err != nil {
		t.Fatal(err)
	}
	return scheme
}

// runUntilTheTestEnds starts a Reporter with opts and stops it when the test
// ends; Start must return no error.
func runUntilTheTestEnds(t *testing.T, opts Options) *Reporter {
	t.Helper()
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- r.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("Start() = %v", err)
		}
	})
	return r
}

// startReporter runs a Reporter for testCluster against the hub at address
// (trusting ca), reading and writing objects, until the test ends.
func startReporter(t *testing.T, ca *pki.CA, address string, scheme *runtime.Scheme, objects client.Client, token string, tune func(*Options)) {
	t.Helper()
	caFile := filepath.Join(t.TempDir(), "hub-ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	opts := Options{
		Cache:     objectCache{FakeInformers: &informertest.FakeInformers{Scheme: scheme}, reader: objects},
		Client:    objects,
		Namespace: testNamespace,
		Hub: config.Hub{
			Address: address, ClusterName: testCluster, CAFile: caFile,
			CredentialsSecret: testSecret, ReportDebounce: 10 * time.Millisecond,
		},
		Token:             func() (string, error) { return token, nil },
		HeartbeatInterval: time.Hour,
		InitialBackoff:    20 * time.Millisecond,
		MaxBackoff:        100 * time.Millisecond,
		Log:               logr.Discard(),
	}
	if tune != nil {
		tune(&opts)
	}
	runUntilTheTestEnds(t, opts)
}

// secretData reads the credentials Secret's data, nil when there is none.
func secretData(ctx context.Context, c client.Reader) (map[string][]byte, error) {
	var secret corev1.Secret
	err := c.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: testSecret}, &secret)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return secret.Data, err
}

func TestJoinRetrySendsTheSameStoredCSR(t *testing.T) {
	cases := map[string]struct {
		// failJoin makes the hub's first Join fail as if its answer was lost.
		failJoin bool
		// failStore makes the first write of the issued certificate fail:
		// the agent uses it at once and stores it on a retry, without
		// joining again.
		failStore bool
	}{
		"answer of the first Join lost":  {failJoin: true},
		"storing the certificate failed": {failStore: true},
		"first Join answered and stored": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ca, err := pki.NewCA("hub-ca", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			scheme := testScheme(t)
			var storeFailed bool
			var mu sync.Mutex
			objects := fake.NewClientBuilder().WithScheme(scheme).
				WithObjects(wrappers.MakeMachine("gpu", "team-a").Type("compute-xlarge", "40", "128Gi", 2).Obj()).
				WithInterceptorFuncs(interceptor.Funcs{Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
					mu.Lock()
					defer mu.Unlock()
					if s, ok := obj.(*corev1.Secret); ok && tc.failStore && !storeFailed && len(s.Data[corev1.TLSCertKey]) > 0 {
						storeFailed = true
						return apierrors.NewServiceUnavailable("etcd is being restarted")
					}
					return c.Update(ctx, obj, opts...)
				}}).Build()

			type join struct {
				csr, storedCSR []byte
			}
			var joins []join
			hub, address := startHub(t, ca, func(ctx context.Context, req *federationv1.JoinRequest) (*federationv1.JoinResponse, error) {
				data, err := secretData(ctx, objects)
				if err != nil {
					return nil, status.Error(codes.Internal, err.Error())
				}
				mu.Lock()
				joins = append(joins, join{csr: req.GetCsr(), storedCSR: data[pendingCSRKey]})
				first := len(joins) == 1
				mu.Unlock()
				if req.GetToken() != "abcdef.0123456789abcdef" {
					return nil, status.Error(codes.PermissionDenied, "wrong token")
				}
				if first && tc.failJoin {
					return nil, status.Error(codes.Unavailable, "answer lost")
				}
				cert, err := ca.SignClientCSR(req.GetCsr(), req.GetClusterName(), []string{identity.SpokeOrganization}, nil, time.Hour)
				if err != nil {
					return nil, status.Error(codes.InvalidArgument, err.Error())
				}
				return &federationv1.JoinResponse{Certificate: cert, Ca: ca.CertPEM}, nil
			})
			startReporter(t, ca, address, scheme, objects, "abcdef.0123456789abcdef", nil)

			if hello := hub.next(t).GetHello(); hello.GetClusterName() != testCluster {
				t.Fatalf("first message: %v, want a Hello of %s", hello, testCluster)
			}
			data := waitForStoredCertificate(t, objects)
			mu.Lock()
			defer mu.Unlock()
			wantJoins := 1
			if tc.failJoin {
				wantJoins = 2
			}
			if len(joins) != wantJoins {
				t.Fatalf("the hub got %d Joins, want %d", len(joins), wantJoins)
			}
			for i, j := range joins {
				if string(j.storedCSR) != string(j.csr) {
					t.Errorf("Join %d: the CSR sent is not the one stored in the Secret before the call", i+1)
				}
				if string(j.csr) != string(joins[0].csr) {
					t.Errorf("Join %d sent another CSR than the first: a retry must send the same", i+1)
				}
			}
			if _, ok := data[pendingCSRKey]; ok {
				t.Error("the Secret still holds the pending CSR after the certificate was stored")
			}
			cert, err := pki.ParseCertificate(data[corev1.TLSCertKey])
			if err != nil {
				t.Fatalf("stored certificate: %v", err)
			}
			key, err := pki.ParsePrivateKey(data[corev1.TLSPrivateKeyKey])
			if err != nil {
				t.Fatalf("stored key: %v", err)
			}
			csr, err := pki.ParseCSR(joins[0].csr)
			if err != nil {
				t.Fatal(err)
			}
			if !key.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(csr.PublicKey) ||
				!key.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(cert.PublicKey) {
				t.Error("the stored key is not the key of the CSR sent and of the certificate stored")
			}
		})
	}
}

// waitForStoredCertificate waits until the credentials Secret holds a
// certificate, and returns its data.
func waitForStoredCertificate(t *testing.T, c client.Reader) map[string][]byte {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := secretData(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		if len(data[corev1.TLSCertKey]) > 0 {
			return data
		}
		if time.Now().After(deadline) {
			t.Fatal("no certificate stored in the credentials Secret within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPendingRequestIsKeptForItsClusterAndReplacedOtherwise(t *testing.T) {
	alphaCSR, alphaKey, err := pki.NewCSR(testCluster)
	if err != nil {
		t.Fatal(err)
	}
	betaCSR, betaKey, err := pki.NewCSR("beta")
	if err != nil {
		t.Fatal(err)
	}
	_, otherKey, err := pki.NewCSR(testCluster)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		csr, key []byte
		wantKept bool
	}{
		"for this cluster":    {csr: alphaCSR, key: alphaKey, wantKept: true},
		"for another cluster": {csr: betaCSR, key: betaKey},
		"key not the CSR's":   {csr: alphaCSR, key: otherKey},
		"unreadable CSR":      {csr: []byte("garbage"), key: alphaKey},
		"unreadable key":      {csr: alphaCSR, key: []byte("garbage")},
		"none":                {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := pendingRequestValid(tc.csr, tc.key, testCluster); got != tc.wantKept {
				t.Errorf("pendingRequestValid() = %t, want %t", got, tc.wantKept)
			}
		})
	}
}
