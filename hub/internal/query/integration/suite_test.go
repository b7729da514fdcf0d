// Package integration runs the hub's query API end to end on a real API
// server (envtest): the hub in-process (hub/hubtest) with the Query service
// and the placement score publisher, two simulated spokes that join with
// bootstrap tokens and report over mTLS like the spoke agent does, and
// imperatorctl driven as a user would, its output compared to golden files.
package integration

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/hub/internal/query"
	"github.com/imperator-federation/imperator/test/util/framework"
)

var update = flag.Bool("update", false, "Rewrite the golden files of imperatorctl's output.")

func TestQuery(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Hub query API, imperatorctl and placement scores")
}

const (
	// hubNamespace is where hubtest.ClusterOptions has the hub keep its CA
	// and tokens.
	hubNamespace = framework.AgentNamespace
	gracePeriod  = 2 * time.Second
)

var (
	hubClient client.Client
	// hubClientConfig reaches the hub cluster, for more hub replicas.
	hubClientConfig *rest.Config
	hub             *hubtest.Hub
	caPEM           []byte
	credsDir        string
	adminConf       string
	viewerConf      string
)

var _ = BeforeSuite(func(ctx context.Context) {
	framework.SetLogger(0)
	suite := hubtest.StartSuite(ctx, hubtest.SuiteOptions{Hub: hubtest.Options{Namespace: hubNamespace, GracePeriod: gracePeriod}})
	hubClient, hubClientConfig, hub, caPEM = suite.Env.Client, suite.Env.Config, suite.Hub, suite.CA.CertPEM

	// Credentials for people: certificates of the hub CA with the admin and
	// viewer organizations, and an imperatorctl configuration for each.
	ca := suite.CA
	credsDir = GinkgoT().TempDir()
	Expect(os.WriteFile(filepath.Join(credsDir, "hub-ca.crt"), ca.CertPEM, 0o600)).To(Succeed())
	for name, org := range map[string]string{"admin": query.AdminOrganization, "viewer": query.ViewerOrganization} {
		certPEM, keyPEM, err := ca.IssueClient(name, []string{org}, time.Hour)
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(filepath.Join(credsDir, name+".crt"), certPEM, 0o600)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(credsDir, name+".key"), keyPEM, 0o600)).To(Succeed())
	}
	adminConf = writeConfig("admin")
	viewerConf = writeConfig("viewer")
}, NodeTimeout(3*time.Minute))

// startHubCluster starts the hub cluster's API server and its CA
// (hubtest.StartCluster) for a benchmark, and sets hubClient,
// hubClientConfig and caPEM. stop undoes it, also after an error.
func startHubCluster(ctx context.Context) (stop func() error, err error) {
	hubCluster, ca, err := hubtest.StartCluster(ctx, hubNamespace)
	if err != nil {
		// StartCluster stopped what it had started.
		return func() error { return nil }, err
	}
	hubClient, hubClientConfig, caPEM = hubCluster.Client, hubCluster.Config, ca.CertPEM
	return hubCluster.Stop, nil
}

// writeConfig writes an imperatorctl configuration file for the hub with
// the credentials of user, with paths relative to the file.
func writeConfig(user string) string {
	path := filepath.Join(credsDir, user+".yaml")
	content := fmt.Sprintf(`current-context: test
contexts:
- name: test
  hub: %s
  certificate-authority: hub-ca.crt
  client-certificate: %s.crt
  client-key: %s.key
`, hub.Address(), user, user)
	Expect(os.WriteFile(path, []byte(content), 0o600)).To(Succeed())
	return path
}
