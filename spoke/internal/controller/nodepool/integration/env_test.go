package nodepool_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/controller/nodepool"
	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/repo"
)

// environment is a real API server (envtest) with the spoke CRDs and a
// multicluster manager without provider, as the agent runs it, running the
// node-pool controllers against it. envtest runs no controller-manager, so no
// garbage collector and no node lifecycle controller: the suite deletes the
// MachineNodePool of a deleted Machine itself and sets node taints by hand.
type environment struct {
	env *envtest.Environment
	// Client talks to the API server directly.
	Client client.Client

	manager *runningManager
}

// runningManager is the agent's multicluster manager, without provider, running
// the node-pool controllers against one API server.
type runningManager struct {
	cancel  context.CancelFunc
	stopped chan error
}

func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), imperatorv1alpha1.AddToScheme(scheme)); err != nil {
		return nil, err
	}
	return scheme, nil
}

// startEnvironment starts the API server and the manager; stop undoes both.
func startEnvironment() (_ *environment, err error) {
	scheme, err := newScheme()
	if err != nil {
		return nil, fmt.Errorf("building the scheme: %w", err)
	}
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	e := &environment{env: &envtest.Environment{
		BinaryAssetsDirectory: harness.BinDir(),
		CRDDirectoryPaths:     []string{filepath.Join(root, "deploy", "spoke", "crd")},
		ErrorIfCRDPathMissing: true,
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
	e.manager, err = startManager(cfg, scheme)
	if err != nil {
		return nil, err
	}
	return e, nil
}

// startManager starts a manager running the node-pool controllers against
// cfg and returns once its cache has synced.
func startManager(cfg *rest.Config, scheme *runtime.Scheme) (_ *runningManager, err error) {
	mgr, err := mcmanager.New(cfg, nil, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	if err := nodepool.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the node-pool controllers: %w", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	m := &runningManager{cancel: cancel, stopped: make(chan error, 1)}
	go func() { m.stopped <- mgr.Start(ctx) }()
	defer func() {
		if err != nil {
			err = errors.Join(err, m.stop())
		}
	}()
	syncCtx, syncCancel := context.WithTimeout(ctx, 30*time.Second)
	defer syncCancel()
	if !mgr.GetLocalManager().GetCache().WaitForCacheSync(syncCtx) {
		return nil, errors.New("waiting for the manager's cache to sync")
	}
	return m, nil
}

// stop stops the manager and waits for it.
func (m *runningManager) stop() error {
	m.cancel()
	select {
	case err := <-m.stopped:
		if err != nil {
			return fmt.Errorf("manager: %w", err)
		}
		return nil
	case <-time.After(30 * time.Second):
		return errors.New("manager did not stop within 30s")
	}
}

// kubectl runs the kubectl of the control-plane binaries against the API server.
func (e *environment) kubectl(args ...string) (string, error) {
	user, err := e.env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("adding a kubectl user: %w", err)
	}
	k, err := user.Kubectl()
	if err != nil {
		return "", fmt.Errorf("configuring kubectl: %w", err)
	}
	k.Path = filepath.Join(harness.BinDir(), "kubectl")
	stdout, stderr, err := k.Run(args...)
	if err != nil {
		errOut, _ := io.ReadAll(stderr)
		return "", fmt.Errorf("kubectl %v: %w: %s", args, err, errOut)
	}
	out, err := io.ReadAll(stdout)
	return string(out), err
}

// stop stops the manager, then the API server.
func (e *environment) stop() error {
	var errs []error
	if e.manager != nil {
		errs = append(errs, e.manager.stop())
	}
	if err := e.env.Stop(); err != nil {
		errs = append(errs, fmt.Errorf("stopping envtest: %w", err))
	}
	return errors.Join(errs...)
}
