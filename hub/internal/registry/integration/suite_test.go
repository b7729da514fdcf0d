// Package integration proves, with a real hub (hub/hubtest, the same
// assembly as the binary) on a real API server (envtest) and spokes speaking
// the real Report stream, what the hub writes on ManagedClusters: only its
// own Available condition, by server-side apply, so that conditions OCM
// wrote survive; a heartbeating cluster marked Unknown by hand is Available
// again within a heartbeat interval or two; and a spoke whose agent cannot
// reach its own API server is shown degraded, then current again.
package integration

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/hub/internal/config"
	"github.com/imperator-federation/imperator/hub/internal/hubca"
	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/pki"
	"github.com/imperator-federation/imperator/test/util/framework"
)

func TestRegistry(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Hub cluster registry: ManagedCluster conditions and freshness")
}

const (
	hubNamespace = framework.AgentNamespace
	// gracePeriod is the hub's --grace-period here: the hub looks at the
	// Available condition of every cluster it serves each gracePeriod/8.
	gracePeriod = 8 * time.Second
	// heartbeatInterval is how often the suite's spokes heartbeat.
	heartbeatInterval = time.Second
)

var (
	env       *framework.Environment
	hubClient client.Client
	hub       *hubtest.Hub
	ca        *pki.CA
)

var _ = BeforeSuite(func(ctx context.Context) {
	framework.SetLogger(0)
	hubCluster, err := hubtest.ClusterOptions()
	Expect(err).NotTo(HaveOccurred())
	env = framework.StartSuite(ctx, hubCluster)
	hubClient = env.Client
	ca, err = hubca.LoadOrCreate(ctx, hubClient, hubNamespace, config.Default().CASecret)
	Expect(err).NotTo(HaveOccurred())
	hub, err = hubtest.Start(env.Config, hubtest.Options{Namespace: hubNamespace, GracePeriod: gracePeriod, PersistInterval: 200 * time.Millisecond})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() error { return hub.Stop() })
}, NodeTimeout(2*time.Minute))

// dial connects to the hub with cert as client certificate (nil: anonymous).
func dial(cert *tls.Certificate) *grpc.ClientConn {
	GinkgoHelper()
	cfg, err := identity.ClientTLS(ca.CertPEM, cert, "127.0.0.1")
	Expect(err).NotTo(HaveOccurred())
	conn, err := grpc.NewClient(hub.Address(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(conn.Close)
	return conn
}
