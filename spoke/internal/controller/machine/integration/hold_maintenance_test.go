package machine_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// The soak's seed 303: with every node of a type in maintenance, a hold
// must not hold units that no reservation pod can hold, whatever the
// Machine's available says.
var _ = Describe("Capacity holds while every node of the type is in maintenance", func() {
	It("revokes the held unit and keeps it revoked when available is raised past what the nodes hold, until the node is ready again", func(ctx context.Context) {
		teamB := createGuestNamespace(ctx, injectionEnabled)
		createMachine(ctx, smallMachine(4))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-small")).To(Equal(4)) }).WithTimeout(60 * time.Second).Should(Succeed())
		createHold(ctx, "train", 1, time.Now().Add(10*time.Minute))
		Eventually(holdStatus(ctx, "train")).WithTimeout(30 * time.Second).Should(HaveField("Held", int32(1)))
		DeferCleanup(setNodePool, "kasumi", imperatorv1alpha1.NodePoolReady)

		By("putting kasumi, the only compute-small node, in maintenance: the held unit is revoked")
		setNodePool(ctx, "kasumi", imperatorv1alpha1.NodePoolMaintenance)
		revoked := And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", imperatorv1alpha1.HoldReasonNodeLeftPool),
			HaveField("Message", ContainSubstring("kasumi (maintenance)")))
		Eventually(holdCondition(ctx, "train", imperatorv1alpha1.HoldConditionCapacityRevoked)).WithTimeout(30 * time.Second).Should(revoked)

		By("queueing two guests, which lower the replicas, and raising available to 8, past the 4 units kasumi has")
		for _, name := range []string{"b1", "b2"} {
			Expect(k8s.Create(ctx, guest(teamB, name, "compute-small"))).To(Succeed())
		}
		setAvailable(ctx, "compute-small", 8)
		Eventually(func(g Gomega) int32 { return statefulSet(ctx, g, "compute-small").Status.Replicas }).WithTimeout(30 * time.Second).
			Should(BeNumerically(">", 4))
		Consistently(holdCondition(ctx, "train", imperatorv1alpha1.HoldConditionCapacityRevoked)).WithTimeout(8 * time.Second).Should(revoked)
		Expect(holdStatus(ctx, "train")(Default)).To(HaveField("Held", int32(0)))
		Expect(holdCondition(ctx, "train", imperatorv1alpha1.HoldConditionProvisioned)(Default)).To(HaveField("Status", metav1.ConditionFalse))
		Expect(heldUnits(ctx)(Default)).To(BeZero())

		By("bringing kasumi back: the unit is held again")
		setNodePool(ctx, "kasumi", imperatorv1alpha1.NodePoolReady)
		Eventually(holdCondition(ctx, "train", imperatorv1alpha1.HoldConditionCapacityRevoked)).WithTimeout(30 * time.Second).Should(
			HaveField("Status", metav1.ConditionFalse))
		Expect(holdStatus(ctx, "train")(Default)).To(HaveField("Held", int32(1)))
	})
})
