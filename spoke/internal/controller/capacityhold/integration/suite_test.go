// Package capacityhold_test runs the capacityhold Controller against a real
// API server (envtest), alone: no Machine controller decides the holds, so
// each spec writes the status a Machine controller would, and checks what a
// user sees with kubectl: that a hold whose booking ended is deleted once
// the retention has passed, not before, and that a live hold is kept.
package capacityhold_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	"github.com/imperator-federation/imperator/spoke/internal/controller/capacityhold"
	"github.com/imperator-federation/imperator/test/util/framework"
)

// retention is the suite's --hold-retention: short, so that the specs see
// the deletions, and long enough to see that a hold is kept until then.
const retention = 4 * time.Second

func TestCapacityHoldController(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "CapacityHold controller")
}

var k8s client.Client

var _ = BeforeSuite(func(ctx context.Context) {
	framework.SetLogger(1)
	env := framework.StartSuite(ctx, framework.Options{CRDs: framework.SpokeCRDs, Manager: &framework.ManagerOptions{
		SetupMulticluster: func(mgr mcmanager.Manager) error {
			return capacityhold.SetupWithManager(mgr, capacityhold.WithRetention(retention))
		},
	}})
	k8s = env.Client
}, NodeTimeout(2*time.Minute))
