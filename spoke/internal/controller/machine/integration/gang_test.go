package machine_test

import (
	"context"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/controller/machine"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// mediumMachine is general-machine offering available compute-medium units
// on eriri alone, a node with room for eight.
func mediumMachine(available int32) *imperatorv1alpha1.Machine {
	return wrappers.MakeMachine(machineName, group).
		Type("compute-medium", "6000m", "48Gi", available).GPU("nvidia.com/gpu", 1, "", "").GPUMachine("DGX-1").
		Node("eriri", "compute-medium").Tainted().Obj()
}

// gangMember is a guest of compute-medium in gang of size members.
func gangMember(namespace, name, gang string, size int) *corev1.Pod {
	pod := guest(namespace, name, "compute-medium")
	pod.Labels[imperatorv1alpha1.GangKey] = gang
	pod.Annotations[imperatorv1alpha1.GangSizeAnnotation] = strconv.Itoa(size)
	return pod
}

// createGang creates n members of gang of size members, named <gang>-0 ...,
// one after the other, and returns their names.
func createGang(ctx context.Context, namespace, gang string, size, n int) []string {
	GinkgoHelper()
	var names []string
	for i := range n {
		name := gang + "-" + strconv.Itoa(i)
		Expect(k8s.Create(ctx, gangMember(namespace, name, gang, size))).To(Succeed())
		names = append(names, name)
	}
	return names
}

// states maps each name to state.
func states(state string, names ...string) map[string]string {
	out := map[string]string{}
	for _, n := range names {
		out[n] = state
	}
	return out
}

// merged is the union of maps.
func merged(maps ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

var _ = Describe("Gangs at the slot gate", func() {
	var guests string

	BeforeEach(func(ctx context.Context) {
		guests = createGuestNamespace(ctx, injectionEnabled)
	})

	guestStates := func(ctx context.Context) func(Gomega) map[string]string {
		return func(g Gomega) map[string]string {
			out := map[string]string{}
			for _, p := range podsOf(ctx, g, guests, nil) {
				switch {
				case running(&p):
					out[p.Name] = "Running"
				case schedulingGated(&p):
					out[p.Name] = "SchedulingGated"
				default:
					out[p.Name] = string(p.Status.Phase)
				}
			}
			return out
		}
	}
	deletePods := func(ctx context.Context, names ...string) {
		GinkgoHelper()
		for _, n := range names {
			Expect(k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: guests, Name: n}}, client.GracePeriodSeconds(0))).To(Succeed())
		}
	}

	It("lets one of two 4-pod gangs on 6 units run whole, the other waits whole with the single guest behind it, and runs whole once the first leaves", func(ctx context.Context) {
		createMachine(ctx, mediumMachine(6))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-medium")).To(Equal(6)) }).WithTimeout(60 * time.Second).Should(Succeed())

		a := createGang(ctx, guests, "a", 4, 4)
		b := createGang(ctx, guests, "b", 4, 4)
		Expect(k8s.Create(ctx, guest(guests, "late", "compute-medium"))).To(Succeed())
		want := merged(states("Running", a...), states("SchedulingGated", b...), states("SchedulingGated", "late"))
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(want))
		By("keeping every member of the second gang and the guest behind it at the gate, though two units are free")
		Consistently(guestStates(ctx)).WithTimeout(3 * time.Second).Should(Equal(want))
		Eventually(usage(ctx, machineName)).WithTimeout(10 * time.Second).Should(HaveKeyWithValue("compute-medium", uq(6, 0, 4, 5, 5)))

		By("telling every member of the waiting gang why, in the Volcano PodGroup words, and the single guest its place behind it")
		for _, name := range b {
			Eventually(queueNote(ctx, guests, name)).WithTimeout(10 * time.Second).Should(Equal(
				"gang " + guests + "/b: 4 of 4 needed, 2 free; Pending (NotEnoughResources): waiting whole for compute-medium, 1st in line, 4 of 6 in use"))
			Expect(podEventNotes(ctx, Default, guests, name, "Queued")).To(HaveLen(1))
		}
		Eventually(queueNote(ctx, guests, "late")).WithTimeout(10 * time.Second).Should(Equal("waiting for compute-medium: 2nd in line, 4 of 6 in use"))
		Expect(podEventNotes(ctx, Default, guests, "a-0", "SlotGranted")).To(ConsistOf(
			"gang " + guests + "/a: 4 of 4 let through together, Running: granted a unit of compute-medium of Machine general-machine, the scheduler places the guest now"))

		By("deleting the first gang: the second runs whole, then the single guest")
		deletePods(ctx, a...)
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(merged(states("Running", b...), states("Running", "late"))))
		for _, name := range b {
			Expect(podEventNotes(ctx, Default, guests, name, "FailedScheduling")).To(BeEmpty())
		}
	})

	It("keeps a gang bigger than the type at the gate, told why, holding no unit, while a single guest passes", func(ctx context.Context) {
		createMachine(ctx, mediumMachine(6))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-medium")).To(Equal(6)) }).WithTimeout(60 * time.Second).Should(Succeed())

		big := createGang(ctx, guests, "big", 7, 7)
		Expect(k8s.Create(ctx, guest(guests, "late", "compute-medium"))).To(Succeed())
		want := merged(states("SchedulingGated", big...), states("Running", "late"))
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(want))
		Consistently(guestStates(ctx)).WithTimeout(3 * time.Second).Should(Equal(want))
		for _, name := range big {
			Eventually(queueNote(ctx, guests, name)).WithTimeout(10 * time.Second).Should(Equal(
				"gang " + guests + "/big: 7 needed at once, compute-medium has 6 available; Unschedulable (NotEnoughResources): never let through while available is below its size, it holds no unit"))
		}
		By("keeping the reservation for the units nobody uses: the gang's members are queued and unplaceable")
		want7 := imperatorv1alpha1.Usage{Maximum: 6, Reserved: 5, Used: 1, Waiting: 7, Queued: 7, Unplaceable: 7}
		Eventually(usage(ctx, machineName)).WithTimeout(30 * time.Second).Should(HaveKeyWithValue("compute-medium", want7))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-medium")).To(Equal(5)) }).WithTimeout(30 * time.Second).Should(Succeed())
	})

	It("parks a waiting gang that loses a member: it holds no unit and sets nothing aside until the member is created again, then runs whole", func(ctx context.Context) {
		createMachine(ctx, mediumMachine(6))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-medium")).To(Equal(6)) }).WithTimeout(60 * time.Second).Should(Succeed())
		for _, name := range []string{"s0", "s1", "s2", "s3"} {
			Expect(k8s.Create(ctx, guest(guests, name, "compute-medium"))).To(Succeed())
		}
		singles := states("Running", "s0", "s1", "s2", "s3")
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(singles))
		train := createGang(ctx, guests, "train", 4, 4)
		Eventually(queueNote(ctx, guests, "train-3")).WithTimeout(30 * time.Second).Should(Equal(
			"gang " + guests + "/train: 4 of 4 needed, 2 free; Pending (NotEnoughResources): waiting whole for compute-medium, 1st in line, 4 of 6 in use"))

		By("deleting a member while the gang waits")
		deletePods(ctx, "train-3")
		for _, name := range train[:3] {
			Eventually(queueNote(ctx, guests, name)).WithTimeout(10 * time.Second).Should(Equal(
				"gang " + guests + "/train: 3 of 4 members here; Pending (NotEnoughTasks): it holds no unit until every member is created"))
		}
		By("growing the reservation back into the units the gang no longer sets aside")
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-medium")).To(Equal(2)) }).WithTimeout(30 * time.Second).Should(Succeed())

		By("letting no member through when every unit is free")
		deletePods(ctx, "s0", "s1", "s2", "s3")
		waiting := states("SchedulingGated", train[:3]...)
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(waiting))
		Consistently(guestStates(ctx)).WithTimeout(3 * time.Second).Should(Equal(waiting))

		By("creating the member again: the gang runs whole")
		Expect(k8s.Create(ctx, gangMember(guests, "train-3", "train", 4))).To(Succeed())
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(states("Running", train...)))
	})

	It("lets a gang claiming a hold that covers it through together while the ordinary line is full, and keeps a gang without a claim waiting whole", func(ctx context.Context) {
		createMachine(ctx, smallMachine(4))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-small")).To(Equal(4)) }).WithTimeout(60 * time.Second).Should(Succeed())
		hold := createHold(ctx, "train", 2, time.Now().Add(10*time.Minute))
		Eventually(heldUnits(ctx)).WithTimeout(30 * time.Second).Should(Equal(int32(2)))
		for _, name := range []string{"s0", "s1"} {
			Expect(k8s.Create(ctx, guest(guests, name, "compute-small"))).To(Succeed())
		}
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(states("Running", "s0", "s1")))

		By("a gang of 2 without a claim: waits whole, the held units are not its")
		for _, name := range []string{"free-0", "free-1"} {
			pod := guest(guests, name, "compute-small")
			pod.Labels[imperatorv1alpha1.GangKey] = "free"
			pod.Annotations[imperatorv1alpha1.GangSizeAnnotation] = "2"
			Expect(k8s.Create(ctx, pod)).To(Succeed())
		}
		By("a gang of 2 whose members claim the hold: let through together")
		for _, name := range []string{"held-0", "held-1"} {
			pod := heldGuest(guests, name, hold)
			pod.Labels[imperatorv1alpha1.GangKey] = "held"
			pod.Annotations[imperatorv1alpha1.GangSizeAnnotation] = "2"
			Expect(k8s.Create(ctx, pod)).To(Succeed())
		}
		want := merged(states("Running", "s0", "s1", "held-0", "held-1"), states("SchedulingGated", "free-0", "free-1"))
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(want))
		Consistently(guestStates(ctx)).WithTimeout(3 * time.Second).Should(Equal(want))
		Eventually(holdStatus(ctx, "train")).WithTimeout(10 * time.Second).Should(HaveField("Claimed", int32(2)))
		Eventually(queueNote(ctx, guests, "free-1")).WithTimeout(10 * time.Second).Should(Equal(
			"gang " + guests + "/free: 2 of 2 needed, 0 free; Pending (NotEnoughResources): waiting whole for compute-small, 1st in line, 4 of 4 in use"))
	})

	It("takes a coscheduling PodGroup's minMember as the size of its members' gang", func(ctx context.Context) {
		installPodGroupCRD(ctx)
		createMachine(ctx, mediumMachine(6))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-medium")).To(Equal(6)) }).WithTimeout(60 * time.Second).Should(Succeed())
		podGroup := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
			"metadata": map[string]any{"name": "pg", "namespace": guests},
			"spec":     map[string]any{"minMember": int64(3)},
		}}
		Expect(k8s.Create(ctx, podGroup)).To(Succeed())
		for _, name := range []string{"s0", "s1", "s2", "s3"} {
			Expect(k8s.Create(ctx, guest(guests, name, "compute-medium"))).To(Succeed())
		}
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(states("Running", "s0", "s1", "s2", "s3")))

		By("3 workers of PodGroup pg, without gang-size: they wait whole for 3 units")
		workers := []string{"w0", "w1", "w2"}
		for _, name := range workers {
			pod := guest(guests, name, "compute-medium")
			pod.Labels[imperatorv1alpha1.CoschedulingPodGroupKey] = "pg"
			Expect(k8s.Create(ctx, pod)).To(Succeed())
		}
		want := merged(states("Running", "s0", "s1", "s2", "s3"), states("SchedulingGated", workers...))
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(want))
		Consistently(guestStates(ctx)).WithTimeout(3 * time.Second).Should(Equal(want))
		Eventually(queueNote(ctx, guests, "w2")).WithTimeout(10 * time.Second).Should(Equal(
			"gang " + guests + "/pg: 3 of 3 needed, 2 free; Pending (NotEnoughResources): waiting whole for compute-medium, 1st in line, 4 of 6 in use"))

		By("a single guest leaves: the three run together")
		deletePods(ctx, "s0")
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(merged(states("Running", "s1", "s2", "s3"), states("Running", workers...))))
	})

	It("takes a native PodGroup's gang minCount as the size of its members' gang, tells the PodGroup, and the scheduler binds the gang together", func(ctx context.Context) {
		createMachine(ctx, mediumMachine(6))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-medium")).To(Equal(6)) }).WithTimeout(60 * time.Second).Should(Succeed())
		for _, pg := range []*schedulingv1alpha2.PodGroup{nativePodGroup(guests, "train", 3), nativePodGroup(guests, "short", 3)} {
			Expect(k8s.Create(ctx, pg)).To(Succeed())
		}
		for _, name := range []string{"s0", "s1", "s2", "s3"} {
			Expect(k8s.Create(ctx, guest(guests, name, "compute-medium"))).To(Succeed())
		}
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(states("Running", "s0", "s1", "s2", "s3")))

		By("3 workers naming PodGroup train in spec.schedulingGroup, without gang-size: they wait whole for 3 units")
		workers := []string{"w0", "w1", "w2"}
		for _, name := range workers {
			Expect(k8s.Create(ctx, nativeMember(guests, name, "train"))).To(Succeed())
		}
		By("2 of the 3 workers of PodGroup short: parked, they hold nothing")
		for _, name := range []string{"x0", "x1"} {
			Expect(k8s.Create(ctx, nativeMember(guests, name, "short"))).To(Succeed())
		}
		created := &corev1.Pod{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: guests, Name: "w0"}, created)).To(Succeed())
		Expect(created.Spec.SchedulingGroup).NotTo(BeNil(), "the API server dropped spec.schedulingGroup: GenericWorkload is off")

		want := merged(states("Running", "s0", "s1", "s2", "s3"), states("SchedulingGated", workers...), states("SchedulingGated", "x0", "x1"))
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(want))
		Consistently(guestStates(ctx)).WithTimeout(3 * time.Second).Should(Equal(want))
		waitingNote := "gang " + guests + "/train: 3 of 3 needed, 2 free; Pending (NotEnoughResources): waiting whole for compute-medium, 1st in line, 4 of 6 in use"
		Eventually(queueNote(ctx, guests, "w2")).WithTimeout(10 * time.Second).Should(Equal(waitingNote))
		parkedNote := "gang " + guests + "/short: 2 of 3 members here; Pending (NotEnoughTasks): it holds no unit until every member is created"
		Eventually(queueNote(ctx, guests, "x1")).WithTimeout(10 * time.Second).Should(Equal(parkedNote))

		By("telling each PodGroup where its gang stands, in its status")
		Eventually(admittedCondition(ctx, guests, "train")).WithTimeout(10 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", "NotEnoughResources"), HaveField("Message", waitingNote)))
		Eventually(admittedCondition(ctx, guests, "short")).WithTimeout(10 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", "NotEnoughTasks"), HaveField("Message", parkedNote)))

		By("a single guest leaves: the three run together, the scheduler's gang plugin binding them")
		deletePods(ctx, "s0")
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(merged(
			states("Running", "s1", "s2", "s3"), states("Running", workers...), states("SchedulingGated", "x0", "x1"))))
		Eventually(admittedCondition(ctx, guests, "train")).WithTimeout(10 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", "LetThrough"),
			HaveField("Message", "gang "+guests+"/train: 3 of 3 let through the slot gate together to compute-medium of Machine "+machineName)))
		Eventually(func(g Gomega) []metav1.Condition {
			pg := &schedulingv1alpha2.PodGroup{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: guests, Name: "train"}, pg)).To(Succeed())
			return pg.Status.Conditions
		}).WithTimeout(10*time.Second).Should(ContainElement(And(HaveField("Type", schedulingv1alpha2.PodGroupScheduled), HaveField("Status", metav1.ConditionTrue))),
			"the scheduler's own condition stands beside the agent's")
		for _, name := range workers {
			Expect(podEventNotes(ctx, Default, guests, name, "FailedScheduling")).NotTo(ContainElement(Not(ContainSubstring(gangQuorumWait))),
				"no member was tried before its unit was free")
		}

		By("the missing member of short is created: no unit is free, the gang waits whole")
		Expect(k8s.Create(ctx, nativeMember(guests, "x2", "short"))).To(Succeed())
		Eventually(admittedCondition(ctx, guests, "short")).WithTimeout(10 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", "NotEnoughResources")))
	})

	It("lets a gang whose native PodGroup is created after its members through as soon as the PodGroup appears", func(ctx context.Context) {
		createMachine(ctx, mediumMachine(6))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-medium")).To(Equal(6)) }).WithTimeout(60 * time.Second).Should(Succeed())
		workers := []string{"w0", "w1"}
		for _, name := range workers {
			Expect(k8s.Create(ctx, nativeMember(guests, name, "late"))).To(Succeed())
		}
		By("no PodGroup yet: the members have no size and wait, told why")
		Eventually(queueNote(ctx, guests, "w1")).WithTimeout(30 * time.Second).Should(Equal(
			"gang " + guests + "/late: annotation imperator.tenzen-y.io/gang-size is missing, PodGroup " + guests + "/late gives no size (minMember, gang minCount); " +
				"Unschedulable (InvalidGang): its members wait, holding no unit, until every member gives its size"))
		Consistently(guestStates(ctx)).WithTimeout(2 * time.Second).Should(Equal(states("SchedulingGated", workers...)))

		By("creating the PodGroup, nothing else: the watch brings the gang through whole")
		Expect(k8s.Create(ctx, nativePodGroup(guests, "late", 2))).To(Succeed())
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(states("Running", workers...)))
		Eventually(admittedCondition(ctx, guests, "late")).WithTimeout(10 * time.Second).Should(HaveField("Status", metav1.ConditionTrue))
	})
})

// gangQuorumWait is in the FailedScheduling event the scheduler's
// GangScheduling plugin (Kubernetes 1.36, alpha) gives a gang member it
// holds at Permit until its peers are placed too, in the same cycle that
// binds them all: a wait for peers, not for room.
const gangQuorumWait = "waiting for minCount pods from a gang to be scheduled"

// nativePodGroup is a native PodGroup (scheduling.k8s.io/v1alpha2) with a
// gang policy of minCount.
func nativePodGroup(namespace, name string, minCount int32) *schedulingv1alpha2.PodGroup {
	return &schedulingv1alpha2.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: schedulingv1alpha2.PodGroupSpec{SchedulingPolicy: schedulingv1alpha2.PodGroupSchedulingPolicy{
			Gang: &schedulingv1alpha2.GangSchedulingPolicy{MinCount: minCount},
		}},
	}
}

// nativeMember is a guest of compute-medium naming PodGroup podGroup in
// spec.schedulingGroup, without gang-size.
func nativeMember(namespace, name, podGroup string) *corev1.Pod {
	pod := guest(namespace, name, "compute-medium")
	pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(podGroup)}
	return pod
}

// admittedCondition reads the agent's condition of a native PodGroup.
func admittedCondition(ctx context.Context, namespace, name string) func(Gomega) *metav1.Condition {
	return func(g Gomega) *metav1.Condition {
		pg := &schedulingv1alpha2.PodGroup{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pg)).To(Succeed())
		return meta.FindStatusCondition(pg.Status.Conditions, machine.PodGroupAdmittedCondition)
	}
}

// installPodGroupCRD installs a minimal CustomResourceDefinition of the
// scheduler-plugins coscheduling PodGroup (scheduling.x-k8s.io/v1alpha1,
// any spec) for the spec, and removes it after.
func installPodGroupCRD(ctx context.Context) {
	GinkgoHelper()
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "podgroups.scheduling.x-k8s.io"},
		"spec": map[string]any{
			"group": "scheduling.x-k8s.io", "scope": "Namespaced",
			"names": map[string]any{"kind": "PodGroup", "listKind": "PodGroupList", "plural": "podgroups", "singular": "podgroup"},
			"versions": []any{map[string]any{"name": "v1alpha1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
	Expect(k8s.Create(ctx, crd)).To(Succeed())
	DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, crd))).To(Succeed()) })
	Eventually(func(g Gomega) {
		podGroups := &unstructured.UnstructuredList{}
		podGroups.SetAPIVersion("scheduling.x-k8s.io/v1alpha1")
		podGroups.SetKind("PodGroupList")
		g.Expect(k8s.List(ctx, podGroups)).To(Succeed())
	}).WithTimeout(30 * time.Second).Should(Succeed())
}
