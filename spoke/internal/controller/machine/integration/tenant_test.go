package machine_test

import (
	"context"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// What a tenant who may only create pods can do to a machine type's count:
// nothing. Pods the injector did not admit (no record) count nowhere, and
// guests no ready node can take hold no unit.
var _ = Describe("Pods a tenant creates to make a machine type look full", func() {
	// fourReserved is general-machine offering 4 compute-small on kasumi,
	// with its 4 reservation pods Running.
	fourReserved := func(ctx context.Context) {
		GinkgoHelper()
		createMachine(ctx, smallMachine(4))
		Eventually(usage(ctx, machineName)).WithTimeout(60 * time.Second).Should(HaveKeyWithValue("compute-small", u(4, 4, 0, 0)))
		Eventually(func(g Gomega) { g.Expect(runningReservations(ctx, g, "compute-small")).To(Equal(4)) }).WithTimeout(30 * time.Second).Should(Succeed())
	}
	// nowhere is a nodeSelector no node matches: the pod stays Pending and
	// costs its creator nothing.
	nowhere := map[string]string{"topology.kubernetes.io/zone": "nowhere"}

	It("leaves the reservation and the Machine's usage unchanged for four Pending pods with the guest labels in a namespace that never opted in, and names them in StrayGuests", func(ctx context.Context) {
		fourReserved(ctx)
		squat := createGuestNamespace(ctx, nil)

		By("creating four pods labelled as compute-small guests, without the injector's record, that no node can take")
		for i := range 4 {
			pod := wrappers.MakePod(squat, "squat-"+strconv.Itoa(i)).Guest(group, "compute-small").Obj()
			pod.Spec.NodeSelector = nowhere
			Expect(k8s.Create(ctx, pod)).To(Succeed())
		}
		Eventually(condition(ctx, machineName, imperatorv1alpha1.ConditionStrayGuests)).WithTimeout(30 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionTrue),
			HaveField("Reason", imperatorv1alpha1.ReasonGuestsNotAdmitted),
			HaveField("Message", "compute-small: 4 pods labelled as its guests were not admitted by the pod injector "+
				"(no imperator.tenzen-y.io/injected record for this group and type) and count as nothing (namespaces "+squat+")")))
		Eventually(func(g Gomega) []string {
			return eventsAbout(ctx, g, machineName, imperatorv1alpha1.ReasonGuestsNotAdmitted)
		}).WithTimeout(10 * time.Second).Should(HaveLen(1))

		By("keeping 4 of 4 reserved, and nothing used or waiting")
		Consistently(func(g Gomega) {
			g.Expect(usage(ctx, machineName)(g)).To(HaveKeyWithValue("compute-small", u(4, 4, 0, 0)))
			g.Expect(runningReservations(ctx, g, "compute-small")).To(Equal(4))
		}).WithTimeout(5 * time.Second).Should(Succeed())

		By("a real guest still runs at once")
		guests := createGuestNamespace(ctx, injectionEnabled)
		Expect(k8s.Create(ctx, guest(guests, "real", "compute-small"))).To(Succeed())
		Eventually(podStates(ctx, guests)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"real": "Running"}))
		Eventually(usage(ctx, machineName)).WithTimeout(10 * time.Second).Should(HaveKeyWithValue("compute-small", u(4, 3, 1, 0)))

		By("deleting the stray pods: StrayGuests turns False")
		Expect(k8s.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(squat), client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(condition(ctx, machineName, imperatorv1alpha1.ConditionStrayGuests)).WithTimeout(30 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", imperatorv1alpha1.ReasonNoStrayGuests)))
	})

	It("keeps every unit reserved while guests of an opted-in namespace wait that no node can take, tells them so, and lets a guest a node can take run at once", func(ctx context.Context) {
		fourReserved(ctx)
		guests := createGuestNamespace(ctx, injectionEnabled)

		By("creating four injected guests whose nodeSelector no node matches")
		for i := range 4 {
			pod := guest(guests, "picky-"+strconv.Itoa(i), "compute-small")
			pod.Spec.NodeSelector = nowhere
			Expect(k8s.Create(ctx, pod)).To(Succeed())
		}
		unplaceable := imperatorv1alpha1.Usage{Maximum: 4, Reserved: 4, Waiting: 4, Queued: 4, Unplaceable: 4}
		Eventually(usage(ctx, machineName)).WithTimeout(30 * time.Second).Should(HaveKeyWithValue("compute-small", unplaceable))
		Consistently(func(g Gomega) {
			g.Expect(usage(ctx, machineName)(g)).To(HaveKeyWithValue("compute-small", unplaceable))
			g.Expect(runningReservations(ctx, g, "compute-small")).To(Equal(4))
		}).WithTimeout(5 * time.Second).Should(Succeed())
		Expect(queueNote(ctx, guests, "picky-0")(Default)).To(HaveSuffix(
			"no imperator.tenzen-y.io/node-pool=ready node of the type can take it now (its nodeSelector, required node affinity or tolerations): " +
				"it keeps its place in line and holds no unit until one can"))

		By("a guest a node can take runs at once, in a unit a reservation pod gives up")
		Expect(k8s.Create(ctx, guest(guests, "plain", "compute-small"))).To(Succeed())
		Eventually(func(g Gomega) string { return podStates(ctx, guests)(g)["plain"] }).WithTimeout(30 * time.Second).Should(Equal("Running"))
		withPlain := imperatorv1alpha1.Usage{Maximum: 4, Reserved: 3, Used: 1, Waiting: 4, Queued: 4, Unplaceable: 4}
		Eventually(usage(ctx, machineName)).WithTimeout(10 * time.Second).Should(HaveKeyWithValue("compute-small", withPlain))
		Expect(podEventNotes(ctx, Default, guests, "plain", "FailedScheduling")).To(BeEmpty())
	})
})
