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
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// This suite runs no Machine validator, which refuses a second Machine of a
// group: creating one here is what two admissions racing past the
// validator would leave behind.
var _ = Describe("Two Machines of one group", func() {
	It("lets guests through only by the Machine that owns the group's reservations; the other reports ReservationConflict and takes over once the first is deleted", func(ctx context.Context) {
		guests := createGuestNamespace(ctx, injectionEnabled)
		// gateStates maps each guest to Running, SchedulingGated or its phase.
		gateStates := podStates(ctx, guests)
		// controllerOf names the Machine controlling compute-small's
		// reservation StatefulSet.
		controllerOf := func(g Gomega) string {
			ref := metav1.GetControllerOf(statefulSet(ctx, g, "compute-small"))
			g.Expect(ref).NotTo(BeNil(), "the reservation StatefulSet has no controller")
			return ref.Name
		}

		By("general-machine offering 1 compute-small on kasumi, a node with room for 4")
		createMachine(ctx, smallMachine(1))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-small")).To(Equal(1)) }).WithTimeout(60 * time.Second).Should(Succeed())
		Eventually(condition(ctx, machineName, imperatorv1alpha1.ConditionReady)).WithTimeout(10 * time.Second).
			Should(HaveField("Status", metav1.ConditionTrue))

		By("a second Machine of the same group offering 3 compute-small on the same node")
		const second = "general-machine-too"
		secondMachine := wrappers.MakeMachine(second, group).Type("compute-small", "2", "8Gi", 3).Node("kasumi", "compute-small").Obj()
		Expect(k8s.Create(ctx, secondMachine)).To(Succeed())
		// Deleted before general-machine's cleanup, which waits until the
		// group's reservations are gone.
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, secondMachine))).To(Succeed())
		})
		Eventually(condition(ctx, second, imperatorv1alpha1.ConditionReady)).WithTimeout(30 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", imperatorv1alpha1.ReasonReservationConflict),
			HaveField("Message", ContainSubstring("is not controlled by Machine "+second)),
		))
		Expect(controllerOf(Default)).To(Equal(machineName))
		Expect(condition(ctx, machineName, imperatorv1alpha1.ConditionReady)(Default)).To(HaveField("Status", metav1.ConditionTrue))

		By("three guests: exactly general-machine's 1 runs, though the second Machine offers 3 and the node has room")
		for _, name := range []string{"a", "b", "c"} {
			Expect(k8s.Create(ctx, guest(guests, name, "compute-small"))).To(Succeed())
		}
		want := map[string]string{"a": "Running", "b": "SchedulingGated", "c": "SchedulingGated"}
		Eventually(gateStates).WithTimeout(30 * time.Second).Should(Equal(want))
		Consistently(gateStates).WithTimeout(5 * time.Second).Should(Equal(want))
		for _, name := range []string{"b", "c"} {
			Expect(podEventNotes(ctx, Default, guests, name, "SlotGranted")).To(BeEmpty(), "guest %s", name)
		}
		Expect(controllerOf(Default)).To(Equal(machineName))
		Expect(condition(ctx, second, imperatorv1alpha1.ConditionReady)(Default)).To(HaveField("Reason", imperatorv1alpha1.ReasonReservationConflict))

		By("deleting general-machine: the second Machine takes the reservations over and lets guests through up to its 3")
		Expect(k8s.Delete(ctx, &imperatorv1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: machineName}})).To(Succeed())
		Eventually(controllerOf).WithTimeout(60 * time.Second).Should(Equal(second))
		Eventually(condition(ctx, second, imperatorv1alpha1.ConditionReady)).WithTimeout(30 * time.Second).
			Should(HaveField("Status", metav1.ConditionTrue))
		Eventually(gateStates).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"a": "Running", "b": "Running", "c": "Running"}))
		Eventually(usage(ctx, second)).WithTimeout(30 * time.Second).Should(HaveKeyWithValue("compute-small", u(3, 0, 3, 0)))
		for _, name := range []string{"b", "c"} {
			Expect(podEventNotes(ctx, Default, guests, name, "FailedScheduling")).To(BeEmpty(), "guest %s", name)
		}
		pod := &corev1.Pod{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: guests, Name: "c"}, pod)).To(Succeed())
		Expect(pod.Spec.SchedulingGates).To(BeEmpty())
	})
})
