package machine_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

const machineName = "general-machine"

type usageMap = map[string]imperatorv1alpha1.Usage

func u(maximum, reserved, used, waiting int32) imperatorv1alpha1.Usage {
	return imperatorv1alpha1.Usage{Maximum: maximum, Reserved: reserved, Used: used, Waiting: waiting}
}

// uq is u with queued guests: those of waiting held at the slot gate.
func uq(maximum, reserved, used, waiting, queued int32) imperatorv1alpha1.Usage {
	return imperatorv1alpha1.Usage{Maximum: maximum, Reserved: reserved, Used: used, Waiting: waiting, Queued: queued}
}

var _ = Describe("Machine controller", func() {
	var guests string

	BeforeEach(func(ctx context.Context) {
		guests = createGuestNamespace(ctx, injectionEnabled)
	})

	It("reserves the sample general-machine exactly as docs/contract.md describes it", func(ctx context.Context) {
		createMachine(ctx, wrappers.GeneralMachine().Obj())

		By("reporting every machine type's usage; compute-large has no node")
		Eventually(usage(ctx, machineName)).WithTimeout(60 * time.Second).Should(Equal(usageMap{
			"compute-medium": u(4, 4, 0, 0),
			"compute-xlarge": u(1, 1, 0, 0),
			"compute-large":  u(2, 0, 0, 0),
		}))
		Eventually(condition(ctx, machineName, imperatorv1alpha1.ConditionReady)).Should(And(
			HaveField("Status", metav1.ConditionTrue),
			HaveField("Reason", imperatorv1alpha1.ReasonReservationsReconciled)))
		Expect(condition(ctx, machineName, imperatorv1alpha1.ConditionInsufficientCapacity)(Default)).To(And(
			HaveField("Status", metav1.ConditionTrue),
			HaveField("Reason", imperatorv1alpha1.ReasonNoNodePool),
			HaveField("Message", ContainSubstring("compute-large: no node of spec.nodePool serves it, 2 available cannot be reserved"))))
		Expect(condition(ctx, machineName, imperatorv1alpha1.ConditionOverSubscribed)(Default)).To(HaveField("Status", metav1.ConditionFalse))

		By("reserving at the PriorityClass of deploy/spoke, which default-priority pods cannot preempt and which never preempts")
		pc := &schedulingv1.PriorityClass{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: "imperator-reservation"}, pc)).To(Succeed())
		Expect(pc.Value).To(BeZero())
		Expect(pc.PreemptionPolicy).To(HaveValue(Equal(corev1.PreemptNever)))

		By("naming, labelling and shaping the StatefulSets and Services as docs/contract.md says")
		statefulSets := &appsv1.StatefulSetList{}
		Expect(k8s.List(ctx, statefulSets, client.InNamespace(agentNamespace))).To(Succeed())
		Expect(statefulSets.Items).To(ConsistOf(
			HaveField("Name", "compute-medium-general-machine"),
			HaveField("Name", "compute-xlarge-general-machine")))
		services := &corev1.ServiceList{}
		Expect(k8s.List(ctx, services, client.InNamespace(agentNamespace))).To(Succeed())
		Expect(services.Items).To(ConsistOf(
			HaveField("Name", "compute-medium-general-machine"),
			HaveField("Name", "compute-xlarge-general-machine")))

		for _, tc := range []struct {
			machineType string
			replicas    int32
			resources   corev1.ResourceList
			gpuSelector corev1.NodeSelectorRequirement
			node        string
		}{
			{"compute-xlarge", 1, corev1.ResourceList{"cpu": resource.MustParse("40"), "memory": resource.MustParse("128Gi"), "nvidia.com/gpu": resource.MustParse("2")},
				corev1.NodeSelectorRequirement{Key: "nvidia.com/gpu.product", Operator: corev1.NodeSelectorOpIn, Values: []string{"NVIDIA-GeForce-RTX-3090"}}, "michiru"},
			{"compute-medium", 4, corev1.ResourceList{"cpu": resource.MustParse("6"), "memory": resource.MustParse("48Gi"), "nvidia.com/gpu": resource.MustParse("1")},
				corev1.NodeSelectorRequirement{Key: "nvidia.com/gpu.machine", Operator: corev1.NodeSelectorOpIn, Values: []string{"DGX-1"}}, "eriri"},
		} {
			labels := map[string]string{
				"imperator.tenzen-y.io/machine-group": "general-machine",
				"imperator.tenzen-y.io/machine-type":  tc.machineType,
				"imperator.tenzen-y.io/pod-role":      "reservation",
			}
			name := tc.machineType + "-general-machine"
			owner := And(HaveField("Kind", "Machine"), HaveField("Name", machineName), HaveField("Controller", HaveValue(BeTrue())))

			svc := &corev1.Service{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: name}, svc)).To(Succeed())
			Expect(svc.Labels).To(Equal(labels))
			Expect(svc.Spec.Selector).To(Equal(labels))
			Expect(svc.OwnerReferences).To(ConsistOf(owner))

			sts := statefulSet(ctx, Default, tc.machineType)
			Expect(sts.Labels).To(Equal(labels))
			Expect(sts.OwnerReferences).To(ConsistOf(owner))
			Expect(sts.Spec.Selector.MatchLabels).To(Equal(labels))
			Expect(sts.Spec.ServiceName).To(Equal(name))
			Expect(sts.Spec.Replicas).To(HaveValue(Equal(tc.replicas)))
			Expect(sts.Spec.PodManagementPolicy).To(Equal(appsv1.ParallelPodManagement))
			pod := sts.Spec.Template
			Expect(pod.Labels).To(Equal(labels))
			Expect(pod.Spec.Tolerations).To(Equal([]corev1.Toleration{
				{Key: "imperator.tenzen-y.io/" + tc.machineType, Operator: corev1.TolerationOpEqual, Value: "general-machine", Effect: corev1.TaintEffectNoSchedule},
				{Key: "imperator.tenzen-y.io/node-pool", Operator: corev1.TolerationOpEqual, Value: "ready", Effect: corev1.TaintEffectNoSchedule},
			}))
			Expect(pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms).To(Equal([]corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: "imperator.tenzen-y.io/" + tc.machineType, Operator: corev1.NodeSelectorOpIn, Values: []string{"general-machine"}},
					{Key: "imperator.tenzen-y.io/node-pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"ready"}},
					tc.gpuSelector,
				},
			}}))
			Expect(pod.Spec.Containers).To(HaveLen(1))
			Expect(pod.Spec.Containers[0].Image).To(Equal("registry.k8s.io/pause:3.10"))
			for _, list := range []corev1.ResourceList{pod.Spec.Containers[0].Resources.Requests, pod.Spec.Containers[0].Resources.Limits} {
				Expect(list).To(HaveLen(len(tc.resources)))
				for name, want := range tc.resources {
					got := list[name]
					Expect(got.Cmp(want)).To(BeZero(), "%s", name)
				}
			}
			Expect(pod.Spec.PriorityClassName).To(Equal("imperator-reservation"))
			Expect(pod.Spec.TerminationGracePeriodSeconds).To(HaveValue(BeZero()))

			By("running " + tc.machineType + " reservation pods on " + tc.node + " only")
			Eventually(func(g Gomega) {
				pods := reservationPods(ctx, g, tc.machineType)
				g.Expect(pods).To(HaveLen(int(tc.replicas)))
				for _, p := range pods {
					g.Expect(running(&p)).To(BeTrue(), "pod %s is %s", p.Name, p.Status.Phase)
					g.Expect(p.Spec.NodeName).To(Equal(tc.node))
				}
			}).WithTimeout(30 * time.Second).Should(Succeed())
		}

		By("exporting the usage as gauges")
		Eventually(func(g Gomega) {
			g.Expect(gauge(g, "compute-medium", "maximum")).To(Equal(4.0))
			g.Expect(gauge(g, "compute-medium", "reserved")).To(Equal(4.0))
			g.Expect(gauge(g, "compute-xlarge", "reserved")).To(Equal(1.0))
			g.Expect(gauge(g, "compute-large", "reserved")).To(Equal(0.0))
		}).WithTimeout(10 * time.Second).Should(Succeed())
	})

	It("hands a full node's reserved slot to a guest within seconds, and takes it back when the guest leaves", func(ctx context.Context) {
		// michiru holds exactly two compute-xlarge units: both reserved.
		createMachine(ctx, wrappers.GeneralMachine().Available("compute-xlarge", 2).Obj())
		Eventually(usage(ctx, machineName)).WithTimeout(60 * time.Second).Should(HaveKeyWithValue("compute-xlarge", u(2, 2, 0, 0)))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-xlarge")).To(Equal(2)) }).WithTimeout(30 * time.Second).Should(Succeed())
		handoversBefore := handoverCount()

		pod := guest(guests, "trainer", "compute-xlarge")
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
			g.Expect(running(pod)).To(BeTrue(), "guest is %s", pod.Status.Phase)
		}).WithTimeout(10 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		Expect(pod.Spec.NodeName).To(Equal("michiru"))
		Eventually(usage(ctx, machineName)).WithTimeout(10 * time.Second).Should(HaveKeyWithValue("compute-xlarge", u(2, 1, 1, 0)))
		Eventually(func(g Gomega) {
			g.Expect(statefulSet(ctx, g, "compute-xlarge").Spec.Replicas).To(HaveValue(BeEquivalentTo(1)))
			g.Expect(reservationPods(ctx, g, "compute-xlarge")).To(HaveLen(1))
		}).WithTimeout(10 * time.Second).Should(Succeed())
		Eventually(handoverCount).WithTimeout(10 * time.Second).Should(BeNumerically(">", handoversBefore))
		Eventually(func(g Gomega) []string {
			return eventsAbout(ctx, g, machineName, "ReservationScaled")
		}).WithTimeout(10 * time.Second).Should(ContainElement(ContainSubstring("compute-xlarge reservation from 2 to 1")))

		By("deleting the guest")
		Expect(k8s.Delete(ctx, pod)).To(Succeed())
		Eventually(usage(ctx, machineName)).WithTimeout(30 * time.Second).Should(HaveKeyWithValue("compute-xlarge", u(2, 2, 0, 0)))
		Eventually(func(g Gomega) {
			pods := reservationPods(ctx, g, "compute-xlarge")
			g.Expect(pods).To(HaveLen(2))
			for _, p := range pods {
				g.Expect(running(&p)).To(BeTrue(), "pod %s is %s", p.Name, p.Status.Phase)
			}
		}).WithTimeout(30 * time.Second).Should(Succeed())
	})

	It("does not report missing capacity while a leaving guest still holds its slot", func(ctx context.Context) {
		createMachine(ctx, wrappers.GeneralMachine().Available("compute-xlarge", 2).Obj())
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-xlarge")).To(Equal(2)) }).WithTimeout(60 * time.Second).Should(Succeed())

		pod := guest(guests, "slow-to-leave", "compute-xlarge")
		pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](6)
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		Eventually(usage(ctx, machineName)).WithTimeout(30 * time.Second).Should(HaveKeyWithValue("compute-xlarge", u(2, 1, 1, 0)))

		By("deleting the guest, which keeps its slot for its 6 s grace period")
		Expect(k8s.Delete(ctx, pod)).To(Succeed())
		Eventually(func(g Gomega) {
			var pending []string
			for _, p := range reservationPods(ctx, g, "compute-xlarge") {
				if p.Spec.NodeName == "" && p.DeletionTimestamp == nil {
					pending = append(pending, p.Name)
				}
			}
			g.Expect(pending).To(HaveLen(1))
		}).WithTimeout(5 * time.Second).Should(Succeed())
		Consistently(condition(ctx, machineName, imperatorv1alpha1.ConditionInsufficientCapacity)).WithTimeout(3 * time.Second).
			ShouldNot(HaveField("Reason", imperatorv1alpha1.ReasonReservationsUnschedulable))
		Eventually(usage(ctx, machineName)).WithTimeout(30 * time.Second).Should(HaveKeyWithValue("compute-xlarge", u(2, 2, 0, 0)))
	})

	It("reserves nothing on a node that is not node-pool=ready, without touching the reservations, and counts them again when it is", func(ctx context.Context) {
		// eriri is the only ready compute-medium node; utaha is in maintenance.
		createMachine(ctx, wrappers.GeneralMachine().Obj())
		Eventually(usage(ctx, machineName)).WithTimeout(60 * time.Second).Should(HaveKeyWithValue("compute-medium", u(4, 4, 0, 0)))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-medium")).To(Equal(4)) }).WithTimeout(30 * time.Second).Should(Succeed())
		DeferCleanup(setNodePool, "eriri", imperatorv1alpha1.NodePoolReady)
		reservationsUntouched := func(g Gomega) {
			g.Expect(statefulSet(ctx, g, "compute-medium").Spec.Replicas).To(HaveValue(BeEquivalentTo(4)))
			g.Expect(runningReservations(ctx, g, "compute-medium")).To(Equal(4))
		}

		for _, state := range []imperatorv1alpha1.NodePoolState{imperatorv1alpha1.NodePoolNotReady, imperatorv1alpha1.NodePoolMaintenance} {
			By("labelling eriri node-pool=" + string(state))
			setNodePool(ctx, "eriri", state)
			Eventually(usage(ctx, machineName)).WithTimeout(10 * time.Second).Should(HaveKeyWithValue("compute-medium", u(4, 0, 0, 0)))
			Eventually(condition(ctx, machineName, imperatorv1alpha1.ConditionInsufficientCapacity)).WithTimeout(10 * time.Second).Should(And(
				HaveField("Status", metav1.ConditionTrue),
				HaveField("Reason", imperatorv1alpha1.ReasonReservationsOnUnreadyNodes),
				HaveField("Message", HavePrefix("compute-medium: 4 reservation pods on nodes that are not ready, not reserved: eriri ("+string(state)+")"))))
			Consistently(reservationsUntouched).WithTimeout(3 * time.Second).Should(Succeed())
		}

		By("labelling eriri node-pool=ready again")
		setNodePool(ctx, "eriri", imperatorv1alpha1.NodePoolReady)
		Eventually(usage(ctx, machineName)).WithTimeout(10 * time.Second).Should(HaveKeyWithValue("compute-medium", u(4, 4, 0, 0)))
		Eventually(condition(ctx, machineName, imperatorv1alpha1.ConditionInsufficientCapacity)).WithTimeout(10 * time.Second).Should(And(
			HaveField("Reason", imperatorv1alpha1.ReasonNoNodePool),
			HaveField("Message", Not(ContainSubstring("compute-medium")))))
		reservationsUntouched(Default)
	})

	It("counts every guest holding a unit whatever its namespace's label, and tells a gated guest of a namespace not opted in that it is not let through", func(ctx context.Context) {
		createMachine(ctx, wrappers.GeneralMachine().Obj())
		Eventually(usage(ctx, machineName)).WithTimeout(60 * time.Second).Should(HaveKeyWithValue("compute-medium", u(4, 4, 0, 0)))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-medium")).To(Equal(4)) }).WithTimeout(30 * time.Second).Should(Succeed())

		legacy := createGuestNamespace(ctx, map[string]string{imperatorv1alpha1.LegacyInjectResourceKey: imperatorv1alpha1.InjectResourceEnabled})
		plain := createGuestNamespace(ctx, nil)
		Expect(k8s.Create(ctx, guest(legacy, "counted", "compute-medium"))).To(Succeed())
		Eventually(usage(ctx, machineName)).WithTimeout(30 * time.Second).Should(HaveKeyWithValue("compute-medium", u(4, 3, 1, 0)))

		By("a guest that runs in a namespace not opted in (opted out since) still holds its unit")
		Expect(k8s.Create(ctx, ungatedGuest(plain, "opted-out", "compute-medium"))).To(Succeed())
		Eventually(usage(ctx, machineName)).WithTimeout(30 * time.Second).Should(HaveKeyWithValue("compute-medium", u(4, 2, 2, 0)))

		By("a guest at the gate in that namespace waits, told why, counted nowhere")
		Expect(k8s.Create(ctx, guest(plain, "stranded", "compute-medium"))).To(Succeed())
		Eventually(queueNote(ctx, plain, "stranded")).WithTimeout(30 * time.Second).Should(Equal(
			"not let through to compute-medium: namespace " + plain + " is not opted in to Imperator (label imperator.tenzen-y.io/inject-resource=enabled); label it again or delete the pod"))
		Consistently(usage(ctx, machineName)).WithTimeout(3 * time.Second).Should(HaveKeyWithValue("compute-medium", u(4, 2, 2, 0)))
		Expect(podEventNotes(ctx, Default, plain, "stranded", "NotLetThrough")).To(HaveLen(1))

		By("opting the namespace in: the gated guest joins the line and runs")
		ns := &corev1.Namespace{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: plain}, ns)).To(Succeed())
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[imperatorv1alpha1.InjectResourceKey] = imperatorv1alpha1.InjectResourceEnabled
		Expect(k8s.Update(ctx, ns)).To(Succeed())
		Eventually(usage(ctx, machineName)).WithTimeout(30 * time.Second).Should(HaveKeyWithValue("compute-medium", u(4, 1, 3, 0)))
	})

	It("leaves guests beyond available waiting without evicting anyone", func(ctx context.Context) {
		createMachine(ctx, wrappers.GeneralMachine().Available("compute-xlarge", 2).Obj())
		Eventually(usage(ctx, machineName)).WithTimeout(60 * time.Second).Should(HaveKeyWithValue("compute-xlarge", u(2, 2, 0, 0)))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-xlarge")).To(Equal(2)) }).WithTimeout(30 * time.Second).Should(Succeed())

		for _, name := range []string{"a", "b", "c"} {
			Expect(k8s.Create(ctx, guest(guests, name, "compute-xlarge"))).To(Succeed())
		}
		Eventually(usage(ctx, machineName)).WithTimeout(30 * time.Second).Should(HaveKeyWithValue("compute-xlarge", uq(2, 0, 2, 1, 1)))
		By("showing the waiting guest as queued, not the Machine as OverSubscribed: it holds no unit")
		Consistently(condition(ctx, machineName, imperatorv1alpha1.ConditionOverSubscribed)).WithTimeout(3 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", imperatorv1alpha1.ReasonWithinAvailable)))
		// Earlier specs' Machines had the same name: only this one's events.
		m := &imperatorv1alpha1.Machine{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: machineName}, m)).To(Succeed())
		events := &eventsv1.EventList{}
		Expect(k8s.List(ctx, events)).To(Succeed())
		for _, e := range events.Items {
			Expect(e.Regarding.UID == m.UID && e.Reason == imperatorv1alpha1.ReasonGuestsExceedAvailable).To(BeFalse(), "event %s: %s", e.Reason, e.Note)
		}

		By("keeping the two running guests running and the third waiting")
		runningGuests := func(g Gomega) []string {
			var names []string
			for _, p := range podsOf(ctx, g, guests, nil) {
				if running(&p) {
					names = append(names, p.Name)
				}
			}
			return names
		}
		Eventually(runningGuests).WithTimeout(10 * time.Second).Should(HaveLen(2))
		first := runningGuests(Default)
		Consistently(runningGuests).WithTimeout(5 * time.Second).Should(Equal(first))
		Expect(usage(ctx, machineName)(Default)).To(HaveKeyWithValue("compute-xlarge", uq(2, 0, 2, 1, 1)))
		Expect(reservationPods(ctx, Default, "compute-xlarge")).To(BeEmpty())
	})

	It("reports InsufficientCapacity without flapping when available exceeds what the nodes hold", func(ctx context.Context) {
		// michiru holds two compute-xlarge units, not five.
		createMachine(ctx, wrappers.GeneralMachine().Available("compute-xlarge", 5).Obj())
		Eventually(condition(ctx, machineName, imperatorv1alpha1.ConditionInsufficientCapacity)).WithTimeout(60 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionTrue),
			HaveField("Reason", imperatorv1alpha1.ReasonReservationsUnschedulable),
			HaveField("Message", HavePrefix("compute-xlarge: 3 of 5 reservation pods cannot be scheduled"))))
		// Every type settled, compute-medium's reservations included: their
		// binding moves the status legitimately.
		Eventually(usage(ctx, machineName)).WithTimeout(30 * time.Second).Should(And(
			HaveKeyWithValue("compute-xlarge", u(5, 2, 0, 0)),
			HaveKeyWithValue("compute-medium", u(4, 4, 0, 0))))
		Eventually(func(g Gomega) []string {
			return eventsAbout(ctx, g, machineName, imperatorv1alpha1.ReasonReservationsUnschedulable)
		}).WithTimeout(10 * time.Second).ShouldNot(BeEmpty())

		By("keeping the replicas, the StatefulSet and the Machine still for 30 s")
		sts := statefulSet(ctx, Default, "compute-xlarge")
		m := &imperatorv1alpha1.Machine{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: machineName}, m)).To(Succeed())
		Consistently(func(g Gomega) {
			now := statefulSet(ctx, g, "compute-xlarge")
			g.Expect(now.Spec.Replicas).To(HaveValue(BeEquivalentTo(5)))
			g.Expect(now.Generation).To(Equal(sts.Generation))
			current := &imperatorv1alpha1.Machine{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: machineName}, current)).To(Succeed())
			g.Expect(current.ResourceVersion).To(Equal(m.ResourceVersion), "the Machine keeps changing: %v", current.Status)
		}).WithTimeout(30 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())

		By("clearing the condition when available fits again")
		Expect(k8s.Patch(ctx, wrappers.GeneralMachine().Available("compute-xlarge", 2).Obj(), client.Merge)).To(Succeed())
		Eventually(condition(ctx, machineName, imperatorv1alpha1.ConditionInsufficientCapacity)).WithTimeout(30 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionTrue),
			HaveField("Reason", imperatorv1alpha1.ReasonNoNodePool)))
		Eventually(usage(ctx, machineName)).WithTimeout(10 * time.Second).Should(HaveKeyWithValue("compute-xlarge", u(2, 2, 0, 0)))
	})

	It("converges when available is edited, a type is added and removed, and the Machine is deleted", func(ctx context.Context) {
		m := wrappers.GeneralMachine().Obj()
		createMachine(ctx, m)
		Eventually(usage(ctx, machineName)).WithTimeout(60 * time.Second).Should(HaveKeyWithValue("compute-medium", u(4, 4, 0, 0)))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-medium")).To(Equal(4)) }).WithTimeout(30 * time.Second).Should(Succeed())

		By("editing available")
		update := func(mutate func(*imperatorv1alpha1.Machine)) {
			Eventually(func(g Gomega) {
				current := &imperatorv1alpha1.Machine{}
				g.Expect(k8s.Get(ctx, client.ObjectKey{Name: machineName}, current)).To(Succeed())
				mutate(current)
				g.Expect(k8s.Update(ctx, current)).To(Succeed())
			}).WithTimeout(10 * time.Second).Should(Succeed())
		}
		update(func(m *imperatorv1alpha1.Machine) { m.Spec.MachineTypes[0].Available = 2 })
		Eventually(usage(ctx, machineName)).WithTimeout(30 * time.Second).Should(HaveKeyWithValue("compute-medium", u(2, 2, 0, 0)))
		Eventually(func(g Gomega) {
			g.Expect(reservationPods(ctx, g, "compute-medium")).To(HaveLen(2))
			g.Expect(runningReservations(ctx, g, "compute-medium")).To(Equal(2))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Eventually(condition(ctx, machineName, imperatorv1alpha1.ConditionReady)).Should(HaveField("Status", metav1.ConditionTrue))

		By("adding compute-small on kasumi")
		update(func(m *imperatorv1alpha1.Machine) {
			m.Spec.MachineTypes = append(m.Spec.MachineTypes, wrappers.MakeMachine("", "").Type("compute-small", "2", "8Gi", 3).Obj().Spec.MachineTypes...)
			m.Spec.NodePool = append(m.Spec.NodePool, wrappers.MakeMachine("", "").Node("kasumi", "compute-small").Obj().Spec.NodePool...)
		})
		Eventually(usage(ctx, machineName)).WithTimeout(30 * time.Second).Should(HaveKeyWithValue("compute-small", u(3, 3, 0, 0)))
		Eventually(func(g Gomega) {
			pods := reservationPods(ctx, g, "compute-small")
			g.Expect(pods).To(HaveLen(3))
			for _, p := range pods {
				g.Expect(running(&p)).To(BeTrue(), "pod %s is %s", p.Name, p.Status.Phase)
				g.Expect(p.Spec.NodeName).To(Equal("kasumi"))
			}
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: "compute-small-general-machine"}, &corev1.Service{})).To(Succeed())

		By("a guest of compute-small that must outlive the Machine")
		survivor := guest(guests, "survivor", "compute-small")
		Expect(k8s.Create(ctx, survivor)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(survivor), survivor)).To(Succeed())
			g.Expect(running(survivor)).To(BeTrue())
			g.Expect(survivor.Spec.NodeName).To(Equal("kasumi"))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Eventually(usage(ctx, machineName)).WithTimeout(30 * time.Second).Should(HaveKeyWithValue("compute-small", u(3, 2, 1, 0)))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-small")).To(Equal(2)) }).WithTimeout(30 * time.Second).Should(Succeed())

		By("removing compute-small again")
		update(func(m *imperatorv1alpha1.Machine) {
			m.Spec.MachineTypes = m.Spec.MachineTypes[:len(m.Spec.MachineTypes)-1]
			m.Spec.NodePool = m.Spec.NodePool[:len(m.Spec.NodePool)-1]
		})
		Eventually(usage(ctx, machineName)).WithTimeout(30 * time.Second).ShouldNot(HaveKey("compute-small"))
		Eventually(func(g Gomega) {
			g.Expect(isNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: "compute-small-general-machine"}, &appsv1.StatefulSet{}))).To(BeTrue())
			g.Expect(isNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: "compute-small-general-machine"}, &corev1.Service{}))).To(BeTrue())
			g.Expect(reservationPods(ctx, g, "compute-small")).To(BeEmpty())
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Eventually(func(g Gomega) { gauge(g, "compute-small", "maximum") }).WithTimeout(10 * time.Second).Should(Not(Succeed()))

		By("deleting the Machine")
		Expect(k8s.Delete(ctx, m)).To(Succeed())
		expectNoReservations(ctx)
		Consistently(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(survivor), survivor)).To(Succeed())
			g.Expect(running(survivor)).To(BeTrue())
		}).WithTimeout(3 * time.Second).Should(Succeed())
		Eventually(func(g Gomega) { gauge(g, "compute-medium", "maximum") }).WithTimeout(10 * time.Second).Should(Not(Succeed()))
	})
})

// gauge reads imperator_machine_type_units of the local cluster's
// general-machine group from controller-runtime's registry; it fails when
// the series does not exist.
func gauge(g Gomega, machineType, state string) float64 {
	families, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != "imperator_machine_type_units" {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, map[string]string{"machine_group": group, "machine_type": machineType, "state": state}) {
				return m.GetGauge().GetValue()
			}
		}
	}
	g.Expect("series").To(Equal("present"), "no series for %s %s", machineType, state)
	return 0
}

// handoverCount is the number of guest handovers observed so far.
func handoverCount() uint64 {
	families, err := metrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	var n uint64
	for _, f := range families {
		if f.GetName() == "imperator_machine_guest_handover_seconds" {
			for _, m := range f.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	found := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			found++
		}
	}
	return found == len(want)
}
