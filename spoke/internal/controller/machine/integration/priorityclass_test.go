package machine_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	gomegatypes "github.com/onsi/gomega/types"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/fleet"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// reservationClass is the PriorityClass the agent runs reservation pods at.
const reservationClass = "imperator-reservation"

var _ = Describe("Reservation PriorityClass", func() {
	DescribeTable("holds every reservation at 0 while a PriorityClass of its name is not the one deploy/spoke ships, and restores them once the shipped one replaces it",
		func(ctx context.Context, wrong *schedulingv1.PriorityClass, wantDifferences []string) {
			By("replacing the reservation PriorityClass with a wrong one before the Machine exists")
			replaceReservationClass(ctx, wrong)

			m := wrappers.GeneralMachine().Available("compute-xlarge", 2).Obj()
			createMachine(ctx, m)
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())

			By("saying on the Machine what is wrong and how to fix it")
			messageParts := []gomegatypes.GomegaMatcher{
				ContainSubstring("PriorityClass imperator-reservation is not the one reservations need"),
				ContainSubstring("every reservation is scaled to 0"),
				ContainSubstring("kubectl delete priorityclass imperator-reservation"),
				ContainSubstring("kubectl apply -k deploy/spoke"),
			}
			for _, d := range wantDifferences {
				messageParts = append(messageParts, ContainSubstring(d))
			}
			Eventually(condition(ctx, machineName, imperatorv1alpha1.ConditionReady)).WithTimeout(30 * time.Second).Should(And(
				HaveField("Status", metav1.ConditionFalse),
				HaveField("Reason", imperatorv1alpha1.ReasonReservationPriorityClassMismatch),
				HaveField("Message", And(messageParts...))))
			Eventually(func(g Gomega) []eventsv1.Event {
				return machineEvents(ctx, g, m.UID, imperatorv1alpha1.ReasonReservationPriorityClassMismatch)
			}).WithTimeout(10 * time.Second).Should(ConsistOf(And(
				HaveField("Type", corev1.EventTypeWarning),
				HaveField("Note", ContainSubstring(wantDifferences[0])))))

			By("keeping the reservation StatefulSets at 0 replicas, with no pod, and the class untouched")
			heldBack := func(g Gomega) {
				expectReservationsAt(ctx, g, 0)
				pc := &schedulingv1.PriorityClass{}
				g.Expect(k8s.Get(ctx, client.ObjectKey{Name: reservationClass}, pc)).To(Succeed())
				g.Expect(pc.UID).To(Equal(wrong.UID))
				g.Expect(pc.ResourceVersion).To(Equal(wrong.ResourceVersion))
			}
			Eventually(heldBack).WithTimeout(30 * time.Second).Should(Succeed())
			Eventually(usage(ctx, machineName)).WithTimeout(10 * time.Second).Should(And(
				HaveKeyWithValue("compute-xlarge", u(2, 0, 0, 0)),
				HaveKeyWithValue("compute-medium", u(4, 0, 0, 0))))
			Consistently(heldBack).WithTimeout(3 * time.Second).Should(Succeed())

			By("leaving the class to the operator: once the wrong one is deleted, none comes back by itself and nothing is reserved")
			Expect(k8s.Delete(ctx, wrong)).To(Succeed())
			Eventually(condition(ctx, machineName, imperatorv1alpha1.ConditionReady)).WithTimeout(10 * time.Second).Should(And(
				HaveField("Status", metav1.ConditionFalse),
				HaveField("Reason", imperatorv1alpha1.ReasonReservationPriorityClassMissing),
				HaveField("Message", And(
					ContainSubstring("PriorityClass imperator-reservation does not exist"),
					ContainSubstring("kubectl apply -k deploy/spoke")))))
			Consistently(func(g Gomega) {
				expectReservationsAt(ctx, g, 0)
				g.Expect(isNotFound(k8s.Get(ctx, client.ObjectKey{Name: reservationClass}, &schedulingv1.PriorityClass{}))).To(BeTrue(),
					"a PriorityClass %s appeared: the agent may only read it", reservationClass)
			}).WithTimeout(3 * time.Second).Should(Succeed())

			By("clearing the condition and running the reservations again, at priority 0 and never preempting, once deploy/spoke's class is applied")
			Expect(fleet.InstallReservationPriorityClass(ctx, env.Cluster)).To(Succeed())
			expectReservationsRestored(ctx, m.UID, map[string]int{"compute-xlarge": 2, "compute-medium": 4})
			Eventually(usage(ctx, machineName)).WithTimeout(10 * time.Second).Should(And(
				HaveKeyWithValue("compute-xlarge", u(2, 2, 0, 0)),
				HaveKeyWithValue("compute-medium", u(4, 4, 0, 0))))
		},
		Entry("a higher value that preempts",
			&schedulingv1.PriorityClass{Value: 1000, PreemptionPolicy: ptr.To(corev1.PreemptLowerPriority)},
			[]string{"value is 1000, want 0", "preemptionPolicy is PreemptLowerPriority, want Never"}),
		Entry("the right value and policy, but the cluster's global default",
			&schedulingv1.PriorityClass{Value: 0, PreemptionPolicy: ptr.To(corev1.PreemptNever), GlobalDefault: true},
			[]string{"globalDefault is true, want false"}),
	)

	It("keeps the reservations that run but adds none while the class is missing, and adds them once deploy/spoke's class is applied", func(ctx context.Context) {
		m := wrappers.GeneralMachine().Available("compute-medium", 2).Obj()
		createMachine(ctx, m)
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(runningReservations(ctx, g, "compute-medium")).To(Equal(2))
			g.Expect(runningReservations(ctx, g, "compute-xlarge")).To(Equal(1))
		}).WithTimeout(60 * time.Second).Should(Succeed())

		By("deleting the class, as a careless cleanup would")
		deleteReservationClass(ctx)
		Eventually(condition(ctx, machineName, imperatorv1alpha1.ConditionReady)).WithTimeout(10 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", imperatorv1alpha1.ReasonReservationPriorityClassMissing),
			HaveField("Message", And(
				ContainSubstring("PriorityClass imperator-reservation does not exist"),
				ContainSubstring("reservations are kept as they are and none is added"),
				ContainSubstring("kubectl apply -k deploy/spoke")))))
		Eventually(func(g Gomega) []eventsv1.Event {
			return machineEvents(ctx, g, m.UID, imperatorv1alpha1.ReasonReservationPriorityClassMissing)
		}).WithTimeout(10 * time.Second).Should(ConsistOf(And(
			HaveField("Type", corev1.EventTypeWarning),
			HaveField("Note", ContainSubstring("PriorityClass imperator-reservation does not exist")))))

		By("keeping the reservation pods that run, at their priority")
		Consistently(func(g Gomega) {
			g.Expect(runningReservations(ctx, g, "compute-medium")).To(Equal(2))
			g.Expect(runningReservations(ctx, g, "compute-xlarge")).To(Equal(1))
			g.Expect(isNotFound(k8s.Get(ctx, client.ObjectKey{Name: reservationClass}, &schedulingv1.PriorityClass{}))).To(BeTrue(),
				"a PriorityClass %s appeared: the agent may only read it", reservationClass)
		}).WithTimeout(3 * time.Second).Should(Succeed())

		By("still scaling down when available shrinks")
		Expect(k8s.Patch(ctx, wrappers.GeneralMachine().Available("compute-medium", 1).Obj(), client.Merge)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(statefulSet(ctx, g, "compute-medium").Spec.Replicas).To(HaveValue(BeEquivalentTo(1)))
			g.Expect(reservationPods(ctx, g, "compute-medium")).To(HaveLen(1))
		}).WithTimeout(30 * time.Second).Should(Succeed())

		By("adding no reservation pod when available grows: the API server would refuse it")
		Expect(k8s.Patch(ctx, wrappers.GeneralMachine().Available("compute-medium", 4).Obj(), client.Merge)).To(Succeed())
		Eventually(condition(ctx, machineName, imperatorv1alpha1.ConditionReady)).WithTimeout(10 * time.Second).
			Should(HaveField("Reason", imperatorv1alpha1.ReasonReservationPriorityClassMissing))
		Consistently(func(g Gomega) {
			g.Expect(statefulSet(ctx, g, "compute-medium").Spec.Replicas).To(HaveValue(BeEquivalentTo(1)))
			g.Expect(reservationPods(ctx, g, "compute-medium")).To(HaveLen(1))
		}).WithTimeout(3 * time.Second).Should(Succeed())
		Eventually(usage(ctx, machineName)).WithTimeout(10 * time.Second).Should(HaveKeyWithValue("compute-medium", u(4, 1, 0, 0)))

		By("reserving everything available, at once, once deploy/spoke's class is applied")
		Expect(fleet.InstallReservationPriorityClass(ctx, env.Cluster)).To(Succeed())
		expectReservationsRestored(ctx, m.UID, map[string]int{"compute-xlarge": 1, "compute-medium": 4})
		Eventually(usage(ctx, machineName)).WithTimeout(10 * time.Second).Should(And(
			HaveKeyWithValue("compute-xlarge", u(1, 1, 0, 0)),
			HaveKeyWithValue("compute-medium", u(4, 4, 0, 0))))
	})
})

// expectReservationsAt expects every reservation StatefulSet of the
// Machine's served types at replicas, with no more pods than that.
func expectReservationsAt(ctx context.Context, g Gomega, replicas int32) {
	for _, machineType := range []string{"compute-xlarge", "compute-medium"} {
		g.Expect(statefulSet(ctx, g, machineType).Spec.Replicas).To(HaveValue(Equal(replicas)), machineType)
		g.Expect(len(reservationPods(ctx, g, machineType))).To(BeNumerically("<=", replicas), machineType)
	}
}

// expectReservationsRestored waits until the Machine with uid is Ready again,
// with the Normal event that says the class is in place, and want reservation
// pods of each type run at priority 0, never preempting.
func expectReservationsRestored(ctx context.Context, uid types.UID, want map[string]int) {
	GinkgoHelper()
	Eventually(condition(ctx, machineName, imperatorv1alpha1.ConditionReady)).WithTimeout(10 * time.Second).Should(And(
		HaveField("Status", metav1.ConditionTrue),
		HaveField("Reason", imperatorv1alpha1.ReasonReservationsReconciled)))
	Eventually(func(g Gomega) {
		for machineType, n := range want {
			pods := reservationPods(ctx, g, machineType)
			g.Expect(pods).To(HaveLen(n), machineType)
			for _, p := range pods {
				g.Expect(running(&p)).To(BeTrue(), "pod %s is %s", p.Name, p.Status.Phase)
				g.Expect(p.Spec.Priority).To(HaveValue(BeZero()), "pod %s", p.Name)
				g.Expect(p.Spec.PreemptionPolicy).To(HaveValue(Equal(corev1.PreemptNever)), "pod %s", p.Name)
			}
		}
	}).WithTimeout(30 * time.Second).Should(Succeed())
	Eventually(func(g Gomega) []eventsv1.Event {
		return machineEvents(ctx, g, uid, imperatorv1alpha1.ReasonReservationsReconciled)
	}).WithTimeout(10 * time.Second).Should(ContainElement(And(
		HaveField("Type", corev1.EventTypeNormal),
		HaveField("Note", HavePrefix("PriorityClass imperator-reservation is in place again")))))
}

// deleteReservationClass deletes the reservation PriorityClass and waits
// until it is gone. After the spec (DeferCleanup running last in first out,
// so after the Machine is gone), whatever has its name is replaced by the
// one deploy/spoke ships, for the next spec.
func deleteReservationClass(ctx context.Context) {
	GinkgoHelper()
	DeferCleanup(restoreReservationClass)
	Expect(client.IgnoreNotFound(k8s.Delete(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: reservationClass}}))).To(Succeed())
	Eventually(func() bool {
		return isNotFound(k8s.Get(ctx, client.ObjectKey{Name: reservationClass}, &schedulingv1.PriorityClass{}))
	}).WithContext(ctx).WithTimeout(10 * time.Second).Should(BeTrue())
}

// replaceReservationClass deletes the reservation PriorityClass and creates
// wrong under its name instead; deleteReservationClass puts the shipped one
// back after the spec.
func replaceReservationClass(ctx context.Context, wrong *schedulingv1.PriorityClass) {
	GinkgoHelper()
	deleteReservationClass(ctx)
	wrong.Name = reservationClass
	wrong.Description = "made by someone else"
	Expect(k8s.Create(ctx, wrong)).To(Succeed())
}

// restoreReservationClass deletes a reservation PriorityClass that is not
// the shipped one and creates the one deploy/spoke ships.
func restoreReservationClass(ctx context.Context) {
	shipped, err := fleet.ReservationPriorityClass()
	Expect(err).NotTo(HaveOccurred())
	pc := &schedulingv1.PriorityClass{}
	err = k8s.Get(ctx, client.ObjectKey{Name: reservationClass}, pc)
	switch {
	case isNotFound(err):
	case err != nil:
		Expect(err).NotTo(HaveOccurred(), "getting PriorityClass %s", reservationClass)
	case pc.Value == shipped.Value && ptr.Deref(pc.PreemptionPolicy, "") == ptr.Deref(shipped.PreemptionPolicy, "") && pc.GlobalDefault == shipped.GlobalDefault:
		return
	default:
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, pc))).To(Succeed())
		Eventually(func() bool {
			return isNotFound(k8s.Get(ctx, client.ObjectKey{Name: reservationClass}, &schedulingv1.PriorityClass{}))
		}).WithContext(ctx).WithTimeout(10 * time.Second).Should(BeTrue())
	}
	Expect(fleet.InstallReservationPriorityClass(ctx, env.Cluster)).To(Succeed())
}

// machineEvents lists the events.k8s.io Events about the Machine with uid
// (not an earlier Machine of the same name) with the given reason.
func machineEvents(ctx context.Context, g Gomega, uid types.UID, reason string) []eventsv1.Event {
	list := &eventsv1.EventList{}
	g.Expect(k8s.List(ctx, list)).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "Machine" && e.Regarding.UID == uid && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}
