package machine_test

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// Why a guest above priority 0 must never preempt (the pool-guests-only
// policy refuses one that could): the slot gate keeps every guest from the
// scheduler until a unit is free, but a Machine may promise more units than
// its nodes hold, and the scheduler then tries the guest it was handed
// against a full node. With the real scheduler, a high-priority guest that
// may preempt evicts another team's running guest there; one whose
// PriorityClass says preemptionPolicy Never waits Pending, and nobody loses
// their unit.
var _ = Describe("A guest of high priority let through onto a full node", func() {
	const machineName = "over-promised"
	var namespace string

	BeforeEach(func(ctx context.Context) {
		namespace = createGuestNamespace(ctx, injectionEnabled)
		machine := wrappers.MakeMachine(machineName, group).Type("compute-small", "2", "8Gi", 4).Node("kasumi", "compute-small").Obj()
		createMachine(ctx, machine)
		By("four guests of priority 0 taking the four compute-small units kasumi holds")
		for _, name := range []string{"team-b-1", "team-b-2", "team-b-3", "team-b-4"} {
			Expect(k8s.Create(ctx, guest(namespace, name, "compute-small"))).To(Succeed())
		}
		Eventually(func(g Gomega) int {
			n := 0
			for _, p := range podsOf(ctx, g, namespace, nil) {
				if running(&p) {
					n++
				}
			}
			return n
		}).WithContext(ctx).WithTimeout(60 * time.Second).Should(Equal(4))

		By("the Machine promising a fifth unit, which kasumi does not hold")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(machine), machine)).To(Succeed())
		patch := client.MergeFrom(machine.DeepCopy())
		machine.Spec.MachineTypes[0].Available = 5
		Expect(k8s.Patch(ctx, machine, patch)).To(Succeed())
	})

	// urgentGuest creates a compute-small guest of a PriorityClass of value
	// 1,000,000 with policy, and waits until the agent lets it through (four
	// units of five held).
	urgentGuest := func(ctx context.Context, policy corev1.PreemptionPolicy) *corev1.Pod {
		GinkgoHelper()
		class := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "urgent-" + strings.ToLower(string(policy))},
			Value: 1_000_000, PreemptionPolicy: ptr.To(policy)}
		Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, class))).To(Succeed())
		pod := guest(namespace, "urgent", "compute-small")
		pod.Spec.PriorityClassName = class.Name
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		Eventually(func(g Gomega) []corev1.PodSchedulingGate {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
			return pod.Spec.SchedulingGates
		}).WithContext(ctx).WithTimeout(30*time.Second).Should(BeEmpty(), "the agent lets the fifth guest through: five units are promised")
		return pod
	}

	// others are the four running guests still there.
	others := func(ctx context.Context) func(Gomega) []string {
		return func(g Gomega) []string {
			var names []string
			for _, p := range podsOf(ctx, g, namespace, nil) {
				if p.Name != "urgent" && p.DeletionTimestamp == nil && running(&p) {
					names = append(names, p.Name)
				}
			}
			return names
		}
	}

	It("evicts another team's running guest when its PriorityClass may preempt (what the policy refuses)", func(ctx context.Context) {
		urgentGuest(ctx, corev1.PreemptLowerPriority)
		Eventually(others(ctx)).WithContext(ctx).WithTimeout(60 * time.Second).Should(HaveLen(3))
	})

	It("waits Pending, evicting nobody, when its PriorityClass never preempts", func(ctx context.Context) {
		pod := urgentGuest(ctx, corev1.PreemptNever)
		Eventually(func(g Gomega) string {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodScheduled {
					return c.Reason
				}
			}
			return ""
		}).WithContext(ctx).WithTimeout(30*time.Second).Should(Equal(corev1.PodReasonUnschedulable), "the scheduler tried it")
		Consistently(others(ctx)).WithContext(ctx).WithTimeout(10 * time.Second).Should(HaveLen(4))
		Expect(pod.Spec.NodeName).To(BeEmpty())
	})
})
