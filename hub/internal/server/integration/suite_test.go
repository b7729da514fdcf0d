// Package integration is the hub's abuse suite: a real hub (hub/hubtest, the
// same assembly as the binary) on a real API server (envtest), attacked as
// an outside client would — anonymous floods, oversized and malformed
// requests, idle connections, certificates that were deregistered, retired,
// replaced or revoked — while a real spoke and a viewer keep being served.
package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/hub/internal/config"
	"github.com/imperator-federation/imperator/internal/pki"
	"github.com/imperator-federation/imperator/test/util/framework"
)

func TestAbuse(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Hub trust boundary: abuse suite")
}

const (
	hubNamespace = framework.AgentNamespace
	// anonymousIdle is the hub's --anonymous-connection-idle here, short so
	// that the suite sees idle connections closed.
	anonymousIdle = 2 * time.Second
	// renewalOverlap is the hub's --renewal-overlap here.
	renewalOverlap = 5 * time.Second
	// maxAnonymous lets the 300 idle connections of the suite all open.
	maxAnonymous = 512
	// connectionAge and connectionAgeGrace are the hub's
	// --max-connection-age and --max-connection-age-grace here.
	connectionAge      = 3 * time.Second
	connectionAgeGrace = time.Second
)

var (
	env        *framework.Environment
	hubClient  client.Client
	hub        *hubtest.Hub
	ca         *pki.CA
	suite      *hubtest.Suite
	serverName = hubtest.ServerName
	// apiReads counts the hub's reads of ManagedClusters and bootstrap
	// token Secrets by name: what a Join reads.
	apiReads atomic.Int64
)

// joinReadPath matches a GET of one ManagedCluster or one bootstrap token
// Secret.
var joinReadPath = regexp.MustCompile(`/managedclusters/[^/]+$|/secrets/imperator-bootstrap-token-[^/]+$`)

// countingTransport counts the hub's Join-shaped reads.
type countingTransport struct{ next http.RoundTripper }

func (c countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && joinReadPath.MatchString(req.URL.Path) {
		apiReads.Add(1)
	}
	resp, err := c.next.RoundTrip(req)
	return laggingWatch(req, resp), err
}

var _ = BeforeSuite(func(ctx context.Context) {
	framework.SetLogger(0)
	suite = hubtest.StartSuite(ctx, hubtest.SuiteOptions{
		Hub: hubtest.Options{
			Namespace:   hubNamespace,
			GracePeriod: 10 * time.Second,
			Configure: func(c *config.Config) {
				c.Limits.AnonymousIdleTimeout = anonymousIdle
				c.Limits.MaxAnonymousConnections = maxAnonymous
				c.RenewalOverlap = renewalOverlap
				c.RevocationsRefresh = 200 * time.Millisecond
				c.Limits.MaxConnectionAge = connectionAge
				c.Limits.MaxConnectionAgeGrace = connectionAgeGrace
			},
		},
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper { return countingTransport{next: rt} },
	})
	env, hubClient, hub, ca = suite.Env, suite.Env.Client, suite.Hub, suite.CA
}, NodeTimeout(2*time.Minute))

// dialFrom connects to the hub from the loopback address source (each
// 127.0.0.0/8 address is a source of its own to the hub's per-source
// limits), with cert as client certificate (nil: anonymous).
func dialFrom(source string, cert *tls.Certificate) *grpc.ClientConn {
	GinkgoHelper()
	return suite.Dial(cert, fromSource(source))
}

// dialOnce is dialFrom for a connection the caller closes.
func dialOnce(source string, cert *tls.Certificate) *grpc.ClientConn {
	GinkgoHelper()
	conn, err := suite.Connect(cert, fromSource(source))
	Expect(err).NotTo(HaveOccurred())
	return conn
}

// fromSource dials from the loopback address source.
func fromSource(source string) grpc.DialOption {
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}
		return d.DialContext(ctx, "tcp", addr)
	})
}

// sources hands out loopback source addresses, a fresh one per call, so
// that specs do not share a per-source Join budget.
var nextSource atomic.Int64

func newSource() string {
	n := nextSource.Add(1)
	return fmt.Sprintf("127.0.%d.%d", 1+n/250, 1+n%250)
}
