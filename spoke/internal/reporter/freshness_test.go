package reporter

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/imperator-federation/imperator/internal/pki"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// nextHeartbeat returns the spoke's next Heartbeat, skipping other messages.
func (h *recordingHub) nextHeartbeat(t *testing.T) *federationv1.Heartbeat {
	t.Helper()
	for {
		if hb := h.next(t).GetHeartbeat(); hb != nil {
			return hb
		}
	}
}

func TestHeartbeatsSayWhenTheAgentCannotReachItsAPIServer(t *testing.T) {
	const staleAfter = 400 * time.Millisecond
	ca, err := pki.NewCA("hub-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	hub, address := startHub(t, ca, nil)
	certPEM, keyPEM, err := ca.IssueClient(testCluster, nil, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	scheme := testScheme(t)
	var unreachable atomic.Bool
	objects := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testSecret},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
		},
	).WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if unreachable.Load() {
			return apierrors.NewServiceUnavailable("connection refused")
		}
		return c.Get(ctx, key, obj, opts...)
	}}).Build()
	// A Forbidden answer is an answer: the API server is reachable.
	if !apiServerAnswered(apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, testNamespace, nil)) {
		t.Error("a Forbidden answer counts as the API server unreachable")
	}
	startReporter(t, ca, address, scheme, objects, "", func(o *Options) {
		o.HeartbeatInterval = 50 * time.Millisecond
		o.APIServerStaleAfter = staleAfter
	})

	// Reachable: heartbeats carry nothing.
	for range 5 {
		if hb := hub.nextHeartbeat(t); hb.GetApiServerUnreachableSince() != nil {
			t.Fatalf("heartbeat while the API server answers: api_server_unreachable_since = %s, want unset", hb.GetApiServerUnreachableSince().AsTime())
		}
	}

	lostAt := time.Now()
	unreachable.Store(true)
	var stale *federationv1.Heartbeat
	for stale == nil {
		hb := hub.nextHeartbeat(t)
		if time.Since(lostAt) > 10*staleAfter {
			t.Fatalf("no heartbeat said the API server is unreachable within %s of losing it", 10*staleAfter)
		}
		if hb.GetApiServerUnreachableSince() != nil {
			stale = hb
		}
	}
	since, sent := stale.GetApiServerUnreachableSince().AsTime(), stale.GetSentAt().AsTime()
	if since.After(lostAt) {
		t.Errorf("api_server_unreachable_since = %s, after the API server was lost at %s; want the last contact before", since, lostAt)
	}
	if lostAt.Sub(since) > time.Second {
		t.Errorf("api_server_unreachable_since = %s, %s before the API server was lost; want the last contact, at most a probe interval before", since, lostAt.Sub(since))
	}
	if sent.Sub(since) <= staleAfter {
		t.Errorf("a heartbeat sent %s after the last contact says the API server is unreachable; want only after %s", sent.Sub(since), staleAfter)
	}

	unreachable.Store(false)
	back := time.Now()
	for {
		hb := hub.nextHeartbeat(t)
		if hb.GetApiServerUnreachableSince() == nil {
			break
		}
		if time.Since(back) > 10*staleAfter {
			t.Fatalf("heartbeats still say the API server is unreachable %s after it answers again", time.Since(back))
		}
	}
}
