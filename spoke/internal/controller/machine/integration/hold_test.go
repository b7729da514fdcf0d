package machine_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// createHold creates a CapacityHold of count compute-small units of
// general-machine until validUntil, deletes it after the spec, and returns
// it as created (with its UID, which its guests carry).
func createHold(ctx context.Context, name string, count int32, validUntil time.Time, namespaces ...string) *imperatorv1alpha1.CapacityHold {
	GinkgoHelper()
	hold := wrappers.MakeCapacityHold(name, group, "compute-small", count).ValidUntil(validUntil).Namespaces(namespaces...).Obj()
	Expect(k8s.Create(ctx, hold)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, hold, client.Preconditions{UID: &hold.UID}))).To(Succeed())
	})
	return hold
}

// holdStatus reads a CapacityHold's status.
func holdStatus(ctx context.Context, name string) func(Gomega) imperatorv1alpha1.CapacityHoldStatus {
	return func(g Gomega) imperatorv1alpha1.CapacityHoldStatus {
		hold := &imperatorv1alpha1.CapacityHold{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, hold)).To(Succeed())
		return hold.Status
	}
}

// holdCondition is a condition of a hold as the status shows it.
func holdCondition(ctx context.Context, name, conditionType string) func(Gomega) metav1.Condition {
	return func(g Gomega) metav1.Condition {
		c := meta.FindStatusCondition(holdStatus(ctx, name)(g).Conditions, conditionType)
		g.Expect(c).NotTo(BeNil(), "condition %s of CapacityHold %s", conditionType, name)
		return *c
	}
}

// heldGuest is a gated guest of the hold as the injector admits it while
// the hold exists: labelled with its name and stamped with its UID.
func heldGuest(namespace, name string, hold *imperatorv1alpha1.CapacityHold) *corev1.Pod {
	w := &wrappers.PodWrapper{Pod: *guest(namespace, name, "compute-small")}
	return w.ClaimsHold(hold).Obj()
}

// squatter is a gated guest labelled with a hold's name but without its
// UID: one the injector admitted when no hold of that name existed.
func squatter(namespace, name, holdName string) *corev1.Pod {
	pod := guest(namespace, name, "compute-small")
	pod.Labels[imperatorv1alpha1.HoldKey] = holdName
	return pod
}

// podStates maps each pod of a namespace to Running, SchedulingGated or its
// phase, as kubectl get pods shows them.
func podStates(ctx context.Context, namespace string) func(Gomega) map[string]string {
	return func(g Gomega) map[string]string {
		out := map[string]string{}
		for _, p := range podsOf(ctx, g, namespace, nil) {
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

// heldUnits is the usage.held of general-machine's compute-small.
func heldUnits(ctx context.Context) func(Gomega) int32 {
	return func(g Gomega) int32 { return usage(ctx, machineName)(g)["compute-small"].Held }
}

var _ = Describe("Capacity holds", func() {
	var teamA, teamB string

	BeforeEach(func(ctx context.Context) {
		teamA = createGuestNamespace(ctx, injectionEnabled)
		teamB = createGuestNamespace(ctx, injectionEnabled)
		createMachine(ctx, smallMachine(4))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-small")).To(Equal(4)) }).WithTimeout(60 * time.Second).Should(Succeed())
	})

	It("holds 2 of 4: the Machine shows 2 held, another team's guests get at most 2 and wait while the held units stay idle, and deleting the hold lets them in", func(ctx context.Context) {
		createHold(ctx, "train", 2, time.Now().Add(10*time.Minute))
		Eventually(holdCondition(ctx, "train", imperatorv1alpha1.HoldConditionProvisioned)).WithTimeout(30 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", imperatorv1alpha1.HoldReasonUnitsHeld)))
		Expect(holdCondition(ctx, "train", imperatorv1alpha1.HoldConditionAccepted)(Default)).To(HaveField("Status", metav1.ConditionTrue))
		Expect(holdStatus(ctx, "train")(Default)).To(And(HaveField("Held", int32(2)), HaveField("Claimed", int32(0))))
		Eventually(heldUnits(ctx)).WithTimeout(10 * time.Second).Should(Equal(int32(2)))

		for _, name := range []string{"b1", "b2", "b3"} {
			Expect(k8s.Create(ctx, guest(teamB, name, "compute-small"))).To(Succeed())
		}
		waiting := map[string]string{"b1": "Running", "b2": "Running", "b3": "SchedulingGated"}
		Eventually(podStates(ctx, teamB)).WithTimeout(30 * time.Second).Should(Equal(waiting))
		Consistently(podStates(ctx, teamB)).WithTimeout(3 * time.Second).Should(Equal(waiting))
		By("keeping the held units as reservation pods in place")
		Expect(runningReservations(ctx, Default, "compute-small")).To(Equal(2))
		Eventually(queueNote(ctx, teamB, "b3")).WithTimeout(10 * time.Second).Should(ContainSubstring("2 held for capacity holds"))

		By("deleting the hold: its units go back at once")
		Expect(k8s.Delete(ctx, &imperatorv1alpha1.CapacityHold{ObjectMeta: metav1.ObjectMeta{Name: "train"}})).To(Succeed())
		Eventually(podStates(ctx, teamB)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"b1": "Running", "b2": "Running", "b3": "Running"}))
		Eventually(heldUnits(ctx)).WithTimeout(10 * time.Second).Should(BeZero())
	})

	It("lets a hold's guest in at once, ahead of older waiting guests, and counts it claimed", func(ctx context.Context) {
		train := createHold(ctx, "train", 2, time.Now().Add(10*time.Minute))
		Eventually(holdStatus(ctx, "train")).WithTimeout(30 * time.Second).Should(HaveField("Held", int32(2)))
		for _, name := range []string{"b1", "b2", "b3"} {
			Expect(k8s.Create(ctx, guest(teamB, name, "compute-small"))).To(Succeed())
		}
		Eventually(podStates(ctx, teamB)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"b1": "Running", "b2": "Running", "b3": "SchedulingGated"}))

		Expect(k8s.Create(ctx, heldGuest(teamA, "t1", train))).To(Succeed())
		Eventually(podStates(ctx, teamA)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"t1": "Running"}))
		Expect(podStates(ctx, teamB)(Default)).To(HaveKeyWithValue("b3", "SchedulingGated"))
		Eventually(holdStatus(ctx, "train")).WithTimeout(10 * time.Second).Should(And(HaveField("Held", int32(1)), HaveField("Claimed", int32(1))))
		Eventually(heldUnits(ctx)).WithTimeout(10 * time.Second).Should(Equal(int32(1)))
		Expect(podEventNotes(ctx, Default, teamA, "t1", "FailedScheduling")).To(BeEmpty())
	})

	It("lets a ProvisioningRequest consumer of the capacity-hold class claim the hold as the label does", func(ctx context.Context) {
		train := createHold(ctx, "train", 1, time.Now().Add(10*time.Minute))
		Eventually(holdStatus(ctx, "train")).WithTimeout(30 * time.Second).Should(HaveField("Held", int32(1)))
		for _, name := range []string{"b1", "b2", "b3", "b4"} {
			Expect(k8s.Create(ctx, guest(teamB, name, "compute-small"))).To(Succeed())
		}
		Eventually(podStates(ctx, teamB)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{
			"b1": "Running", "b2": "Running", "b3": "Running", "b4": "SchedulingGated"}))

		consumer := guest(teamA, "batch-0", "compute-small")
		// As the injector admits it: the request it consumes resolved to
		// the hold's UID.
		consumer.Annotations[imperatorv1alpha1.ConsumeProvisioningRequestAnnotation] = "train"
		consumer.Annotations[imperatorv1alpha1.ProvisioningClassNameAnnotation] = imperatorv1alpha1.CapacityHoldProvisioningClass
		consumer.Annotations[imperatorv1alpha1.HoldUIDAnnotation] = string(train.UID)
		Expect(k8s.Create(ctx, consumer)).To(Succeed())
		Eventually(podStates(ctx, teamA)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"batch-0": "Running"}))
		Eventually(holdStatus(ctx, "train")).WithTimeout(10 * time.Second).Should(And(HaveField("Held", int32(0)), HaveField("Claimed", int32(1))))
		Expect(podStates(ctx, teamB)(Default)).To(HaveKeyWithValue("b4", "SchedulingGated"))
	})

	It("returns the unclaimed unit at validUntil and says BookingExpired, while the claimed unit stays with its guest", func(ctx context.Context) {
		validUntil := time.Now().Add(12 * time.Second)
		train := createHold(ctx, "train", 2, validUntil)
		Eventually(holdStatus(ctx, "train")).WithTimeout(10 * time.Second).Should(HaveField("Held", int32(2)))
		Expect(k8s.Create(ctx, heldGuest(teamA, "t1", train))).To(Succeed())
		Eventually(podStates(ctx, teamA)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"t1": "Running"}))
		for _, name := range []string{"b1", "b2", "b3"} {
			Expect(k8s.Create(ctx, guest(teamB, name, "compute-small"))).To(Succeed())
		}
		Eventually(podStates(ctx, teamB)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"b1": "Running", "b2": "Running", "b3": "SchedulingGated"}))
		Expect(time.Now()).To(BeTemporally("<", validUntil), "the spec was too slow to see the hold before validUntil")

		By("passing validUntil")
		Eventually(holdCondition(ctx, "train", imperatorv1alpha1.HoldConditionBookingExpired)).WithTimeout(time.Until(validUntil) + 15*time.Second).Should(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", imperatorv1alpha1.HoldReasonExpired)))
		Eventually(podStates(ctx, teamB)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"b1": "Running", "b2": "Running", "b3": "Running"}))
		Expect(podStates(ctx, teamA)(Default)).To(Equal(map[string]string{"t1": "Running"}))
		Eventually(holdStatus(ctx, "train")).WithTimeout(10 * time.Second).Should(And(HaveField("Held", int32(0)), HaveField("Claimed", int32(1))))
		Expect(holdCondition(ctx, "train", imperatorv1alpha1.HoldConditionProvisioned)(Default)).To(HaveField("Status", metav1.ConditionFalse))
		Eventually(heldUnits(ctx)).WithTimeout(10 * time.Second).Should(BeZero())
	})

	It("says CapacityRevoked when the held units' node leaves the ready pool, and holds them again when it is back", func(ctx context.Context) {
		createHold(ctx, "train", 2, time.Now().Add(10*time.Minute))
		Eventually(holdStatus(ctx, "train")).WithTimeout(30 * time.Second).Should(HaveField("Held", int32(2)))
		DeferCleanup(setNodePool, "kasumi", imperatorv1alpha1.NodePoolReady)

		setNodePool(ctx, "kasumi", imperatorv1alpha1.NodePoolNotReady)
		Eventually(holdCondition(ctx, "train", imperatorv1alpha1.HoldConditionCapacityRevoked)).WithTimeout(30 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", imperatorv1alpha1.HoldReasonNodeLeftPool),
			HaveField("Message", ContainSubstring("kasumi (not-ready)"))))
		Expect(holdStatus(ctx, "train")(Default)).To(HaveField("Held", int32(0)))
		Expect(holdCondition(ctx, "train", imperatorv1alpha1.HoldConditionProvisioned)(Default)).To(HaveField("Status", metav1.ConditionFalse))

		setNodePool(ctx, "kasumi", imperatorv1alpha1.NodePoolReady)
		Eventually(holdCondition(ctx, "train", imperatorv1alpha1.HoldConditionCapacityRevoked)).WithTimeout(30 * time.Second).Should(
			HaveField("Status", metav1.ConditionFalse))
		Expect(holdStatus(ctx, "train")(Default)).To(HaveField("Held", int32(2)))
		Expect(holdCondition(ctx, "train", imperatorv1alpha1.HoldConditionProvisioned)(Default)).To(HaveField("Status", metav1.ConditionTrue))
	})

	It("fails a hold of 5 of 4 with the numbers and holds nothing", func(ctx context.Context) {
		createHold(ctx, "big", 5, time.Now().Add(10*time.Minute))
		Eventually(holdCondition(ctx, "big", imperatorv1alpha1.HoldConditionFailed)).WithTimeout(30 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", imperatorv1alpha1.HoldReasonNotEnoughFreeUnits),
			HaveField("Message", "5 units of compute-small asked, 4 free: 4 available, 0 held by guests, 0 held by other holds, 0 queued guests, "+
				"0 reservation pods on nodes that are not ready or unschedulable; nothing is held")))
		Expect(holdStatus(ctx, "big")(Default)).To(HaveField("Held", int32(0)))
		Consistently(heldUnits(ctx)).WithTimeout(2 * time.Second).Should(BeZero())
		for _, name := range []string{"b1", "b2", "b3", "b4"} {
			Expect(k8s.Create(ctx, guest(teamB, name, "compute-small"))).To(Succeed())
		}
		Eventually(podStates(ctx, teamB)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{
			"b1": "Running", "b2": "Running", "b3": "Running", "b4": "Running"}))
		By("staying Failed once the units are free: the decision is final")
		Expect(holdCondition(ctx, "big", imperatorv1alpha1.HoldConditionFailed)(Default)).To(HaveField("Status", metav1.ConditionTrue))
	})

	It("makes only one of two holds created at once when the units suffice for one: the older, or the lower UID", func(ctx context.Context) {
		until := time.Now().Add(10 * time.Minute)
		createHold(ctx, "first", 3, until)
		createHold(ctx, "second", 3, until)
		phase := func(name string) func(Gomega) string {
			return func(g Gomega) string {
				status := holdStatus(ctx, name)(g)
				switch {
				case meta.IsStatusConditionTrue(status.Conditions, imperatorv1alpha1.HoldConditionFailed):
					return "Failed"
				case meta.IsStatusConditionTrue(status.Conditions, imperatorv1alpha1.HoldConditionProvisioned):
					return "Provisioned"
				}
				return "Pending"
			}
		}
		Eventually(func(g Gomega) []string { return []string{phase("first")(g), phase("second")(g)} }).WithTimeout(30 * time.Second).
			Should(ConsistOf("Provisioned", "Failed"))
		Consistently(heldUnits(ctx)).WithTimeout(2 * time.Second).Should(Equal(int32(3)))
	})

	It("fails a hold of a machine type no Machine offers", func(ctx context.Context) {
		hold := &imperatorv1alpha1.CapacityHold{
			ObjectMeta: metav1.ObjectMeta{Name: "nowhere"},
			Spec: imperatorv1alpha1.CapacityHoldSpec{MachineGroup: group, MachineType: "compute-huge", Count: 1,
				ValidUntil: metav1.NewTime(time.Now().Add(10 * time.Minute))},
		}
		Expect(k8s.Create(ctx, hold)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, hold))).To(Succeed()) })
		Eventually(holdCondition(ctx, "nowhere", imperatorv1alpha1.HoldConditionFailed)).WithTimeout(30 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", imperatorv1alpha1.HoldReasonMachineTypeNotFound)))
	})

	It("keeps holds across an agent restart: a new controller carries on with the same holds", func(ctx context.Context) {
		train := createHold(ctx, "train", 2, time.Now().Add(10*time.Minute))
		Eventually(holdCondition(ctx, "train", imperatorv1alpha1.HoldConditionProvisioned)).WithTimeout(30 * time.Second).Should(
			HaveField("Status", metav1.ConditionTrue))
		provisioned := holdCondition(ctx, "train", imperatorv1alpha1.HoldConditionProvisioned)(Default)

		By("stopping the controller and starting a new one")
		Expect(env.restartController(ctx)).To(Succeed())

		for _, name := range []string{"b1", "b2", "b3"} {
			Expect(k8s.Create(ctx, guest(teamB, name, "compute-small"))).To(Succeed())
		}
		waiting := map[string]string{"b1": "Running", "b2": "Running", "b3": "SchedulingGated"}
		Eventually(podStates(ctx, teamB)).WithTimeout(30 * time.Second).Should(Equal(waiting))
		Consistently(podStates(ctx, teamB)).WithTimeout(3 * time.Second).Should(Equal(waiting))
		Expect(holdStatus(ctx, "train")(Default)).To(HaveField("Held", int32(2)))
		Expect(holdCondition(ctx, "train", imperatorv1alpha1.HoldConditionProvisioned)(Default)).To(Equal(provisioned))
		Expect(k8s.Create(ctx, heldGuest(teamA, "t1", train))).To(Succeed())
		Eventually(podStates(ctx, teamA)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"t1": "Running"}))
	})

	It("does not count guests labelled with a hold's name that ran before the hold existed as its claims: the new hold holds all its units, and only its own guests take them", func(ctx context.Context) {
		By("running two guests labelled with the name of a hold nobody has created yet")
		for _, name := range []string{"s1", "s2"} {
			Expect(k8s.Create(ctx, squatter(teamA, name, "squat"))).To(Succeed())
		}
		Eventually(podStates(ctx, teamA)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"s1": "Running", "s2": "Running"}))

		By("creating the hold of that name: it holds both units, the running guests claim none")
		squat := createHold(ctx, "squat", 2, time.Now().Add(10*time.Minute))
		Eventually(holdCondition(ctx, "squat", imperatorv1alpha1.HoldConditionProvisioned)).WithTimeout(30 * time.Second).Should(
			HaveField("Status", metav1.ConditionTrue))
		Expect(holdCondition(ctx, "squat", imperatorv1alpha1.HoldConditionAccepted)(Default)).To(HaveField("Status", metav1.ConditionTrue))
		Expect(holdStatus(ctx, "squat")(Default)).To(And(HaveField("Held", int32(2)), HaveField("Claimed", int32(0))))
		Eventually(heldUnits(ctx)).WithTimeout(10 * time.Second).Should(Equal(int32(2)))

		By("another guest labelled with the name, without the hold's UID, waits in the ordinary line: 2 used, 2 held")
		Expect(k8s.Create(ctx, squatter(teamA, "s3", "squat"))).To(Succeed())
		Consistently(podStates(ctx, teamA)).WithTimeout(3 * time.Second).Should(HaveKeyWithValue("s3", "SchedulingGated"))
		Expect(holdStatus(ctx, "squat")(Default)).To(And(HaveField("Held", int32(2)), HaveField("Claimed", int32(0))))

		By("the holder's guest, stamped with the hold's UID, takes a held unit at once")
		Expect(k8s.Create(ctx, heldGuest(teamB, "t1", squat))).To(Succeed())
		Eventually(podStates(ctx, teamB)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"t1": "Running"}))
		Eventually(holdStatus(ctx, "squat")).WithTimeout(10 * time.Second).Should(And(HaveField("Held", int32(1)), HaveField("Claimed", int32(1))))
		Expect(podStates(ctx, teamA)(Default)).To(HaveKeyWithValue("s3", "SchedulingGated"))
	})

	It("does not let the guests of a deleted hold claim the hold created again under its name", func(ctx context.Context) {
		before := createHold(ctx, "train", 1, time.Now().Add(10*time.Minute))
		Eventually(holdStatus(ctx, "train")).WithTimeout(30 * time.Second).Should(HaveField("Held", int32(1)))
		Expect(k8s.Create(ctx, heldGuest(teamA, "t1", before))).To(Succeed())
		Eventually(podStates(ctx, teamA)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"t1": "Running"}))
		Eventually(holdStatus(ctx, "train")).WithTimeout(10 * time.Second).Should(HaveField("Claimed", int32(1)))

		By("deleting the hold and creating one of the same name: the first hold's guest is an ordinary guest of the type")
		Expect(k8s.Delete(ctx, before)).To(Succeed())
		Eventually(func() error {
			return k8s.Get(ctx, client.ObjectKeyFromObject(before), &imperatorv1alpha1.CapacityHold{})
		}).
			WithTimeout(10 * time.Second).Should(Satisfy(apierrors.IsNotFound))
		createHold(ctx, "train", 2, time.Now().Add(10*time.Minute))
		Eventually(holdCondition(ctx, "train", imperatorv1alpha1.HoldConditionProvisioned)).WithTimeout(30 * time.Second).Should(
			HaveField("Status", metav1.ConditionTrue))
		Expect(holdStatus(ctx, "train")(Default)).To(And(HaveField("Held", int32(2)), HaveField("Claimed", int32(0))))
		Eventually(heldUnits(ctx)).WithTimeout(10 * time.Second).Should(Equal(int32(2)))
	})
})
