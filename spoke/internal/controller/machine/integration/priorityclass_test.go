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
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// reservationClass is the PriorityClass the agent runs reservation pods at.
const reservationClass = "imperator-reservation"

var _ = Describe("Reservation PriorityClass", func() {
	DescribeTable("holds every reservation at 0 while a PriorityClass of its name is not the agent's, and restores them once it is deleted",
		func(ctx context.Context, wrong *schedulingv1.PriorityClass, wantDifferences []string) {
			By("replacing the reservation PriorityClass with a wrong one before the Machine exists")
			replaceReservationClass(ctx, wrong)

			m := wrappers.GeneralMachine().Available("compute-xlarge", 2).Obj()
			createMachine(ctx, m)
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())

			By("saying on the Machine what is wrong and how to fix it")
			messageParts := []gomegatypes.GomegaMatcher{
				ContainSubstring("PriorityClass imperator-reservation is not the one the agent creates"),
				ContainSubstring("every reservation is scaled to 0"),
				ContainSubstring("delete PriorityClass imperator-reservation"),
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
				for _, machineType := range []string{"compute-xlarge", "compute-medium"} {
					g.Expect(statefulSet(ctx, g, machineType).Spec.Replicas).To(HaveValue(BeZero()), machineType)
					g.Expect(reservationPods(ctx, g, machineType)).To(BeEmpty(), machineType)
				}
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

			By("recreating the class right, at once, when the operator deletes it")
			Expect(k8s.Delete(ctx, wrong)).To(Succeed())
			Eventually(func(g Gomega) {
				pc := &schedulingv1.PriorityClass{}
				g.Expect(k8s.Get(ctx, client.ObjectKey{Name: reservationClass}, pc)).To(Succeed())
				g.Expect(pc.UID).NotTo(Equal(wrong.UID))
				g.Expect(pc.Value).To(BeZero())
				g.Expect(pc.PreemptionPolicy).To(HaveValue(Equal(corev1.PreemptNever)))
				g.Expect(pc.GlobalDefault).To(BeFalse())
			}).WithTimeout(10 * time.Second).Should(Succeed())

			By("clearing the condition and running the reservations again, at priority 0 and never preempting")
			Eventually(condition(ctx, machineName, imperatorv1alpha1.ConditionReady)).WithTimeout(10 * time.Second).Should(And(
				HaveField("Status", metav1.ConditionTrue),
				HaveField("Reason", imperatorv1alpha1.ReasonReservationsReconciled)))
			Eventually(func(g Gomega) {
				for machineType, want := range map[string]int{"compute-xlarge": 2, "compute-medium": 4} {
					pods := reservationPods(ctx, g, machineType)
					g.Expect(pods).To(HaveLen(want), machineType)
					for _, p := range pods {
						g.Expect(running(&p)).To(BeTrue(), "pod %s is %s", p.Name, p.Status.Phase)
						g.Expect(p.Spec.Priority).To(HaveValue(BeZero()), "pod %s", p.Name)
						g.Expect(p.Spec.PreemptionPolicy).To(HaveValue(Equal(corev1.PreemptNever)), "pod %s", p.Name)
					}
				}
			}).WithTimeout(30 * time.Second).Should(Succeed())
			Eventually(usage(ctx, machineName)).WithTimeout(10 * time.Second).Should(And(
				HaveKeyWithValue("compute-xlarge", u(2, 2, 0, 0)),
				HaveKeyWithValue("compute-medium", u(4, 4, 0, 0))))
			Eventually(func(g Gomega) []eventsv1.Event {
				return machineEvents(ctx, g, m.UID, imperatorv1alpha1.ReasonReservationsReconciled)
			}).WithTimeout(10 * time.Second).Should(ContainElement(And(
				HaveField("Type", corev1.EventTypeNormal),
				HaveField("Note", HavePrefix("PriorityClass imperator-reservation is the agent's again")))))
		},
		Entry("a higher value that preempts",
			&schedulingv1.PriorityClass{Value: 1000, PreemptionPolicy: ptr.To(corev1.PreemptLowerPriority)},
			[]string{"value is 1000, want 0", "preemptionPolicy is PreemptLowerPriority, want Never"}),
		Entry("the right value and policy, but the cluster's global default",
			&schedulingv1.PriorityClass{Value: 0, PreemptionPolicy: ptr.To(corev1.PreemptNever), GlobalDefault: true},
			[]string{"globalDefault is true, want false"}),
	)
})

// replaceReservationClass deletes the reservation PriorityClass an earlier
// spec left and creates wrong under its name instead. After the spec (and
// after the Machine is gone, DeferCleanup running last in first out), a wrong
// class still there is deleted, so that the next spec's Machine gets the
// agent's.
func replaceReservationClass(ctx context.Context, wrong *schedulingv1.PriorityClass) {
	GinkgoHelper()
	Expect(client.IgnoreNotFound(k8s.Delete(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: reservationClass}}))).To(Succeed())
	Eventually(func() bool {
		return isNotFound(k8s.Get(ctx, client.ObjectKey{Name: reservationClass}, &schedulingv1.PriorityClass{}))
	}).WithContext(ctx).WithTimeout(10 * time.Second).Should(BeTrue())
	wrong.Name = reservationClass
	wrong.Description = "made by someone else"
	Expect(k8s.Create(ctx, wrong)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		pc := &schedulingv1.PriorityClass{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: reservationClass}, pc); err != nil {
			Expect(isNotFound(err)).To(BeTrue(), "getting PriorityClass: %v", err)
			return
		}
		if pc.Value != 0 || ptr.Deref(pc.PreemptionPolicy, "") != corev1.PreemptNever || pc.GlobalDefault {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, pc))).To(Succeed())
		}
	})
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
