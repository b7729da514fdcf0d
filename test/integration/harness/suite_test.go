// Package harness_test proves the local test environment is a real one: the
// scheduler places pods by resources, taints and labels, kwok runs them and
// honours termination grace periods, and several clusters run side by side.
package harness_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/imperator-federation/imperator/test/util/harness"
)

func TestHarness(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Local cluster harness")
}

// clusters are started once for the suite: the first runs the workloads, the
// other two prove that clusters start and stay separate side by side.
var clusters []*harness.Cluster

var _ = BeforeSuite(func(ctx context.Context) {
	var err error
	clusters, err = harness.StartN(ctx, "smoke-a", "smoke-b", "smoke-c")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		for _, c := range clusters {
			Expect(c.Stop()).To(Succeed())
		}
	})
}, NodeTimeout(3*time.Minute))

var _ = ReportAfterEach(func(report SpecReport) {
	if report.Failed() {
		for _, c := range clusters {
			AddReportEntry("logs of "+c.Name, c.Logs(40))
		}
	}
})
