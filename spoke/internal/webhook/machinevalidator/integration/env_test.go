package machinevalidator_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/machinevalidator"
	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/repo"
)

// webhookConfigurationName names the registration built by
// machinevalidator.ValidatingWebhookConfiguration.
const webhookConfigurationName = "imperator-machine-validator"

// environment is a real API server (envtest) whose Machine admission calls
// the validator, served by a controller-runtime manager as the agent serves it.
type environment struct {
	env *envtest.Environment
	// Client talks to the API server directly.
	Client client.Client
	// Cache is the manager's cache the validator reads Machines from.
	Cache client.Reader

	cancel  context.CancelFunc
	stopped chan error
}

func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := imperatorv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return scheme, nil
}

// startEnvironment starts the API server with the CRDs of deploy/spoke/crd and
// the validator's ValidatingWebhookConfiguration pointing at a URL on
// 127.0.0.1, then a manager serving the validator there, and returns once the
// webhook server answers. stop undoes everything.
func startEnvironment() (_ *environment, err error) {
	scheme, err := newScheme()
	if err != nil {
		return nil, fmt.Errorf("building the scheme: %w", err)
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
	url := fmt.Sprintf("https://127.0.0.1:%d%s", port, machinevalidator.WebhookPath)
	registration := machinevalidator.ValidatingWebhookConfiguration(webhookConfigurationName,
		admissionregistrationv1.WebhookClientConfig{URL: &url})

	e := &environment{env: &envtest.Environment{
		BinaryAssetsDirectory: harness.BinDir(),
		CRDDirectoryPaths:     []string{filepath.Join(root, "deploy", "spoke", "crd")},
		ErrorIfCRDPathMissing: true,
		// envtest generates the serving certificate and sets the CA bundle;
		// the URL clientConfig is kept as it is.
		WebhookInstallOptions: envtest.WebhookInstallOptions{
			LocalServingHost:   "127.0.0.1",
			LocalServingPort:   port,
			ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{registration},
		},
	}}
	cfg, err := e.env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.stop())
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
	if err := machinevalidator.SetupWebhookWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the Machine validator: %w", err)
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
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return nil, errors.New("waiting for the manager's cache to sync")
	}
	return e, nil
}

// stop stops the manager, then the API server.
func (e *environment) stop() error {
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
