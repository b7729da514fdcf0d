// Package provisioningrequest_test runs the ProvisioningRequest provider
// against a real API server (envtest) serving the ProvisioningRequest CRD
// the chart installs (deploy/spoke/provisioningrequest), alone: no Machine
// controller decides the holds, so each spec writes the status a Machine
// controller would, and checks what a Kueue user, or kubectl, sees on the
// request and its holds.
package provisioningrequest_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	"github.com/imperator-federation/imperator/internal/schemes"
	"github.com/imperator-federation/imperator/spoke/internal/controller/provisioningrequest"
	"github.com/imperator-federation/imperator/test/util/framework"
)

const namespace = "team-a"

func TestProvisioningRequestController(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "ProvisioningRequest controller")
}

var k8s client.Client

var _ = BeforeSuite(func(ctx context.Context) {
	framework.SetLogger(1)
	scheme, err := schemes.Spoke()
	Expect(err).NotTo(HaveOccurred())
	Expect(provisioningrequest.AddToScheme(scheme)).To(Succeed())
	env := framework.StartSuite(ctx, framework.Options{
		Scheme:     scheme,
		CRDs:       append([]string{"deploy/spoke/provisioningrequest"}, framework.SpokeCRDs...),
		Namespaces: []string{namespace},
		Manager: &framework.ManagerOptions{
			SetupMulticluster: func(mgr mcmanager.Manager) error {
				served, err := provisioningrequest.Served(mgr.GetLocalManager().GetConfig())
				Expect(err).NotTo(HaveOccurred())
				Expect(served).To(BeTrue(), "discovery does not show the ProvisioningRequest CRD the suite installed")
				return provisioningrequest.SetupWithManager(mgr, clock.RealClock{})
			},
		},
	})
	k8s = env.Client
}, NodeTimeout(2*time.Minute))
