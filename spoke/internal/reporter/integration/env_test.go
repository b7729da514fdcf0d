package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/spoke/internal/config"
	"github.com/imperator-federation/imperator/spoke/internal/reporter"
	"github.com/imperator-federation/imperator/test/util/framework"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// agentNamespace holds the hub CA and tokens on the hub, and the agent's
// hub credentials on a spoke.
const agentNamespace = framework.AgentNamespace

// credentialsSecret is the spoke's Secret holding its hub client certificate.
const credentialsSecret = "imperator-hub-credentials"

// spoke is a spoke cluster's API server (envtest with the spoke CRDs and
// GeneralMachine) and, while running, its reporter.
type spoke struct {
	name string
	*framework.Environment
	caFile string
	// token is the bootstrap token startReporter writes into tokenFile, the
	// agent's --join-token-file.
	token     string
	tokenFile string

	reporter *framework.Manager
}

// startSpoke starts the API server of spoke name, which joins with a new
// bootstrap token of the hub and trusts caFile; the node's DeferCleanup stops it.
func startSpoke(ctx context.Context, name, caFile string) *spoke {
	GinkgoHelper()
	env := framework.StartSuite(ctx, framework.Options{CRDs: framework.SpokeCRDs, Namespaces: []string{agentNamespace}})
	token, err := hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, "")
	Expect(err).NotTo(HaveOccurred())
	Expect(env.Client.Create(ctx, wrappers.GeneralMachine().Obj())).To(Succeed())
	return &spoke{name: name, Environment: env, caFile: caFile, token: token,
		tokenFile: filepath.Join(GinkgoT().TempDir(), "token")}
}

// startReporter runs the reporter in a manager of its own, as the agent does.
func (s *spoke) startReporter(hubAddress string) error {
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
	var err error
	s.reporter, err = s.StartManager(context.Background(), framework.ManagerOptions{Setup: func(mgr ctrl.Manager) error {
		r, err := reporter.New(reporter.Options{
			Cache:             mgr.GetCache(),
			Client:            s.Client,
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
		return mgr.Add(r)
	}})
	return err
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
	err := s.reporter.Stop()
	s.reporter = nil
	return err
}
