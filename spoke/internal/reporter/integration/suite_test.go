// Package integration runs the federation end to end on real API servers
// (envtest): a hub cluster with the OCM and Imperator hub CRDs and a hub
// in-process (hub/hubtest), and two spoke clusters whose reporters join with
// bootstrap tokens and report their Machines. Expectations are read from the
// hub's in-memory index and from the hub cluster's API, as users see them.
package integration

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/test/util/framework"
)

func TestFederation(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Federation: hub ingest and spoke reporter")
}

// Timing of the suite's hub: short so that liveness is observable quickly.
const (
	gracePeriod     = 2 * time.Second
	persistInterval = 300 * time.Millisecond
)

var (
	hubServer *framework.Environment
	hub       *hubtest.Hub
	hubAddr   string
	spokes    map[string]*spoke
)

var _ = BeforeSuite(func(ctx context.Context) {
	framework.SetLogger(0)
	hubCluster, err := hubtest.ClusterOptions()
	Expect(err).NotTo(HaveOccurred())
	hubServer = framework.StartSuite(ctx, hubCluster)

	caFile, err := hubtest.WriteCAFile(ctx, hubServer.Client, agentNamespace, GinkgoT().TempDir())
	Expect(err).NotTo(HaveOccurred())
	hub, err = hubtest.Start(hubServer.Config, hubtest.Options{Namespace: agentNamespace, GracePeriod: gracePeriod, PersistInterval: persistInterval})
	Expect(err).NotTo(HaveOccurred())
	hubAddr = hub.Address()
	// The restart spec replaces hub: stop whichever runs at the end.
	DeferCleanup(func() error {
		if hub == nil {
			return nil
		}
		return hub.Stop()
	})

	spokes = map[string]*spoke{}
	for _, name := range []string{"alpha", "beta"} {
		s := startSpoke(ctx, name, caFile)
		spokes[name] = s
		Expect(s.startReporter(hubAddr)).To(Succeed())
		DeferCleanup(s.stopReporter)
	}
}, NodeTimeout(3*time.Minute))
