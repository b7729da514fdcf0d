// Package integration runs the federation end to end on real API servers
// (envtest): a hub cluster with the OCM and Imperator hub CRDs and a hub
// in-process (hub/hubtest), and two spoke clusters whose reporters join with
// bootstrap tokens and report their Machines. Expectations are read from the
// hub's in-memory index and from the hub cluster's API, as users see them.
package integration

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/test/util/wrappers"
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
	hubServer *apiServer
	hub       *hubtest.Hub
	hubAddr   string
	spokes    map[string]*spoke
)

var _ = BeforeSuite(func(ctx context.Context) {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	hubScheme, err := hubtest.Scheme()
	Expect(err).NotTo(HaveOccurred())
	hubServer, err = startAPIServer(hubScheme, "deploy/hub/crd", "deploy/hub/crd/ocm")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(hubServer.stop)

	caFile, err := hubtest.WriteCAFile(ctx, hubServer.client, agentNamespace, GinkgoT().TempDir())
	Expect(err).NotTo(HaveOccurred())
	hub, err = hubtest.Start(hubServer.config, hubtest.Options{Namespace: agentNamespace, GracePeriod: gracePeriod, PersistInterval: persistInterval})
	Expect(err).NotTo(HaveOccurred())
	hubAddr = hub.Address()
	// The restart spec replaces hub: stop whichever runs at the end.
	DeferCleanup(func() error {
		if hub == nil {
			return nil
		}
		return hub.Stop()
	})

	spokeSch, err := spokeScheme()
	Expect(err).NotTo(HaveOccurred())
	spokes = map[string]*spoke{}
	for _, name := range []string{"alpha", "beta"} {
		server, err := startAPIServer(spokeSch, "deploy/spoke/crd")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(server.stop)
		token, err := hubtest.CreateToken(ctx, hubServer.client, agentNamespace, time.Hour, "")
		Expect(err).NotTo(HaveOccurred())
		s := &spoke{name: name, apiServer: server, scheme: spokeSch, caFile: caFile, token: token,
			tokenFile: filepath.Join(GinkgoT().TempDir(), "token")}
		spokes[name] = s
		Expect(s.client.Create(ctx, wrappers.GeneralMachine().Obj())).To(Succeed())
		Expect(s.startReporter(hubAddr)).To(Succeed())
		DeferCleanup(s.stopReporter)
	}
}, NodeTimeout(3*time.Minute))
