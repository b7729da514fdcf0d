// Package hubtest runs a complete hub in-process for the integration suites
// of other packages (the spoke reporter's, the e2e specs): the same assembly
// as the hub binary, on a loopback listener, with its in-memory index
// exposed read-only so that tests can assert what the hub knows.
package hubtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/hub/internal/app"
	"github.com/imperator-federation/imperator/hub/internal/config"
	"github.com/imperator-federation/imperator/hub/internal/hubca"
	"github.com/imperator-federation/imperator/hub/internal/join"
	"github.com/imperator-federation/imperator/hub/internal/store"
	"github.com/imperator-federation/imperator/internal/schemes"
	"github.com/imperator-federation/imperator/test/util/framework"
)

// Options of a test hub.
type Options struct {
	// Address to listen on; "127.0.0.1:0" when empty. Restart a hub on the
	// same address to let spokes reconnect.
	Address string
	// Namespace of the CA and tokens, which must exist; imperator-system when empty.
	Namespace       string
	GracePeriod     time.Duration
	PersistInterval time.Duration
	// ClientCertValidity, when set, is the lifetime of the spoke
	// certificates the hub issues, and may be shorter than the hub's flag
	// allows: specs of certificate renewal need lifetimes of seconds.
	ClientCertValidity time.Duration
	// MaxConnectionAge and MaxConnectionAgeGrace, when set, recycle spoke
	// connections that fast (specs of a spoke moving to a new connection;
	// Configure does the same for packages that can import the hub's config).
	MaxConnectionAge      time.Duration
	MaxConnectionAgeGrace time.Duration
	// Configure, when set, changes the hub's configuration last (e.g. the
	// connection limits of an abuse suite).
	Configure func(*config.Config)
}

// Hub is a running in-process hub.
type Hub struct {
	addr     string
	cancel   context.CancelFunc
	done     chan error
	registry *prometheus.Registry

	mu    sync.Mutex
	store *store.Store

	stopOnce sync.Once
	stopErr  error
}

// ClusterView is what a test may read of one cluster in the hub's index.
type ClusterView = store.Cluster

// Start runs a hub against the hub cluster of restConfig until Stop.
func Start(restConfig *rest.Config, opts Options) (*Hub, error) {
	cfg := config.Default()
	if opts.Namespace != "" {
		cfg.Namespace = opts.Namespace
	}
	if opts.Address == "" {
		opts.Address = "127.0.0.1:0"
	}
	if opts.GracePeriod > 0 {
		cfg.GracePeriod = opts.GracePeriod
	}
	if opts.PersistInterval > 0 {
		cfg.PersistInterval = opts.PersistInterval
	}
	cfg.MetricsAddr, cfg.HealthAddr = "0", "0"
	cfg.ListenAddress = opts.Address
	if opts.MaxConnectionAge > 0 {
		cfg.Limits.MaxConnectionAge = opts.MaxConnectionAge
	}
	if opts.MaxConnectionAgeGrace > 0 {
		cfg.Limits.MaxConnectionAgeGrace = opts.MaxConnectionAgeGrace
	}
	if opts.Configure != nil {
		opts.Configure(&cfg)
	}
	cfg.Complete()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.ClientCertValidity > 0 {
		cfg.ClientCertValidity = opts.ClientCertValidity
	}
	lis, err := net.Listen("tcp", opts.Address)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", opts.Address, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &Hub{addr: lis.Addr().String(), cancel: cancel, done: make(chan error, 1), registry: prometheus.NewRegistry()}
	ready := make(chan struct{})
	go func() {
		h.done <- app.Run(ctx, cfg, restConfig, app.Options{
			Listener:      lis,
			Registerer:    h.registry,
			SharedProcess: true,
			Ready: func(st *store.Store) {
				h.mu.Lock()
				h.store = st
				h.mu.Unlock()
				close(ready)
			},
		})
	}()
	select {
	case <-ready:
		return h, nil
	case err := <-h.done:
		cancel()
		_ = lis.Close()
		return nil, errors.Join(errors.New("hub did not start"), err)
	case <-time.After(time.Minute):
		return nil, errors.Join(errors.New("hub did not start within a minute"), h.Stop())
	}
}

// Address is host:port of the hub's gRPC endpoint.
func (h *Hub) Address() string { return h.addr }

// Metrics is the registry of the hub's own metrics.
func (h *Hub) Metrics() prometheus.Gatherer { return h.registry }

// Cluster returns the hub's in-memory view of a cluster.
func (h *Hub) Cluster(name string) (*ClusterView, bool) {
	h.mu.Lock()
	st := h.store
	h.mu.Unlock()
	return st.Get(name)
}

// Stop stops the hub and waits for it to end; later calls return the same.
func (h *Hub) Stop() error {
	h.stopOnce.Do(func() {
		h.cancel()
		h.stopErr = <-h.done
	})
	return h.stopErr
}

// CreateToken creates a bootstrap token in the hub cluster.
func CreateToken(ctx context.Context, c client.Client, namespace string, ttl time.Duration, cluster string) (string, error) {
	token, _, err := join.NewTokens(c, namespace, nil).Create(ctx, join.CreateOptions{TTL: ttl, ClusterName: cluster, Description: "test"})
	return token, err
}

// WriteCAFile writes the hub CA bundle (creating the CA when missing) into
// dir and returns the file's path, for the spokes' --hub-ca-file.
func WriteCAFile(ctx context.Context, c client.Client, namespace, dir string) (string, error) {
	ca, err := hubca.LoadOrCreate(ctx, c, namespace, config.Default().CASecret)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "hub-ca.crt")
	return path, os.WriteFile(path, ca.CertPEM, 0o600)
}

// ClusterOptions describe a hub cluster for test/util/framework: an API
// server with the hub's CRDs (its inventory kinds and OCM's), the hub's
// scheme and framework.AgentNamespace, where the hub keeps its CA and tokens
// unless Options.Namespace says otherwise.
func ClusterOptions() (framework.Options, error) {
	scheme, err := schemes.Hub()
	if err != nil {
		return framework.Options{}, err
	}
	return framework.Options{Scheme: scheme, CRDs: framework.HubCRDs, Namespaces: []string{framework.AgentNamespace}}, nil
}
