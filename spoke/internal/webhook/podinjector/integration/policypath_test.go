package podinjector_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/admissionpolicy"
	"github.com/imperator-federation/imperator/test/util/framework"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// startPolicyPath starts an API server that injects guests by the
// injection policies alone (no webhook): the given namespaces opted in,
// general-machine created, the agent's bindings written once; it returns
// when a guest of the first namespace is injected. The environment stops
// when the suite's node ends.
func startPolicyPath(ctx context.Context, namespaces ...string) (*framework.Environment, kubernetes.Interface) {
	GinkgoHelper()
	env, err := framework.Start(ctx, framework.Options{CRDs: framework.SpokeCRDs})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(env.Stop()).To(Succeed()) })
	clientset, err := kubernetes.NewForConfig(env.Config)
	Expect(err).NotTo(HaveOccurred())
	for _, name := range namespaces {
		Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{imperatorv1alpha1.InjectResourceKey: imperatorv1alpha1.InjectResourceEnabled}}})).To(Succeed())
	}
	Expect(env.Client.Create(ctx, wrappers.GeneralMachine().Obj())).To(Succeed())
	Expect(installInjectionPolicies(ctx, env.Client)).To(Succeed())
	_, err = (&admissionpolicy.Reconciler{Client: env.Client, Enabled: true}).Reconcile(ctx, reconcile.Request{})
	Expect(err).NotTo(HaveOccurred())
	Eventually(func(g Gomega) {
		pod := guestOf(namespaces[0], "probe", "compute-xlarge", "main")
		g.Expect(env.Client.Create(ctx, pod, client.DryRunAll)).To(Succeed())
		g.Expect(pod.Annotations).To(HaveKey(imperatorv1alpha1.InjectedAnnotation))
	}).WithContext(ctx).WithTimeout(60 * time.Second).Should(Succeed())
	return env, clientset
}

// startFirstSight runs the first-sight stamper on env as the agent would,
// until the returned stop is called.
func startFirstSight(env *framework.Environment, clientset kubernetes.Interface) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&admissionpolicy.FirstSight{Clientset: clientset, Client: env.Client}).Start(ctx)
	}()
	return func() {
		cancel()
		Expect(<-done).To(Succeed())
	}
}
