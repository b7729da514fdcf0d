// Package framework is the one way every integration suite starts a real
// control plane: an envtest API server (or, with Harness, a test/util/harness
// cluster with controller-manager, scheduler and kwok), the project's scheme,
// the CRDs of deploy/, the namespaces a suite needs, and, when asked, a
// controller-runtime (or multicluster) manager serving webhooks, started and
// waited for until its webhook server answers and its cache has synced.
// Stop undoes everything in reverse order, also after a failure half-way;
// StartSuite does the same from a ginkgo BeforeSuite with DeferCleanup.
//
// A suite's env file states only what differs: which CRDs, which
// controllers or webhooks, which cache options.
package framework

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	"github.com/imperator-federation/imperator/internal/schemes"
	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/repo"
)

// CRD directories of deploy/, relative to the repository root.
var (
	// SpokeCRDs are the CRDs a spoke cluster serves (Machine,
	// MachineNodePool, CapacityHold).
	SpokeCRDs = []string{"deploy/spoke/crd"}
	// HubCRDs are the CRDs a hub cluster serves: the hub's inventory kinds
	// and the OCM kinds it writes.
	HubCRDs = []string{"deploy/hub/crd", "deploy/hub/crd/ocm"}
)

// AgentNamespace is the namespace the spoke agent and the hub run in by
// default; suites create it through Options.Namespaces.
const AgentNamespace = "imperator-system"

// timeout bounds each wait of the framework: a manager's webhook server, its
// cache sync, its stop.
const timeout = 30 * time.Second

// Options say what differs between suites.
type Options struct {
	// Name names a harness cluster (its directory and logs).
	Name string
	// Harness runs a test/util/harness cluster (API server,
	// controller-manager with its garbage collector, scheduler, kwok)
	// instead of envtest's bare API server. Webhooks need envtest.
	Harness bool
	// APIServerFlags are extra kube-apiserver flags of a harness cluster
	// (a hosted member's admission configuration, say).
	APIServerFlags []string
	// FeatureGates of a harness cluster's components
	// (harness.Options.FeatureGates).
	FeatureGates []string
	// Scheme of the client and the manager; the spoke's (schemes.Spoke)
	// when nil. Hub suites pass schemes.Hub.
	Scheme *runtime.Scheme
	// CRDs are directories relative to the repository root (SpokeCRDs,
	// HubCRDs); each must exist.
	CRDs []string
	// Namespaces are created before any manager starts.
	Namespaces []string
	// Mutating and Validating return the webhook configurations to
	// register, given the base URL (https://127.0.0.1:<port>) of the
	// manager's webhook server. envtest issues the serving certificate and
	// sets the CA bundle.
	Mutating   func(baseURL string) []*admissionregistrationv1.MutatingWebhookConfiguration
	Validating func(baseURL string) []*admissionregistrationv1.ValidatingWebhookConfiguration
	// Manager, when set, is started once the API server is ready.
	Manager *ManagerOptions
}

// ManagerOptions describe a manager: what it runs and how its cache is cut.
// Exactly one of Setup and SetupMulticluster may be set; with none the
// manager runs only its cache (a reporter adds itself through Setup).
type ManagerOptions struct {
	// Setup registers controllers, webhooks or runnables on a
	// controller-runtime manager.
	Setup func(mgr ctrl.Manager) error
	// SetupMulticluster registers multicluster reconcilers on a
	// multicluster manager without a provider (the local cluster only), as
	// spoke/internal/app runs them.
	SetupMulticluster func(mgr mcmanager.Manager) error
	// Cache restricts the manager's cache.
	Cache cache.Options
	// MaxConcurrentReconciles is each controller's worker count; 0 is
	// controller-runtime's default of one.
	MaxConcurrentReconciles int
}

// Environment is a running control plane and, when asked for, its manager.
type Environment struct {
	// Config reaches the API server with admin rights.
	Config *rest.Config
	// Client talks to the API server directly, with Scheme.
	Client client.Client
	Scheme *runtime.Scheme
	// Cluster is the harness cluster (Options.Harness), else nil.
	Cluster *harness.Cluster
	// Envtest is the envtest environment (no Options.Harness), else nil.
	Envtest *envtest.Environment
	// Manager is the manager of Options.Manager, else nil.
	Manager *Manager

	// webhookOptions place the manager's webhook server where envtest
	// registered the webhooks; nil when the environment serves none.
	webhookOptions *webhook.Options
}

// Start starts the control plane of opts, installs its CRDs, creates its
// namespaces and starts its manager. On error, what was started is stopped.
func Start(ctx context.Context, opts Options) (_ *Environment, err error) {
	if opts.Harness && (opts.Mutating != nil || opts.Validating != nil) {
		return nil, errors.New("framework options: webhooks (Mutating, Validating) need envtest, not Harness")
	}
	if !opts.Harness && (len(opts.APIServerFlags) > 0 || len(opts.FeatureGates) > 0) {
		return nil, errors.New("framework options: APIServerFlags and FeatureGates are a Harness cluster's")
	}
	e := &Environment{Scheme: opts.Scheme}
	if e.Scheme == nil {
		if e.Scheme, err = schemes.Spoke(); err != nil {
			return nil, err
		}
	}
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	crdDirs := make([]string, 0, len(opts.CRDs))
	for _, d := range opts.CRDs {
		crdDirs = append(crdDirs, filepath.Join(root, d))
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.Stop())
		}
	}()
	if opts.Harness {
		if err := e.startHarness(ctx, harness.Options{Name: opts.Name, APIServerFlags: opts.APIServerFlags, FeatureGates: opts.FeatureGates}, crdDirs); err != nil {
			return nil, err
		}
	} else if err := e.startEnvtest(opts, crdDirs); err != nil {
		return nil, err
	}
	if e.Client, err = client.New(e.Config, client.Options{Scheme: e.Scheme}); err != nil {
		return nil, fmt.Errorf("creating the client: %w", err)
	}
	for _, name := range opts.Namespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := e.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating namespace %s: %w", name, err)
		}
	}
	if opts.Manager != nil {
		if e.Manager, err = e.StartManager(ctx, *opts.Manager); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func (e *Environment) startHarness(ctx context.Context, opts harness.Options, crdDirs []string) (err error) {
	if e.Cluster, err = harness.Start(ctx, opts); err != nil {
		return err
	}
	e.Config = e.Cluster.Config
	if len(crdDirs) > 0 {
		return e.Cluster.InstallCRDs(ctx, crdDirs...)
	}
	return nil
}

func (e *Environment) startEnvtest(opts Options, crdDirs []string) error {
	e.Envtest = &envtest.Environment{
		BinaryAssetsDirectory: harness.BinDir(),
		CRDDirectoryPaths:     crdDirs,
		ErrorIfCRDPathMissing: true,
	}
	if opts.Mutating != nil || opts.Validating != nil {
		ports, err := harness.FreePorts(1)
		if err != nil {
			return err
		}
		install := envtest.WebhookInstallOptions{LocalServingHost: "127.0.0.1", LocalServingPort: ports[0]}
		baseURL := "https://127.0.0.1:" + strconv.Itoa(ports[0])
		if opts.Mutating != nil {
			install.MutatingWebhooks = opts.Mutating(baseURL)
		}
		if opts.Validating != nil {
			install.ValidatingWebhooks = opts.Validating(baseURL)
		}
		e.Envtest.WebhookInstallOptions = install
	}
	cfg, err := e.Envtest.Start()
	if err != nil {
		return fmt.Errorf("starting envtest: %w", err)
	}
	e.Config = cfg
	if opts.Mutating != nil || opts.Validating != nil {
		w := e.Envtest.WebhookInstallOptions
		e.webhookOptions = &webhook.Options{Host: w.LocalServingHost, Port: w.LocalServingPort, CertDir: w.LocalServingCertDir}
	}
	return nil
}

// Manager is a running manager; Stop ends it.
type Manager struct {
	// Cache is the manager's cache: what its controllers and webhooks see.
	Cache cache.Cache

	cancel  context.CancelFunc
	stopped chan error
}

// StartManager starts a manager against the environment's API server and
// returns once its webhook server (if the environment serves webhooks)
// answers and its cache has synced. Suites that restart a manager call it
// again after Manager.Stop.
func (e *Environment) StartManager(ctx context.Context, opts ManagerOptions) (_ *Manager, err error) {
	if opts.Setup != nil && opts.SetupMulticluster != nil {
		return nil, errors.New("framework manager options: set Setup or SetupMulticluster, not both")
	}
	ctrlOpts := ctrl.Options{
		Scheme:                 e.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  opts.Cache,
		// Suites and benchmarks start several managers in one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true), MaxConcurrentReconciles: opts.MaxConcurrentReconciles},
	}
	if e.webhookOptions != nil {
		ctrlOpts.WebhookServer = webhook.NewServer(*e.webhookOptions)
	}
	var mgr ctrl.Manager
	if opts.SetupMulticluster != nil {
		mc, err := mcmanager.New(e.Config, nil, ctrlOpts)
		if err != nil {
			return nil, fmt.Errorf("creating the manager: %w", err)
		}
		if err := opts.SetupMulticluster(mc); err != nil {
			return nil, fmt.Errorf("setting up the manager: %w", err)
		}
		mgr = mc.GetLocalManager()
	} else {
		if mgr, err = ctrl.NewManager(e.Config, ctrlOpts); err != nil {
			return nil, fmt.Errorf("creating the manager: %w", err)
		}
		if opts.Setup != nil {
			if err := opts.Setup(mgr); err != nil {
				return nil, fmt.Errorf("setting up the manager: %w", err)
			}
		}
	}

	runCtx, cancel := context.WithCancel(context.Background())
	m := &Manager{Cache: mgr.GetCache(), cancel: cancel, stopped: make(chan error, 1)}
	go func() { m.stopped <- mgr.Start(runCtx) }()
	defer func() {
		if err != nil {
			err = errors.Join(err, m.Stop())
		}
	}()
	if e.webhookOptions != nil {
		started := mgr.GetWebhookServer().StartedChecker()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
			if err := m.exited(); err != nil {
				return false, err
			}
			return started(&http.Request{}) == nil, nil
		}); err != nil {
			return nil, fmt.Errorf("waiting for the webhook server: %w", err)
		}
	}
	syncCtx, cancelSync := context.WithTimeout(ctx, timeout)
	defer cancelSync()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		return nil, errors.Join(fmt.Errorf("waiting for the manager's cache to sync: not synced within %s", timeout), m.exited())
	}
	return m, nil
}

// exited reports the manager's end, if it ended, without waiting.
func (m *Manager) exited() error {
	select {
	case err := <-m.stopped:
		m.stopped <- err
		return fmt.Errorf("manager stopped: %w", err)
	default:
		return nil
	}
}

// Stop stops the manager and waits for it; later calls return nil.
func (m *Manager) Stop() error {
	if m == nil || m.cancel == nil {
		return nil
	}
	m.cancel()
	m.cancel = nil
	select {
	case err := <-m.stopped:
		if err != nil {
			return fmt.Errorf("manager: %w", err)
		}
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("manager did not stop within %s", timeout)
	}
}

// WaitForCache polls the manager's cache until done reports true, for at
// most timeout: what a webhook or controller sees is what its cache holds.
func (e *Environment) WaitForCache(ctx context.Context, timeout time.Duration, done func(ctx context.Context, cache client.Reader) (bool, error)) error {
	if e.Manager == nil {
		return errors.New("the environment runs no manager")
	}
	return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		return done(ctx, e.Manager.Cache)
	})
}

// Stop stops the manager, then the control plane; it may be called on a
// half-started environment and more than once.
func (e *Environment) Stop() error {
	var errs []error
	errs = append(errs, e.Manager.Stop())
	if e.Cluster != nil {
		errs = append(errs, e.Cluster.Stop())
		e.Cluster = nil
	}
	if e.Envtest != nil {
		if err := e.Envtest.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping envtest: %w", err))
		}
		e.Envtest = nil
	}
	return errors.Join(errs...)
}
