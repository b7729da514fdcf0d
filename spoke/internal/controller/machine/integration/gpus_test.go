package machine_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// replaceNode puts node in place of the node of its name, as a node that
// rebooted with other allocatable resources.
func replaceNode(ctx context.Context, node *corev1.Node) {
	GinkgoHelper()
	Expect(env.Cluster.DeleteNode(ctx, node.Name)).To(Succeed())
	Eventually(func() error { return env.Cluster.AddNode(ctx, node) }).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
}

var _ = Describe("A pool node that advertises no GPUs", func() {
	It("is named in InsufficientCapacity and a Warning event while its type's reservations cannot be scheduled", func(ctx context.Context) {
		By("michiru in the pool and ready, without its nvidia.com/gpu (no driver or device plugin there)")
		bare := poolNode("michiru")
		delete(bare.Status.Allocatable, "nvidia.com/gpu")
		delete(bare.Status.Capacity, "nvidia.com/gpu")
		replaceNode(ctx, bare)
		DeferCleanup(func(ctx context.Context) { replaceNode(ctx, poolNode("michiru")) })
		createMachine(ctx, wrappers.GeneralMachine().Obj())

		Eventually(condition(ctx, machineName, imperatorv1alpha1.ConditionInsufficientCapacity)).WithTimeout(60 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionTrue),
			HaveField("Reason", imperatorv1alpha1.ReasonPoolNodesWithoutGPUs),
			HaveField("Message", ContainSubstring("compute-xlarge: ready pool nodes advertise 0 nvidia.com/gpu, so its reservation pods cannot be scheduled there: michiru")),
			// The other problems are still told.
			HaveField("Message", ContainSubstring("compute-xlarge: 1 of 1 reservation pods cannot be scheduled"))))
		Eventually(func(g Gomega) []string {
			return eventsAbout(ctx, g, machineName, imperatorv1alpha1.ReasonPoolNodesWithoutGPUs)
		}).WithTimeout(10 * time.Second).Should(ContainElement(ContainSubstring("michiru")))
		Expect(condition(ctx, machineName, imperatorv1alpha1.ConditionInsufficientCapacity)(Default).Message).NotTo(ContainSubstring("eriri"),
			"compute-medium's nodes advertise their GPUs")

		By("the GPUs back: the reservation is scheduled and no node is named any more")
		replaceNode(ctx, poolNode("michiru"))
		Eventually(usage(ctx, machineName)).WithTimeout(60 * time.Second).Should(HaveKeyWithValue("compute-xlarge", u(1, 1, 0, 0)))
		Eventually(condition(ctx, machineName, imperatorv1alpha1.ConditionInsufficientCapacity)).WithTimeout(30 * time.Second).Should(And(
			HaveField("Reason", imperatorv1alpha1.ReasonNoNodePool),
			HaveField("Message", Not(ContainSubstring("michiru")))))
	})
})
