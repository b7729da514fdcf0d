// Package provisioningrequest_test runs the ProvisioningRequest provider
// against a real API server (envtest), which serves the ProvisioningRequest
// CRD the chart installs (deploy/spoke/provisioningrequest) from the first
// spec on, installed after the agent started, until the last removes it;
// the provider alone: no Machine
// controller decides the holds, so each spec writes the status a Machine
// controller would, and checks what a Kueue user, or kubectl, sees on the
// request and its holds.
package provisioningrequest_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/internal/schemes"
	"github.com/imperator-federation/imperator/spoke/internal/controller/provisioningrequest"
	"github.com/imperator-federation/imperator/test/util/framework"
	"github.com/imperator-federation/imperator/test/util/repo"
)

// Namespaces of the suite: team-a and team-c are opted in to injection,
// team-b is not; the agent caps every namespace at maxUnits.
const (
	namespace   = "team-a"
	notInjected = "team-b"
	capped      = "team-c"
	maxUnits    = 6
)

func TestProvisioningRequestController(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "ProvisioningRequest controller")
}

var (
	k8s    client.Client
	env    *framework.Environment
	server *provisioningrequest.Server
	// prCRD installs (and uninstalls) the ProvisioningRequest CRD.
	prCRD envtest.CRDInstallOptions
)

var _ = BeforeSuite(func(ctx context.Context) {
	framework.SetLogger(1)
	scheme, err := schemes.Spoke()
	Expect(err).NotTo(HaveOccurred())
	Expect(provisioningrequest.AddToScheme(scheme)).To(Succeed())
	root, err := repo.Root()
	Expect(err).NotTo(HaveOccurred())
	prCRD = envtest.CRDInstallOptions{Paths: []string{filepath.Join(root, "deploy/spoke/provisioningrequest")}, ErrorIfPathMissing: true}
	// The ProvisioningRequest CRD is installed by the first spec, after
	// the agent started.
	env = framework.StartSuite(ctx, framework.Options{
		Scheme:     scheme,
		CRDs:       framework.SpokeCRDs,
		Namespaces: []string{namespace, notInjected, capped},
		Manager: &framework.ManagerOptions{
			SetupMulticluster: func(mgr mcmanager.Manager) error {
				var err error
				server, err = provisioningrequest.NewServer(mgr, provisioningrequest.Options{Clock: clock.RealClock{},
					AgentNamespace: "imperator-system", MaxUnitsPerNamespace: maxUnits, RecheckInterval: 300 * time.Millisecond})
				if err != nil {
					return err
				}
				return mgr.Add(server)
			},
		},
	})
	k8s = env.Client
	for _, name := range []string{namespace, capped} {
		ns := &corev1.Namespace{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, ns)).To(Succeed())
		ns.Labels[imperatorv1alpha1.InjectResourceKey] = imperatorv1alpha1.InjectResourceEnabled
		Expect(k8s.Update(ctx, ns)).To(Succeed())
	}
}, NodeTimeout(2*time.Minute))

// servingLocal tells whether the provider serves the local cluster.
func servingLocal() bool { return server.Serving("") }
