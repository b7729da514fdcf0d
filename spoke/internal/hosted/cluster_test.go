package hosted

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/imperator-federation/imperator/internal/schemes"
)

// TestMemberWatchesAreNotCutByTheRequestTimeout: the member's cache (its
// watches and LISTs) runs without --member-request-timeout, while a write
// through the member cluster's client still gives up after it.
func TestMemberWatchesAreNotCutByTheRequestTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api":
			_, _ = w.Write([]byte(`{"kind":"APIVersions","versions":["v1"]}`))
		case "/apis":
			_, _ = w.Write([]byte(`{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`))
		case "/api/v1":
			_, _ = w.Write([]byte(`{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"configmaps","singularName":"configmap","namespaced":true,"kind":"ConfigMap","verbs":["create","get","list","watch"]}]}`))
		default:
			select { // an API server that does not answer
			case <-release:
			case <-r.Context().Done():
			}
		}
	}))
	defer srv.Close()
	defer close(release)

	scheme, err := schemes.Spoke()
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Namespace: "members", Scheme: scheme, RequestTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	spec := &Member{Name: "edge", Config: &rest.Config{Host: srv.URL, Timeout: 500 * time.Millisecond}}
	cl, err := p.newCluster(spec)
	if err != nil {
		t.Fatal(err)
	}
	if got := cl.GetConfig().Timeout; got != 0 {
		t.Errorf("member cache config has timeout %s: every watch would be cut after it", got)
	}
	if got := cl.GetHTTPClient().Timeout; got != 0 {
		t.Errorf("member cache http.Client has timeout %s: every watch would be cut after it", got)
	}
	if spec.Config.Timeout != 500*time.Millisecond {
		t.Errorf("member request config lost its timeout: %s", spec.Config.Timeout)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err = cl.GetClient().Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "x"}})
	if err == nil {
		t.Fatal("create against an API server that does not answer succeeded")
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("a write to a member that does not answer took %s, want it bounded by the request timeout (500ms): %v", time.Since(start), err)
	}
}
