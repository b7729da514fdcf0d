package integration

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	"github.com/imperator-federation/imperator/internal/apiready"
	"github.com/imperator-federation/imperator/test/util/faultproxy"
	"github.com/imperator-federation/imperator/test/util/framework"
)

// apiServer is the real API server every test reaches through a proxy of
// its own (TestMain starts and stops it).
var apiServer *rest.Config

func TestMain(m *testing.M) {
	env, err := framework.Start(context.Background(), framework.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the API server:", err)
		os.Exit(1)
	}
	apiServer = env.Config
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the API server:", err)
	}
	os.Exit(code)
}

// startAPIServer puts a fault proxy in front of the API server; the
// returned config reaches the API server through the proxy.
func startAPIServer(t *testing.T) (*rest.Config, *faultproxy.Proxy) {
	t.Helper()
	server, err := url.Parse(apiServer.Host)
	if err != nil {
		t.Fatalf("the API server's address %q: %v", apiServer.Host, err)
	}
	proxy, err := faultproxy.Start(server.Host)
	if err != nil {
		t.Fatalf("starting the proxy: %v", err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	through := rest.CopyConfig(apiServer)
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

	err := apiready.Wait(ctx, cfg, time.Minute, logr.Discard())
	if err == nil {
		t.Fatal("Wait returned nil after its context ended with the API server still frozen")
	}
	if !strings.Contains(err.Error(), "stopped while waiting") {
		t.Fatalf("error %q should say the wait was stopped, not that the API server timed out", err)
	}
}
