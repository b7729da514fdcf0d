// Package podinjector_test runs the Pod Resource Injector behind a real API
// server (envtest): the MutatingWebhookConfiguration the agent applies decides
// which pods reach the webhook, a controller-runtime manager serves it, and
// every expectation is read back from the API server as a user would see it.
package podinjector_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/framework"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

func TestPodInjector(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Pod Resource Injector")
}

// Namespaces of the suite, besides the sample's team-a.
const (
	legacyNamespace   = "team-legacy"
	disabledNamespace = "team-off"
)

var (
	env *framework.Environment
	k8s client.Client
)

var _ = BeforeSuite(func(ctx context.Context) {
	var err error
	env, err = startEnvironment()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(env.Stop()).To(Succeed()) })
	k8s = env.Client

	machine := wrappers.GeneralMachine().Obj()
	Expect(k8s.Create(ctx, machine)).To(Succeed())
	// The webhook reads Machines from the manager's cache.
	Eventually(func() error {
		return env.Manager.Cache.Get(ctx, client.ObjectKeyFromObject(machine), &imperatorv1alpha1.Machine{})
	}).WithTimeout(10 * time.Second).Should(Succeed())

	// The sample's team-a Namespace, injection enabled: most specs create
	// their pods there, so it exists before any of them runs.
	sampleNamespace, _, err := loadGuestSample()
	Expect(err).NotTo(HaveOccurred())
	Expect(k8s.Create(ctx, sampleNamespace)).To(Succeed())

	enabledEverywhere := map[string]string{
		imperatorv1alpha1.InjectResourceKey:       imperatorv1alpha1.InjectResourceEnabled,
		imperatorv1alpha1.LegacyInjectResourceKey: imperatorv1alpha1.InjectResourceEnabled,
	}
	for name, labels := range map[string]map[string]string{
		legacyNamespace:   {imperatorv1alpha1.LegacyInjectResourceKey: imperatorv1alpha1.InjectResourceEnabled},
		disabledNamespace: nil,
		// The agent's own namespace, labelled as if by mistake: still excluded.
		agentNamespace: enabledEverywhere,
	} {
		Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})).To(Succeed())
	}
	// kube-system exists already; enabling injection there must not matter.
	kubeSystem := &corev1.Namespace{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, kubeSystem)).To(Succeed())
	patch := client.MergeFrom(kubeSystem.DeepCopy())
	for k, v := range enabledEverywhere {
		kubeSystem.Labels[k] = v
	}
	Expect(k8s.Patch(ctx, kubeSystem, patch)).To(Succeed())
}, NodeTimeout(2*time.Minute))
