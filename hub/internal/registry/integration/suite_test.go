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
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/hub/hubtest"
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
	suite     *hubtest.Suite
)

var _ = BeforeSuite(func(ctx context.Context) {
	framework.SetLogger(0)
	suite = hubtest.StartSuite(ctx, hubtest.SuiteOptions{Hub: hubtest.Options{
		Namespace: hubNamespace, GracePeriod: gracePeriod, PersistInterval: 200 * time.Millisecond,
	}})
	env, hubClient, hub, ca = suite.Env, suite.Env.Client, suite.Hub, suite.CA
}, NodeTimeout(2*time.Minute))

// dial connects to the hub with cert as client certificate (nil: anonymous).
func dial(cert *tls.Certificate) *grpc.ClientConn {
	GinkgoHelper()
	return suite.Dial(cert)
}
