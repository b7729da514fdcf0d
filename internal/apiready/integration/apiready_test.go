package integration

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	"github.com/imperator-federation/imperator/internal/apiready"
	"github.com/imperator-federation/imperator/test/util/faultproxy"
	"github.com/imperator-federation/imperator/test/util/framework"
)

// startAPIServer starts a real API server and a fault proxy in front of
// it; the returned config reaches the API server through the proxy.
func startAPIServer(t *testing.T) (*rest.Config, *faultproxy.Proxy) {
	t.Helper()
	env, err := framework.Start(context.Background(), framework.Options{})
	if err != nil {
		t.Fatalf("starting the API server: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cfg := env.Config
	server, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatalf("the API server's address %q: %v", cfg.Host, err)
	}
	proxy, err := faultproxy.Start(server.Host)
	if err != nil {
		t.Fatalf("starting the proxy: %v", err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	through := rest.CopyConfig(cfg)
	through.Host = "https://" + proxy.Addr()
	return through, proxy
}

func TestAgentStartedWhileItsAPIServerIsFrozenStartsWhenItAnswers(t *testing.T) {
	cfg, proxy := startAPIServer(t)
	proxy.SetMode(faultproxy.Blackhole)
	thaw := time.AfterFunc(3*time.Second, func() { proxy.SetMode(faultproxy.Pass) })
	defer thaw.Stop()

	start := time.Now()
	if err := apiready.Wait(context.Background(), cfg, time.Minute, logr.Discard()); err != nil {
		t.Fatalf("Wait: %v; want it to return once the API server answers again", err)
	}
	if waited := time.Since(start); waited < 3*time.Second {
		t.Fatalf("Wait returned after %s, before the API server answered (3s)", waited)
	}
}

func TestAgentStartedWhileItsAPIServerIsRestartingStartsWhenItListens(t *testing.T) {
	cfg, proxy := startAPIServer(t)
	proxy.SetMode(faultproxy.Cut)
	reopen := time.AfterFunc(2*time.Second, func() { proxy.SetMode(faultproxy.Pass) })
	defer reopen.Stop()

	if err := apiready.Wait(context.Background(), cfg, time.Minute, logr.Discard()); err != nil {
		t.Fatalf("Wait: %v; want it to return once the API server accepts connections again", err)
	}
}

func TestAPIServerThatStaysAwayEndsTheStartWithAnErrorNamingIt(t *testing.T) {
	cfg, proxy := startAPIServer(t)
	proxy.SetMode(faultproxy.Blackhole)

	err := apiready.Wait(context.Background(), cfg, 2*time.Second, logr.Discard())
	if err == nil {
		t.Fatal("Wait returned nil although the API server never answered")
	}
	if !strings.Contains(err.Error(), proxy.Addr()) || !strings.Contains(err.Error(), "did not answer within 2s") {
		t.Fatalf("error %q should name the API server %s and the time waited", err, proxy.Addr())
	}
}

func TestStopDuringTheWaitEndsIt(t *testing.T) {
	cfg, proxy := startAPIServer(t)
	proxy.SetMode(faultproxy.Blackhole)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()

	if err := apiready.Wait(ctx, cfg, time.Minute, logr.Discard()); err == nil {
		t.Fatal("Wait returned nil after its context ended with the API server still frozen")
	}
}
