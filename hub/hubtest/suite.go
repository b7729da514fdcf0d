package hubtest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"k8s.io/client-go/rest"

	"github.com/imperator-federation/imperator/hub/internal/config"
	"github.com/imperator-federation/imperator/hub/internal/hubca"
	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/pki"
	"github.com/imperator-federation/imperator/test/util/framework"
)

// ServerName is the name a Suite's clients verify the hub's serving
// certificate with: its loopback address.
const ServerName = "127.0.0.1"

// StartCluster starts the hub cluster's API server (ClusterOptions) and
// creates the hub CA in namespace (framework.AgentNamespace when empty).
// On an error it has stopped what it started.
func StartCluster(ctx context.Context, namespace string) (*framework.Environment, *pki.CA, error) {
	opts, err := ClusterOptions()
	if err != nil {
		return nil, nil, err
	}
	if namespace == "" {
		namespace = framework.AgentNamespace
	}
	env, err := framework.Start(ctx, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("starting the hub cluster: %w", err)
	}
	ca, err := hubca.LoadOrCreate(ctx, env.Client, namespace, config.Default().CASecret)
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("creating the hub CA: %w", err), env.Stop())
	}
	return env, ca, nil
}

// Suite is what a hub integration suite runs against: the hub cluster, its
// CA and a hub started on it.
type Suite struct {
	Env *framework.Environment
	CA  *pki.CA
	Hub *Hub
}

// SuiteOptions are the hub's Options and, when set, a wrapper of the
// transport the hub reaches its cluster through (a suite counting the hub's
// requests).
type SuiteOptions struct {
	Hub           Options
	WrapTransport func(http.RoundTripper) http.RoundTripper
}

// StartSuite starts, from a ginkgo node (BeforeSuite, BeforeAll), the hub
// cluster, its CA and a hub of opts, and registers their stop with
// DeferCleanup, so that they stop also when the node or a later spec fails.
// A start that fails fails the node.
func StartSuite(ctx context.Context, opts SuiteOptions) *Suite {
	ginkgo.GinkgoHelper()
	env, ca, err := StartCluster(ctx, opts.Hub.Namespace)
	if env != nil {
		ginkgo.DeferCleanup(func() { gomega.Expect(env.Stop()).To(gomega.Succeed(), "stopping the hub cluster") })
	}
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	restConfig := env.Config
	if opts.WrapTransport != nil {
		restConfig = rest.CopyConfig(env.Config)
		restConfig.Wrap(opts.WrapTransport)
	}
	hub, err := Start(restConfig, opts.Hub)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "starting the hub")
	ginkgo.DeferCleanup(func() { gomega.Expect(hub.Stop()).To(gomega.Succeed(), "stopping the hub") })
	return &Suite{Env: env, CA: ca, Hub: hub}
}

// Connect opens a gRPC connection, which the caller closes, to the suite's
// hub with cert as client certificate (nil: anonymous), verifying the hub
// with the suite's CA.
func (s *Suite) Connect(cert *tls.Certificate, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	cfg, err := identity.ClientTLS(s.CA.CertPEM, cert, ServerName)
	if err != nil {
		return nil, err
	}
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}, opts...)
	return grpc.NewClient(s.Hub.Address(), opts...)
}

// Dial is Connect from a ginkgo node: the connection closes when the node
// ends; an error fails it.
func (s *Suite) Dial(cert *tls.Certificate, opts ...grpc.DialOption) *grpc.ClientConn {
	ginkgo.GinkgoHelper()
	conn, err := s.Connect(cert, opts...)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "dialing the hub")
	ginkgo.DeferCleanup(conn.Close)
	return conn
}
