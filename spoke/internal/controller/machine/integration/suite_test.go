// Package machine_test runs the Machine controller against a real local
// cluster (test/util/harness): the real scheduler places reservation and
// guest pods by resources, taints and affinity and preempts reservations for
// guests, the controller-manager runs the StatefulSets and garbage-collects
// what a deleted Machine owned, and kwok runs the pods on the fake GPU nodes of
// wrappers.SeedNodes. Every expectation is read back from the API server as a user would
// see it.
package machine_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/test/util/framework"
)

func TestMachineController(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Machine controller")
}

var (
	env *environment
	k8s client.Client
)

var _ = BeforeSuite(func(ctx context.Context) {
	framework.SetLogger(1)
	var err error
	env, err = startEnvironment(ctx, "machine")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(env.Stop()).To(Succeed()) })
	k8s = env.Client
}, NodeTimeout(3*time.Minute))

var _ = ReportAfterEach(func(report SpecReport) {
	if report.Failed() && env != nil && env.Cluster != nil {
		AddReportEntry("cluster logs", env.Cluster.Logs(40))
		AddReportEntry("pod events", podEvents())
	}
})
