package machine_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// smallMachine is general-machine with compute-small on kasumi, a node with
// room for four units, offering available of them.
func smallMachine(available int32) *imperatorv1alpha1.Machine {
	return wrappers.GeneralMachine().Type("compute-small", "2", "8Gi", available).Node("kasumi", "compute-small").Obj()
}

var _ = Describe("Guest queue", func() {
	var guests string

	BeforeEach(func(ctx context.Context) {
		guests = createGuestNamespace(ctx, injectionEnabled)
	})

	// guestStates maps each guest of the namespace to Running, SchedulingGated
	// (the STATUS kubectl get pods shows for a gated pod) or its phase.
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

	It("lets exactly available guests run on a node with more room, the others wait SchedulingGated in arrival order and are told their place", func(ctx context.Context) {
		createMachine(ctx, smallMachine(1))
		Eventually(usage(ctx, machineName)).WithTimeout(60 * time.Second).Should(HaveKeyWithValue("compute-small", u(1, 1, 0, 0)))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-small")).To(Equal(1)) }).WithTimeout(30 * time.Second).Should(Succeed())

		// One after the other: the admitted-at stamps (nanoseconds) keep
		// their order, also within one second.
		for _, name := range []string{"first", "second", "third"} {
			Expect(k8s.Create(ctx, guest(guests, name, "compute-small"))).To(Succeed())
		}
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{
			"first": "Running", "second": "SchedulingGated", "third": "SchedulingGated",
		}))
		Eventually(usage(ctx, machineName)).WithTimeout(10 * time.Second).Should(HaveKeyWithValue("compute-small", uq(1, 0, 1, 2, 2)))
		Consistently(guestStates(ctx)).WithTimeout(3 * time.Second).Should(Equal(map[string]string{
			"first": "Running", "second": "SchedulingGated", "third": "SchedulingGated",
		}))
		By("showing a queue, not an oversubscription: the waiting guests hold no unit")
		Consistently(condition(ctx, machineName, imperatorv1alpha1.ConditionOverSubscribed)).WithTimeout(2 * time.Second).
			Should(HaveField("Status", metav1.ConditionFalse))

		By("telling each waiting guest its place in an annotation kubectl describe pod shows, and once in an event")
		Eventually(queueNote(ctx, guests, "second")).WithTimeout(10 * time.Second).
			Should(Equal("waiting for compute-small: 1st in line, 1 of 1 in use"))
		Eventually(queueNote(ctx, guests, "third")).WithTimeout(10 * time.Second).
			Should(Equal("waiting for compute-small: 2nd in line, 1 of 1 in use"))
		Expect(podEventNotes(ctx, Default, guests, "third", "Queued")).To(HaveLen(1))
		By("never letting the scheduler try a guest before its slot is free")
		Expect(podEventNotes(ctx, Default, guests, "first", "FailedScheduling")).To(BeEmpty())

		By("deleting the first guest: the second runs, not the third, and the reservation does not come back")
		Expect(k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: guests, Name: "first"}})).To(Succeed())
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{
			"second": "Running", "third": "SchedulingGated",
		}))
		Expect(reservationPods(ctx, Default, "compute-small")).To(BeEmpty())
		Eventually(queueNote(ctx, guests, "third")).WithTimeout(10 * time.Second).
			Should(Equal("waiting for compute-small: 1st in line, 1 of 1 in use"))
		Expect(podEventNotes(ctx, Default, guests, "second", "FailedScheduling")).To(BeEmpty())
		Expect(podEventNotes(ctx, Default, guests, "second", "SlotGranted")).NotTo(BeEmpty())
		second := &corev1.Pod{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: guests, Name: "second"}, second)).To(Succeed())
		Expect(second.Annotations).NotTo(HaveKey(imperatorv1alpha1.QueueAnnotation))
		Expect(second.Spec.SchedulingGates).To(BeEmpty())

		By("deleting every guest: the reservation is back")
		Expect(k8s.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(guests), client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(usage(ctx, machineName)).WithTimeout(30 * time.Second).Should(HaveKeyWithValue("compute-small", u(1, 1, 0, 0)))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-small")).To(Equal(1)) }).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(condition(ctx, machineName, imperatorv1alpha1.ConditionOverSubscribed)(Default)).To(HaveField("Status", metav1.ConditionFalse))
	})

	It("takes a not-ready node's slots out: gated guests wait until it is ready again", func(ctx context.Context) {
		createMachine(ctx, smallMachine(1))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-small")).To(Equal(1)) }).WithTimeout(60 * time.Second).Should(Succeed())
		DeferCleanup(setNodePool, "kasumi", imperatorv1alpha1.NodePoolReady)

		Expect(k8s.Create(ctx, guest(guests, "a", "compute-small"))).To(Succeed())
		Expect(k8s.Create(ctx, guest(guests, "b", "compute-small"))).To(Succeed())
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"a": "Running", "b": "SchedulingGated"}))

		By("labelling kasumi node-pool=not-ready and deleting the running guest")
		setNodePool(ctx, "kasumi", imperatorv1alpha1.NodePoolNotReady)
		Expect(k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: guests, Name: "a"}})).To(Succeed())
		Eventually(usage(ctx, machineName)).WithTimeout(30 * time.Second).Should(HaveKeyWithValue("compute-small", uq(1, 0, 0, 1, 1)))
		Consistently(guestStates(ctx)).WithTimeout(3 * time.Second).Should(Equal(map[string]string{"b": "SchedulingGated"}))
		Eventually(queueNote(ctx, guests, "b")).WithTimeout(10 * time.Second).
			Should(Equal("waiting for compute-small: 1st in line, 0 of 1 in use; no imperator.tenzen-y.io/node-pool=ready node of the type can take it now"))

		By("labelling kasumi node-pool=ready again")
		setNodePool(ctx, "kasumi", imperatorv1alpha1.NodePoolReady)
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"b": "Running"}))
		Expect(podEventNotes(ctx, Default, guests, "b", "FailedScheduling")).To(BeEmpty())
	})

	It("evicts nobody when available is lowered below the running guests, or when they ran before the agent gated guests, and shows OverSubscribed until they leave", func(ctx context.Context) {
		createMachine(ctx, smallMachine(3))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-small")).To(Equal(3)) }).WithTimeout(60 * time.Second).Should(Succeed())
		// One guest from before the upgrade (no gate), two gated ones.
		Expect(k8s.Create(ctx, ungatedGuest(guests, "old", "compute-small"))).To(Succeed())
		Expect(k8s.Create(ctx, guest(guests, "a", "compute-small"))).To(Succeed())
		Expect(k8s.Create(ctx, guest(guests, "b", "compute-small"))).To(Succeed())
		allRunning := map[string]string{"old": "Running", "a": "Running", "b": "Running"}
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(allRunning))

		By("lowering available to 1")
		setAvailable(ctx, "compute-small", 1)
		Eventually(condition(ctx, machineName, imperatorv1alpha1.ConditionOverSubscribed)).WithTimeout(30 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionTrue),
			HaveField("Message", "compute-small: guests hold 3 units of 1 available (3 bound, 0 being placed, 0 leaving), 0 queued")))
		Expect(k8s.Create(ctx, guest(guests, "late", "compute-small"))).To(Succeed())
		Eventually(usage(ctx, machineName)).WithTimeout(30 * time.Second).Should(HaveKeyWithValue("compute-small", uq(1, 0, 3, 1, 1)))
		withLate := map[string]string{"old": "Running", "a": "Running", "b": "Running", "late": "SchedulingGated"}
		Consistently(guestStates(ctx)).WithTimeout(5 * time.Second).Should(Equal(withLate))

		By("letting the late guest in only once the running ones are below available")
		for _, name := range []string{"old", "a"} {
			Expect(k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: guests, Name: name}})).To(Succeed())
		}
		Consistently(guestStates(ctx)).WithTimeout(3 * time.Second).Should(Equal(map[string]string{"b": "Running", "late": "SchedulingGated"}))
		Expect(k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: guests, Name: "b"}})).To(Succeed())
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"late": "Running"}))
		Eventually(condition(ctx, machineName, imperatorv1alpha1.ConditionOverSubscribed)).WithTimeout(30 * time.Second).
			Should(HaveField("Status", metav1.ConditionFalse))
	})

	It("goes by admission time, not by namespace or name, for guests created in the same second", func(ctx context.Context) {
		createMachine(ctx, smallMachine(1))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-small")).To(Equal(1)) }).WithTimeout(60 * time.Second).Should(Succeed())
		Expect(k8s.Create(ctx, guest(guests, "holder", "compute-small"))).To(Succeed())
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"holder": "Running"}))

		// a is created first but was admitted after z (two injector
		// replicas, the first one slower): z is first in line.
		admittedAt := time.Now().UTC()
		late := guest(guests, "a", "compute-small")
		late.Annotations[imperatorv1alpha1.AdmittedAtAnnotation] = admittedAt.Add(time.Millisecond).Format(time.RFC3339Nano)
		early := guest(guests, "z", "compute-small")
		early.Annotations[imperatorv1alpha1.AdmittedAtAnnotation] = admittedAt.Format(time.RFC3339Nano)
		Expect(k8s.Create(ctx, late)).To(Succeed())
		Expect(k8s.Create(ctx, early)).To(Succeed())
		Eventually(queueNote(ctx, guests, "z")).WithTimeout(10 * time.Second).Should(Equal("waiting for compute-small: 1st in line, 1 of 1 in use"))
		Eventually(queueNote(ctx, guests, "a")).WithTimeout(10 * time.Second).Should(Equal("waiting for compute-small: 2nd in line, 1 of 1 in use"))

		Expect(k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: guests, Name: "holder"}})).To(Succeed())
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"z": "Running", "a": "SchedulingGated"}))
	})

	It("lets through only a guest a ready node can take: one whose nodeSelector no node matches waits, told so, and the next one runs", func(ctx context.Context) {
		createMachine(ctx, smallMachine(1))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-small")).To(Equal(1)) }).WithTimeout(60 * time.Second).Should(Succeed())

		picky := guest(guests, "picky", "compute-small")
		picky.Spec.NodeSelector = map[string]string{"topology.kubernetes.io/zone": "nowhere"}
		Expect(k8s.Create(ctx, picky)).To(Succeed())
		Eventually(queueNote(ctx, guests, "picky")).WithTimeout(30 * time.Second).Should(Equal(
			"waiting for compute-small: 1st in line, 0 of 1 in use; no imperator.tenzen-y.io/node-pool=ready node of the type can take it now " +
				"(its nodeSelector, required node affinity or tolerations): it keeps its place in line and holds no unit until one can"))
		Expect(k8s.Create(ctx, guest(guests, "plain", "compute-small"))).To(Succeed())
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"picky": "SchedulingGated", "plain": "Running"}))
		Consistently(guestStates(ctx)).WithTimeout(3 * time.Second).Should(Equal(map[string]string{"picky": "SchedulingGated", "plain": "Running"}))
		Expect(podEventNotes(ctx, Default, guests, "picky", "FailedScheduling")).To(BeEmpty())
		withPicky := uq(1, 0, 1, 1, 1)
		withPicky.Unplaceable = 1
		Eventually(usage(ctx, machineName)).WithTimeout(10 * time.Second).Should(HaveKeyWithValue("compute-small", withPicky))
	})

	It("does not freeze the line behind a reservation pod stuck terminating: after the threshold the guest runs and the Machine gets a Warning", func(ctx context.Context) {
		createMachine(ctx, smallMachine(1))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-small")).To(Equal(1)) }).WithTimeout(60 * time.Second).Should(Succeed())
		// A finalizer nobody removes keeps the reservation pod terminating.
		pods := reservationPods(ctx, Default, "compute-small")
		Expect(pods).To(HaveLen(1))
		stuck := pods[0].DeepCopy()
		Expect(k8s.Patch(ctx, stuck, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/stuck"]}}`)))).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(k8s.Patch(ctx, stuck, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))))).To(Succeed())
		})

		Expect(k8s.Create(ctx, guest(guests, "g", "compute-small"))).To(Succeed())
		Eventually(queueNote(ctx, guests, "g")).WithTimeout(10 * time.Second).Should(Equal(
			"waiting for compute-small: 1st in line, 0 of 1 in use; a reservation pod is making room"))
		Expect(guestStates(ctx)(Default)).To(Equal(map[string]string{"g": "SchedulingGated"}))
		Eventually(guestStates(ctx)).WithTimeout(60 * time.Second).Should(Equal(map[string]string{"g": "Running"}))
		Eventually(func(g Gomega) []string {
			return eventsAbout(ctx, g, machineName, "ReservationPodStuck")
		}).WithTimeout(10 * time.Second).Should(ConsistOf(HavePrefix("reservation pod " + agentNamespace + "/" + stuck.Name + " is still terminating")))
		current := &corev1.Pod{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(stuck), current)).To(Succeed())
		Expect(current.DeletionTimestamp).NotTo(BeNil(), "the reservation pod is still there, terminating")
	})

	It("has the API server refuse a slot grant carrying the UID of a guest deleted and created again under its name", func(ctx context.Context) {
		// What the controller's grant patch relies on (grantPatch in
		// grant.go): a strategic merge patch carrying metadata.uid is
		// refused when the pod of that name has another UID.
		old := guest(guests, "reused", "compute-small")
		old.Spec.NodeSelector = map[string]string{"topology.kubernetes.io/zone": "nowhere"} // never let through
		Expect(k8s.Create(ctx, old)).To(Succeed())
		oldUID := old.UID
		Expect(k8s.Delete(ctx, old, client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(func() bool { return isNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(old), &corev1.Pod{})) }).WithTimeout(10 * time.Second).Should(BeTrue())
		again := guest(guests, "reused", "compute-small")
		again.Spec.NodeSelector = old.Spec.NodeSelector
		Expect(k8s.Create(ctx, again)).To(Succeed())

		grant := client.RawPatch(types.StrategicMergePatchType, fmt.Appendf(nil,
			`{"metadata":{"uid":%q,"annotations":{%q:null}},"spec":{"schedulingGates":[{"$patch":"delete","name":%q}]}}`,
			oldUID, imperatorv1alpha1.QueueAnnotation, imperatorv1alpha1.SlotSchedulingGate))
		err := k8s.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: guests, Name: "reused"}}, grant)
		Expect(apierrors.IsInvalid(err) || apierrors.IsConflict(err)).To(BeTrue(), "patch error: %v", err)
		now := &corev1.Pod{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(again), now)).To(Succeed())
		Expect(now.Spec.SchedulingGates).To(ContainElement(HaveField("Name", imperatorv1alpha1.SlotSchedulingGate)))

		By("and accepts it with the pod's own UID")
		own := client.RawPatch(types.StrategicMergePatchType, fmt.Appendf(nil,
			`{"metadata":{"uid":%q},"spec":{"schedulingGates":[{"$patch":"delete","name":%q}]}}`, now.UID, imperatorv1alpha1.SlotSchedulingGate))
		Expect(k8s.Patch(ctx, now, own)).To(Succeed())
		Expect(now.Spec.SchedulingGates).To(BeEmpty())
	})

	It("never runs more guests than available while guests come and go for 50 cycles", func(ctx context.Context) {
		const available = 2
		createMachine(ctx, smallMachine(available))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-small")).To(Equal(available)) }).WithTimeout(60 * time.Second).Should(Succeed())

		// Three guests at a time for two units: one always waits.
		var wg sync.WaitGroup
		done := make(chan struct{})
		wg.Add(1)
		go func() {
			defer GinkgoRecover()
			defer wg.Done()
			defer close(done)
			for i := range 50 {
				Expect(k8s.Create(ctx, guest(guests, "g-"+strconv.Itoa(i), "compute-small"))).To(Succeed())
				if i >= 2 {
					Expect(client.IgnoreNotFound(k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: guests, Name: "g-" + strconv.Itoa(i-2)}}))).To(Succeed())
				}
				time.Sleep(150 * time.Millisecond)
			}
		}()
		boundGuests := func(g Gomega) int {
			n := 0
			for _, p := range podsOf(ctx, g, guests, nil) {
				if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
					n++
				}
			}
			return n
		}
		observations := 0
		Consistently(func(g Gomega) {
			select {
			case <-done:
				return
			default:
			}
			observations++
			g.Expect(boundGuests(g)).To(BeNumerically("<=", available))
		}).WithTimeout(20 * time.Second).WithPolling(20 * time.Millisecond).Should(Succeed())
		wg.Wait()
		Expect(observations).To(BeNumerically(">", 50))

		By("letting the last two guests run once the line is empty")
		Eventually(guestStates(ctx)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"g-48": "Running", "g-49": "Running"}))
		Eventually(usage(ctx, machineName)).WithTimeout(10 * time.Second).Should(HaveKeyWithValue("compute-small", u(available, 0, 2, 0)))
	})
})

// schedulingGated is a pod the scheduler has not considered because of a
// scheduling gate: kubectl get pods shows it SchedulingGated.
func schedulingGated(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonSchedulingGated
		}
	}
	return false
}

// queueNote reads the queue annotation of a guest.
func queueNote(ctx context.Context, namespace, name string) func(Gomega) string {
	return func(g Gomega) string {
		pod := &corev1.Pod{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod)).To(Succeed())
		return pod.Annotations[imperatorv1alpha1.QueueAnnotation]
	}
}

// podEventNotes lists the notes of the events with reason about a pod,
// oldest first, as kubectl describe pod shows them.
func podEventNotes(ctx context.Context, g Gomega, namespace, name, reason string) []string {
	list := &eventsv1.EventList{}
	g.Expect(k8s.List(ctx, list, client.InNamespace(namespace))).To(Succeed())
	var notes []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Pod" && e.Regarding.Name == name && e.Reason == reason {
			notes = append(notes, e.Note)
		}
	}
	return notes
}

// setAvailable edits general-machine's available units of a machine type.
func setAvailable(ctx context.Context, machineType string, available int32) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		m := &imperatorv1alpha1.Machine{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: machineName}, m)).To(Succeed())
		for i := range m.Spec.MachineTypes {
			if m.Spec.MachineTypes[i].Name == machineType {
				m.Spec.MachineTypes[i].Available = available
			}
		}
		g.Expect(k8s.Update(ctx, m)).To(Succeed())
	}).WithTimeout(10 * time.Second).Should(Succeed())
}
