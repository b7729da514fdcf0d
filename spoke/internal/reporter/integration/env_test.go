package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/config"
	"github.com/imperator-federation/imperator/spoke/internal/reporter"
	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/repo"
)

// agentNamespace holds the hub CA and tokens on the hub, and the agent's
// hub credentials on a spoke.
const agentNamespace = "imperator-system"

// credentialsSecret is the spoke's Secret holding its hub client certificate.
const credentialsSecret = "imperator-hub-credentials"

// apiServer is one envtest API server with a direct client.
type apiServer struct {
	env    *envtest.Environment
	config *rest.Config
	client client.Client
}

func startAPIServer(scheme *runtime.Scheme, crdDirs ...string) (*apiServer, error) {
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, d := range crdDirs {
		paths = append(paths, filepath.Join(root, d))
	}
	s := &apiServer{env: &envtest.Environment{
		BinaryAssetsDirectory: harness.BinDir(),
		CRDDirectoryPaths:     paths,
		ErrorIfCRDPathMissing: true,
	}}
	if s.config, err = s.env.Start(); err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	if s.client, err = client.New(s.config, client.Options{Scheme: scheme}); err != nil {
		return nil, errors.Join(fmt.Errorf("creating client: %w", err), s.env.Stop())
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}}
	if err := s.client.Create(context.Background(), ns); err != nil {
		return nil, errors.Join(fmt.Errorf("creating namespace %s: %w", agentNamespace, err), s.env.Stop())
	}
	return s, nil
}

func (s *apiServer) stop() error { return s.env.Stop() }

func spokeScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), imperatorv1alpha1.AddToScheme(scheme)); err != nil {
		return nil, err
	}
	return scheme, nil
}

// spoke is a spoke cluster's API server and, while running, its reporter.
type spoke struct {
	name string
	*apiServer
	scheme *runtime.Scheme
	caFile string
	// token is the bootstrap token startReporter writes into tokenFile, the
	// agent's --join-token-file.
	token     string
	tokenFile string

	cancel  context.CancelFunc
	stopped chan error
}

// startReporter runs the reporter in a manager of its own, as the agent does.
func (s *spoke) startReporter(hubAddress string) error {
	mgr, err := ctrl.NewManager(s.config, ctrl.Options{
		Scheme:                 s.scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if err := s.writeToken(s.token); err != nil {
		return err
	}
	cfg := config.Default()
	cfg.Hub = config.Hub{
		Address:           hubAddress,
		ClusterName:       s.name,
		CAFile:            s.caFile,
		CredentialsSecret: credentialsSecret,
		ReportDebounce:    100 * time.Millisecond,
		TokenFile:         s.tokenFile,
	}
	r, err := reporter.New(reporter.Options{
		Cache:             mgr.GetCache(),
		Client:            s.client,
		Namespace:         agentNamespace,
		Hub:               cfg.Hub,
		Token:             cfg.JoinToken,
		AgentVersion:      "v0.0.0-test",
		HeartbeatInterval: 300 * time.Millisecond,
		InitialBackoff:    100 * time.Millisecond,
		MaxBackoff:        time.Second,
		Log:               ctrl.Log.WithName("reporter").WithValues("spoke", s.name),
	})
	if err != nil {
		return err
	}
	if err := mgr.Add(r); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.stopped = make(chan error, 1)
	go func() { s.stopped <- mgr.Start(ctx) }()
	return nil
}

// writeToken replaces the content of the agent's token file at once, as
// the kubelet updates a mounted Secret.
func (s *spoke) writeToken(token string) error {
	tmp := s.tokenFile + ".new"
	if err := os.WriteFile(tmp, []byte(token+"\n"), 0o600); err != nil {
		return fmt.Errorf("writing the token file: %w", err)
	}
	if err := os.Rename(tmp, s.tokenFile); err != nil {
		return fmt.Errorf("writing the token file: %w", err)
	}
	return nil
}

// stopReporter stops the reporter's manager and waits for it.
func (s *spoke) stopReporter() error {
	if s.cancel == nil {
		return nil
	}
	s.cancel()
	s.cancel = nil
	select {
	case err := <-s.stopped:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("reporter manager did not stop within 30s")
	}
}
