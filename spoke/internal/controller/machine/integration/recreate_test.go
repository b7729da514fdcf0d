package machine_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

var _ = Describe("A Machine deleted and created again", func() {
	It("lets its first guest in as fast as the next ones, once the reservations are back", func(ctx context.Context) {
		guests := createGuestNamespace(ctx, injectionEnabled)
		createMachine(ctx, smallMachine(4))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-small")).To(Equal(4)) }).WithTimeout(60 * time.Second).Should(Succeed())

		By("deleting the Machine and its node, and creating both again at once")
		Expect(k8s.Delete(ctx, smallMachine(4))).To(Succeed())
		Expect(env.Cluster.DeleteNode(ctx, "kasumi")).To(Succeed())
		again := smallMachine(4)
		Expect(k8s.Create(ctx, again)).To(Succeed())
		Expect(env.Cluster.AddNode(ctx, poolNode("kasumi"))).To(Succeed())
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-small")).To(Equal(4)) }).WithTimeout(60 * time.Second).Should(Succeed())
		Eventually(condition(ctx, machineName, imperatorv1alpha1.ConditionReady)).WithTimeout(10 * time.Second).
			Should(HaveField("Status", metav1.ConditionTrue))
		By("the new Machine controls the reservation StatefulSet, alone")
		Expect(statefulSet(ctx, Default, "compute-small").OwnerReferences).To(ConsistOf(
			And(HaveField("UID", again.UID), HaveField("Controller", HaveValue(BeTrue())))))

		By("creating one guest: it runs within a few seconds, not after the 30 s a stuck reservation pod takes")
		start := time.Now()
		Expect(k8s.Create(ctx, guest(guests, "first", "compute-small"))).To(Succeed())
		Eventually(gateOpen(ctx, guests, "first")).WithTimeout(60 * time.Second).WithPolling(10 * time.Millisecond).Should(BeTrue())
		waited := time.Since(start)
		GinkgoWriter.Printf("the first guest waited %s at the gate\n", waited)
		Expect(waited).To(BeNumerically("<", 5*time.Second), "the first guest waited at the gate")
		Eventually(podStates(ctx, guests)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"first": "Running"}))
	})
})

// gateOpen tells whether a guest is past the slot gate.
func gateOpen(ctx context.Context, namespace, name string) func(Gomega) bool {
	return func(g Gomega) bool {
		pod := &corev1.Pod{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod)).To(Succeed())
		for _, gate := range pod.Spec.SchedulingGates {
			if gate.Name == imperatorv1alpha1.SlotSchedulingGate {
				return false
			}
		}
		return true
	}
}
