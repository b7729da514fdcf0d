// Package nodepool_test runs the node-pool controllers against a real API
// server (envtest) and checks, on the Nodes and MachineNodePools a user would
// look at, that the listed nodes carry exactly the pool's labels, annotation
// and taints, that everything else on them is left alone, and that nothing is
// rewritten at steady state.
package nodepool_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/test/util/framework"
)

func TestNodePool(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Node-pool controller")
}

var (
	env *framework.Environment
	k8s client.Client
)

var _ = BeforeSuite(func(ctx context.Context) {
	env = framework.StartSuite(ctx, environment("nodepool", false))
	k8s = env.Client
}, NodeTimeout(2*time.Minute))
