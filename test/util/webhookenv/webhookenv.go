// Package webhookenv runs admission webhooks as the agent serves them, behind
// a real API server: envtest with the spoke CRDs, the webhook configurations
// a suite gives pointing at a URL on 127.0.0.1 (envtest issues the serving
// certificate and sets the CA bundle), and a controller-runtime manager that
// serves the webhooks there. Start returns once the webhook server answers
// and the manager's cache has synced; Stop undoes everything.
package webhookenv

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/repo"
)

// Options say which webhooks the environment serves.
type Options struct {
	// Mutating and Validating return the webhook configurations to
	// register, given the base URL (https://127.0.0.1:<port>) of the
	// manager's webhook server.
	Mutating   func(baseURL string) []*admissionregistrationv1.MutatingWebhookConfiguration
	Validating func(baseURL string) []*admissionregistrationv1.ValidatingWebhookConfiguration
	// Setup registers the webhook handlers on the manager before it starts.
	Setup func(mgr ctrl.Manager) error
}

// Environment is a running API server and the manager serving the webhooks.
type Environment struct {
	env *envtest.Environment
	// Config reaches the API server with admin rights.
	Config *rest.Config
	// Client talks to the API server directly.
	Client client.Client
	// Cache is the manager's cache, the one the webhooks read from.
	Cache client.Reader

	cancel  context.CancelFunc
	stopped chan error
}

func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), imperatorv1alpha1.AddToScheme(scheme)); err != nil {
		return nil, fmt.Errorf("building the scheme: %w", err)
	}
	return scheme, nil
}

// Start starts the API server with the CRDs of deploy/spoke/crd and the
// webhooks of opts, and returns once they are served.
func Start(opts Options) (_ *Environment, err error) {
	scheme, err := newScheme()
	if err != nil {
		return nil, err
	}
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	ports, err := harness.FreePorts(1)
	if err != nil {
		return nil, err
	}
	port := ports[0]
	baseURL := "https://127.0.0.1:" + strconv.Itoa(port)
	install := envtest.WebhookInstallOptions{LocalServingHost: "127.0.0.1", LocalServingPort: port}
	if opts.Mutating != nil {
		install.MutatingWebhooks = opts.Mutating(baseURL)
	}
	if opts.Validating != nil {
		install.ValidatingWebhooks = opts.Validating(baseURL)
	}

	e := &Environment{env: &envtest.Environment{
		BinaryAssetsDirectory: harness.BinDir(),
		CRDDirectoryPaths:     []string{filepath.Join(root, "deploy", "spoke", "crd")},
		ErrorIfCRDPathMissing: true,
		// envtest generates the serving certificate and sets the CA bundle;
		// the URL clientConfig is kept as it is.
		WebhookInstallOptions: install,
	}}
	cfg, err := e.env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	e.Config = cfg
	defer func() {
		if err != nil {
			err = errors.Join(err, e.Stop())
		}
	}()

	e.Client, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating the client: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer: webhook.NewServer(webhook.Options{
			Host:    e.env.WebhookInstallOptions.LocalServingHost,
			Port:    e.env.WebhookInstallOptions.LocalServingPort,
			CertDir: e.env.WebhookInstallOptions.LocalServingCertDir,
		}),
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	if err := opts.Setup(mgr); err != nil {
		return nil, fmt.Errorf("setting up the webhooks: %w", err)
	}
	e.Cache = mgr.GetCache()
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.stopped = make(chan error, 1)
	go func() { e.stopped <- mgr.Start(ctx) }()

	started := mgr.GetWebhookServer().StartedChecker()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		select {
		case err := <-e.stopped:
			e.stopped <- err
			return false, fmt.Errorf("manager stopped: %w", err)
		default:
		}
		return started(&http.Request{}) == nil, nil
	}); err != nil {
		return nil, fmt.Errorf("waiting for the webhook server: %w", err)
	}
	syncCtx, cancelSync := context.WithTimeout(ctx, 30*time.Second)
	defer cancelSync()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		return nil, errors.New("waiting for the manager's cache to sync: not synced within 30s")
	}
	return e, nil
}

// WaitForCache polls the manager's cache until done reports true, for at
// most timeout: what a webhook sees is what its cache holds.
func (e *Environment) WaitForCache(ctx context.Context, timeout time.Duration, done func(ctx context.Context, cache client.Reader) (bool, error)) error {
	return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		return done(ctx, e.Cache)
	})
}

// Stop stops the manager, then the API server.
func (e *Environment) Stop() error {
	var errs []error
	if e.cancel != nil {
		e.cancel()
		select {
		case err := <-e.stopped:
			if err != nil {
				errs = append(errs, fmt.Errorf("manager: %w", err))
			}
		case <-time.After(30 * time.Second):
			errs = append(errs, errors.New("manager did not stop within 30s"))
		}
	}
	if err := e.env.Stop(); err != nil {
		errs = append(errs, fmt.Errorf("stopping envtest: %w", err))
	}
	return errors.Join(errs...)
}
