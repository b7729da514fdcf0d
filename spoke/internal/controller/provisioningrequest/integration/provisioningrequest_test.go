package provisioningrequest_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	pr "github.com/imperator-federation/imperator/spoke/internal/controller/provisioningrequest"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

const (
	group       = "general-machine"
	machineType = "compute-xlarge"
)

// podTemplate is what Kueue creates for a pod set: the Job's template with
// the guest labels, asking for one compute-xlarge unit when stated.
func podTemplate(name string, stated bool) *corev1.PodTemplate {
	return podTemplateIn(namespace, name, stated)
}

func podTemplateIn(ns, name string, stated bool) *corev1.PodTemplate {
	t := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	t.Template.Labels = map[string]string{imperatorv1alpha1.MachineGroupKey: group, imperatorv1alpha1.MachineTypeKey: machineType,
		imperatorv1alpha1.PodRoleKey: "guest"}
	c := corev1.Container{Name: "train", Image: "trainer"}
	if stated {
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("40"),
			corev1.ResourceMemory: resource.MustParse("128Gi"), "nvidia.com/gpu": resource.MustParse("2")}
		c.Resources.Limits = c.Resources.Requests
	}
	t.Template.Spec.Containers = []corev1.Container{c}
	return t
}

func request(name, class string, podSets ...pr.PodSet) *pr.ProvisioningRequest {
	return requestIn(namespace, name, class, podSets...)
}

func requestIn(ns, name, class string, podSets ...pr.PodSet) *pr.ProvisioningRequest {
	return &pr.ProvisioningRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: pr.ProvisioningRequestSpec{ProvisioningClassName: class, PodSets: podSets}}
}

func condition(ctx context.Context, name, conditionType string) func(Gomega) *metav1.Condition {
	return conditionIn(ctx, namespace, name, conditionType)
}

func conditionIn(ctx context.Context, ns, name, conditionType string) func(Gomega) *metav1.Condition {
	return func(g Gomega) *metav1.Condition {
		got := &pr.ProvisioningRequest{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, got)).To(Succeed())
		c := meta.FindStatusCondition(got.Status.Conditions, conditionType)
		g.Expect(c).NotTo(BeNil(), "condition %s of ProvisioningRequest %s", conditionType, name)
		return c
	}
}

// decide writes the status the Machine controller writes on a hold.
func decide(ctx context.Context, name string, conditions ...metav1.Condition) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		hold := &imperatorv1alpha1.CapacityHold{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, hold)).To(Succeed())
		for _, c := range conditions {
			c.ObservedGeneration = hold.Generation
			meta.SetStatusCondition(&hold.Status.Conditions, c)
		}
		g.Expect(k8s.Status().Update(ctx, hold)).To(Succeed())
	}).WithTimeout(10 * time.Second).Should(Succeed())
}

var _ = Describe("A ProvisioningRequest of the capacity-hold class", Ordered, func() {
	BeforeAll(func(ctx context.Context) {
		Expect(k8s.Create(ctx, wrappers.GeneralMachine().Obj())).To(Succeed())
		Expect(k8s.Create(ctx, podTemplate("stated", true))).To(Succeed())
		Expect(k8s.Create(ctx, podTemplate("injected", false))).To(Succeed())
	})

	It("is served once the CRD is installed after the agent started, no restart", func(ctx context.Context) {
		Consistently(servingLocal).WithTimeout(time.Second).Should(BeFalse(), "serving before the CRD exists")
		_, err := envtest.InstallCRDs(env.Config, prCRD)
		Expect(err).NotTo(HaveOccurred())
		Eventually(servingLocal).WithTimeout(20 * time.Second).Should(BeTrue())
		req := request("late", imperatorv1alpha1.CapacityHoldProvisioningClass, pr.PodSet{PodTemplateRef: pr.Reference{Name: "stated"}, Count: 1})
		Eventually(func() error { return k8s.Create(ctx, req) }).WithTimeout(10 * time.Second).Should(Succeed())
		holdName := pr.HoldName(namespace, "late", group, machineType)
		decide(ctx, holdName,
			metav1.Condition{Type: imperatorv1alpha1.HoldConditionAccepted, Status: metav1.ConditionTrue, Reason: imperatorv1alpha1.HoldReasonAccepted},
			metav1.Condition{Type: imperatorv1alpha1.HoldConditionProvisioned, Status: metav1.ConditionTrue, Reason: imperatorv1alpha1.HoldReasonUnitsHeld})
		Eventually(condition(ctx, "late", pr.ConditionProvisioned)).WithTimeout(10 * time.Second).Should(HaveField("Status", metav1.ConditionTrue))
		Expect(k8s.Delete(ctx, req)).To(Succeed())
		Eventually(func() error { return k8s.Get(ctx, client.ObjectKey{Name: holdName}, &imperatorv1alpha1.CapacityHold{}) }).
			WithTimeout(10 * time.Second).Should(Satisfy(apierrors.IsNotFound))
	})

	It("is held by one CapacityHold for its pod sets of one type, Provisioned once the hold is, and released when deleted", func(ctx context.Context) {
		req := request("train", imperatorv1alpha1.CapacityHoldProvisioningClass,
			pr.PodSet{PodTemplateRef: pr.Reference{Name: "stated"}, Count: 2}, pr.PodSet{PodTemplateRef: pr.Reference{Name: "stated"}, Count: 1})
		Expect(k8s.Create(ctx, req)).To(Succeed())
		holdName := pr.HoldName(namespace, "train", group, machineType)
		hold := &imperatorv1alpha1.CapacityHold{}
		Eventually(func() error { return k8s.Get(ctx, client.ObjectKey{Name: holdName}, hold) }).WithTimeout(10 * time.Second).Should(Succeed())
		Expect(hold.Spec).To(And(HaveField("MachineGroup", group), HaveField("MachineType", machineType), HaveField("Count", int32(3)),
			HaveField("Namespaces", Equal([]string{namespace}))))
		Expect(hold.Spec.ValidUntil.Time).To(BeTemporally("~", time.Now().Add(pr.BookingDuration), 30*time.Second))
		Eventually(condition(ctx, "train", pr.ConditionAccepted)).WithTimeout(10 * time.Second).Should(HaveField("Status", metav1.ConditionTrue))
		Eventually(condition(ctx, "train", pr.ConditionProvisioned)).WithTimeout(10 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", pr.ReasonWaitingForHold)))

		By("the Machine controller holding the units")
		decide(ctx, holdName,
			metav1.Condition{Type: imperatorv1alpha1.HoldConditionAccepted, Status: metav1.ConditionTrue, Reason: imperatorv1alpha1.HoldReasonAccepted},
			metav1.Condition{Type: imperatorv1alpha1.HoldConditionProvisioned, Status: metav1.ConditionTrue, Reason: imperatorv1alpha1.HoldReasonUnitsHeld})
		Eventually(condition(ctx, "train", pr.ConditionProvisioned)).WithTimeout(10 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", pr.ReasonProvisioned)))

		By("the pods claiming every unit: the booking is consumed, the units go back when they finish")
		Eventually(func(g Gomega) {
			got := &imperatorv1alpha1.CapacityHold{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: holdName}, got)).To(Succeed())
			got.Status.Claimed = 3
			g.Expect(k8s.Status().Update(ctx, got)).To(Succeed())
		}).WithTimeout(10 * time.Second).Should(Succeed())
		Eventually(func(g Gomega) {
			got := &imperatorv1alpha1.CapacityHold{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: holdName}, got)).To(Succeed())
			g.Expect(got.Spec.ValidUntil.Time).To(BeTemporally("~", time.Now(), 15*time.Second))
		}).WithTimeout(10 * time.Second).Should(Succeed())

		By("a node of the hold leaving the pool for a moment: Kueue would end the running job on CapacityRevoked, so the request is not told yet")
		revoked := metav1.Condition{Type: imperatorv1alpha1.HoldConditionCapacityRevoked, Status: metav1.ConditionTrue,
			Reason: imperatorv1alpha1.HoldReasonNodeLeftPool, Message: "node michiru left the ready pool"}
		decide(ctx, holdName, revoked)
		Consistently(func(g Gomega) bool {
			got := &pr.ProvisioningRequest{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "train"}, got)).To(Succeed())
			return meta.IsStatusConditionTrue(got.Status.Conditions, pr.ConditionCapacityRevoked)
		}).WithTimeout(3*time.Second).Should(BeFalse(), "CapacityRevoked of a request whose node left the pool a moment ago")

		By("the node staying out of the pool for the grace period")
		Eventually(func(g Gomega) {
			got := &imperatorv1alpha1.CapacityHold{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: holdName}, got)).To(Succeed())
			meta.RemoveStatusCondition(&got.Status.Conditions, revoked.Type)
			since := revoked
			since.ObservedGeneration = got.Generation
			since.LastTransitionTime = metav1.NewTime(time.Now().Add(-pr.RevokedGrace))
			meta.SetStatusCondition(&got.Status.Conditions, since)
			g.Expect(k8s.Status().Update(ctx, got)).To(Succeed())
		}).WithTimeout(10 * time.Second).Should(Succeed())
		Eventually(condition(ctx, "train", pr.ConditionCapacityRevoked)).WithTimeout(10 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Message", ContainSubstring("node michiru left the ready pool"))))

		By("deleting the request")
		Expect(k8s.Delete(ctx, req)).To(Succeed())
		Eventually(func() error { return k8s.Get(ctx, client.ObjectKey{Name: holdName}, &imperatorv1alpha1.CapacityHold{}) }).
			WithTimeout(10 * time.Second).Should(Satisfy(apierrors.IsNotFound))
	})

	It("says BookingExpired when its hold's booking expired", func(ctx context.Context) {
		Expect(k8s.Create(ctx, request("expiring", imperatorv1alpha1.CapacityHoldProvisioningClass,
			pr.PodSet{PodTemplateRef: pr.Reference{Name: "stated"}, Count: 1}))).To(Succeed())
		holdName := pr.HoldName(namespace, "expiring", group, machineType)
		decide(ctx, holdName,
			metav1.Condition{Type: imperatorv1alpha1.HoldConditionAccepted, Status: metav1.ConditionTrue, Reason: imperatorv1alpha1.HoldReasonAccepted},
			metav1.Condition{Type: imperatorv1alpha1.HoldConditionProvisioned, Status: metav1.ConditionTrue, Reason: imperatorv1alpha1.HoldReasonUnitsHeld})
		Eventually(condition(ctx, "expiring", pr.ConditionProvisioned)).WithTimeout(10 * time.Second).Should(HaveField("Status", metav1.ConditionTrue))
		decide(ctx, holdName, metav1.Condition{Type: imperatorv1alpha1.HoldConditionBookingExpired, Status: metav1.ConditionTrue,
			Reason: imperatorv1alpha1.HoldReasonExpired, Message: "validUntil passed"})
		Eventually(condition(ctx, "expiring", pr.ConditionBookingExpired)).WithTimeout(10 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", imperatorv1alpha1.HoldReasonExpired)))
	})

	It("fails with the hold's reason when too few units are free, and releases the hold", func(ctx context.Context) {
		Expect(k8s.Create(ctx, request("too-big", imperatorv1alpha1.CapacityHoldProvisioningClass,
			pr.PodSet{PodTemplateRef: pr.Reference{Name: "stated"}, Count: 5}))).To(Succeed())
		holdName := pr.HoldName(namespace, "too-big", group, machineType)
		message := "5 units asked, 1 free: nothing is held"
		decide(ctx, holdName,
			metav1.Condition{Type: imperatorv1alpha1.HoldConditionAccepted, Status: metav1.ConditionTrue, Reason: imperatorv1alpha1.HoldReasonAccepted},
			metav1.Condition{Type: imperatorv1alpha1.HoldConditionFailed, Status: metav1.ConditionTrue, Reason: imperatorv1alpha1.HoldReasonNotEnoughFreeUnits, Message: message})
		Eventually(condition(ctx, "too-big", pr.ConditionFailed)).WithTimeout(10 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", imperatorv1alpha1.HoldReasonNotEnoughFreeUnits),
			HaveField("Message", ContainSubstring(message))))
		Eventually(func() error { return k8s.Get(ctx, client.ObjectKey{Name: holdName}, &imperatorv1alpha1.CapacityHold{}) }).
			WithTimeout(10 * time.Second).Should(Satisfy(apierrors.IsNotFound))
	})

	It("fails, holding nothing, when its template relies on injection for the type's resources", func(ctx context.Context) {
		Expect(k8s.Create(ctx, request("injected", imperatorv1alpha1.CapacityHoldProvisioningClass,
			pr.PodSet{PodTemplateRef: pr.Reference{Name: "injected"}, Count: 1}))).To(Succeed())
		Eventually(condition(ctx, "injected", pr.ConditionFailed)).WithTimeout(10 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", pr.ReasonResourcesNotStated),
			HaveField("Message", ContainSubstring(`container "train" must request one unit of machine type compute-xlarge`))))
		Consistently(func() error {
			return k8s.Get(ctx, client.ObjectKey{Name: pr.HoldName(namespace, "injected", group, machineType)}, &imperatorv1alpha1.CapacityHold{})
		}).WithTimeout(2 * time.Second).Should(Satisfy(apierrors.IsNotFound))
	})

	It("fails, naming the labels to add, when its template has no guest labels but the shape of one type's unit", func(ctx context.Context) {
		plain := podTemplate("plain", true)
		plain.Template.Labels = nil
		Expect(k8s.Create(ctx, plain)).To(Succeed())
		Expect(k8s.Create(ctx, request("by-shape", imperatorv1alpha1.CapacityHoldProvisioningClass,
			pr.PodSet{PodTemplateRef: pr.Reference{Name: "plain"}, Count: 1}))).To(Succeed())
		Eventually(condition(ctx, "by-shape", pr.ConditionFailed)).WithTimeout(20 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", pr.ReasonPodSetNotMapped),
			HaveField("Message", ContainSubstring(`container "train" asks for exactly one unit of machine type compute-xlarge of machine group general-machine: `+
				"add the labels imperator.tenzen-y.io/machine-group=general-machine, imperator.tenzen-y.io/machine-type=compute-xlarge and imperator.tenzen-y.io/pod-role=guest"))))
		Expect(k8s.Get(ctx, client.ObjectKey{Name: pr.HoldName(namespace, "by-shape", group, machineType)}, &imperatorv1alpha1.CapacityHold{})).To(Satisfy(apierrors.IsNotFound))
	})

	It("fails, naming the pod set, when its template is missing", func(ctx context.Context) {
		Expect(k8s.Create(ctx, request("orphan", imperatorv1alpha1.CapacityHoldProvisioningClass,
			pr.PodSet{PodTemplateRef: pr.Reference{Name: "stated"}, Count: 1}, pr.PodSet{PodTemplateRef: pr.Reference{Name: "gone"}, Count: 1}))).To(Succeed())
		Eventually(condition(ctx, "orphan", pr.ConditionFailed)).WithTimeout(20 * time.Second).Should(And(
			HaveField("Reason", pr.ReasonPodSetNotMapped), HaveField("Message", ContainSubstring(`spec.podSets[1].podTemplateRef: PodTemplate "gone" does not exist`))))
	})

	It("fails HoldNameTaken, leaving that hold alone, when a hold not made for it has its hold's name (a fleet hold named so)", func(ctx context.Context) {
		holdName := pr.HoldName(namespace, "squatted", group, machineType)
		squatter := wrappers.MakeCapacityHold(holdName, group, machineType, 1).ValidUntil(time.Now().Add(time.Hour)).Namespaces("team-b").Obj()
		Expect(k8s.Create(ctx, squatter)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, squatter))).To(Succeed())
		})
		Expect(k8s.Create(ctx, request("squatted", imperatorv1alpha1.CapacityHoldProvisioningClass,
			pr.PodSet{PodTemplateRef: pr.Reference{Name: "stated"}, Count: 1}))).To(Succeed())
		Eventually(condition(ctx, "squatted", pr.ConditionFailed)).WithTimeout(10 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", pr.ReasonHoldNameTaken),
			HaveField("Message", ContainSubstring("is taken by a hold not made for it"))))
		Consistently(func(g Gomega) {
			got := &imperatorv1alpha1.CapacityHold{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: holdName}, got)).To(Succeed())
			g.Expect(got.UID).To(Equal(squatter.UID))
		}).WithTimeout(2 * time.Second).Should(Succeed())
	})

	It("fails NamespaceNotInjected, holding nothing, in a namespace not opted in to injection", func(ctx context.Context) {
		Expect(k8s.Create(ctx, podTemplateIn(notInjected, "stated", true))).To(Succeed())
		Expect(k8s.Create(ctx, requestIn(notInjected, "outside", imperatorv1alpha1.CapacityHoldProvisioningClass,
			pr.PodSet{PodTemplateRef: pr.Reference{Name: "stated"}, Count: 1}))).To(Succeed())
		Eventually(conditionIn(ctx, notInjected, "outside", pr.ConditionFailed)).WithTimeout(20 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", pr.ReasonNamespaceNotInjected),
			HaveField("Message", ContainSubstring("namespace team-b is not opted in to guest injection (label imperator.tenzen-y.io/inject-resource=enabled)"))))
		Expect(k8s.Get(ctx, client.ObjectKey{Name: pr.HoldName(notInjected, "outside", group, machineType)}, &imperatorv1alpha1.CapacityHold{})).
			To(Satisfy(apierrors.IsNotFound))
	})

	It("fails NamespaceCapReached when its namespace's requests would hold more than the cap", func(ctx context.Context) {
		Expect(k8s.Create(ctx, podTemplateIn(capped, "stated", true))).To(Succeed())
		Expect(k8s.Create(ctx, requestIn(capped, "first", imperatorv1alpha1.CapacityHoldProvisioningClass,
			pr.PodSet{PodTemplateRef: pr.Reference{Name: "stated"}, Count: 4}))).To(Succeed())
		Eventually(func() error {
			return k8s.Get(ctx, client.ObjectKey{Name: pr.HoldName(capped, "first", group, machineType)}, &imperatorv1alpha1.CapacityHold{})
		}).WithTimeout(10 * time.Second).Should(Succeed())
		Expect(k8s.Create(ctx, requestIn(capped, "second", imperatorv1alpha1.CapacityHoldProvisioningClass,
			pr.PodSet{PodTemplateRef: pr.Reference{Name: "stated"}, Count: 3}))).To(Succeed())
		Eventually(conditionIn(ctx, capped, "second", pr.ConditionFailed)).WithTimeout(10 * time.Second).Should(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", pr.ReasonNamespaceCapReached),
			HaveField("Message", ContainSubstring("namespace team-c's ProvisioningRequests hold 4 units (requests: first) and this one asks 3 more: above the cap of 6 units per namespace"))))
		Expect(k8s.Get(ctx, client.ObjectKey{Name: pr.HoldName(capped, "second", group, machineType)}, &imperatorv1alpha1.CapacityHold{})).
			To(Satisfy(apierrors.IsNotFound))

		By("a request that fits beside the first")
		Expect(k8s.Create(ctx, requestIn(capped, "third", imperatorv1alpha1.CapacityHoldProvisioningClass,
			pr.PodSet{PodTemplateRef: pr.Reference{Name: "stated"}, Count: 2}))).To(Succeed())
		Eventually(func() error {
			return k8s.Get(ctx, client.ObjectKey{Name: pr.HoldName(capped, "third", group, machineType)}, &imperatorv1alpha1.CapacityHold{})
		}).WithTimeout(10 * time.Second).Should(Succeed())
	})

	It("does not end a booking for pods created before its hold that carry the hold's UID (they claim nothing)", func(ctx context.Context) {
		var early []*corev1.Pod
		for _, name := range []string{"early-0", "early-1"} {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
				Labels: map[string]string{imperatorv1alpha1.MachineGroupKey: group, imperatorv1alpha1.MachineTypeKey: machineType,
					imperatorv1alpha1.PodRoleKey: "guest"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "train", Image: "trainer"}}}}
			Expect(k8s.Create(ctx, pod)).To(Succeed())
			DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, pod))).To(Succeed()) })
			early = append(early, pod)
		}
		// Creation timestamps have one-second resolution: the hold must be
		// created in a later second than the pods.
		time.Sleep(time.Until(early[1].CreationTimestamp.Add(1100 * time.Millisecond)))
		Expect(k8s.Create(ctx, request("early", imperatorv1alpha1.CapacityHoldProvisioningClass,
			pr.PodSet{PodTemplateRef: pr.Reference{Name: "stated"}, Count: 2}))).To(Succeed())
		holdName := pr.HoldName(namespace, "early", group, machineType)
		decide(ctx, holdName,
			metav1.Condition{Type: imperatorv1alpha1.HoldConditionAccepted, Status: metav1.ConditionTrue, Reason: imperatorv1alpha1.HoldReasonAccepted},
			metav1.Condition{Type: imperatorv1alpha1.HoldConditionProvisioned, Status: metav1.ConditionTrue, Reason: imperatorv1alpha1.HoldReasonUnitsHeld})
		Eventually(condition(ctx, "early", pr.ConditionProvisioned)).WithTimeout(10 * time.Second).Should(HaveField("Status", metav1.ConditionTrue))
		hold := &imperatorv1alpha1.CapacityHold{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: holdName}, hold)).To(Succeed())
		Expect(hold.CreationTimestamp.After(early[1].CreationTimestamp.Time)).To(BeTrue())

		By("the pods writing the hold's UID and the request's annotations themselves, past the injector")
		for _, pod := range early {
			patch := client.MergeFrom(pod.DeepCopy())
			pod.Annotations = map[string]string{imperatorv1alpha1.HoldUIDAnnotation: string(hold.UID),
				imperatorv1alpha1.ConsumeProvisioningRequestAnnotation: "early",
				imperatorv1alpha1.ProvisioningClassNameAnnotation:      imperatorv1alpha1.CapacityHoldProvisioningClass}
			Expect(k8s.Patch(ctx, pod, patch)).To(Succeed())
		}
		Consistently(func(g Gomega) time.Time {
			got := &imperatorv1alpha1.CapacityHold{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: holdName}, got)).To(Succeed())
			return got.Spec.ValidUntil.Time
		}).WithTimeout(3*time.Second).Should(BeTemporally("~", hold.Spec.ValidUntil.Time, time.Second), "the booking of a hold no pod claims ended")
	})

	It("leaves a request of another class alone", func(ctx context.Context) {
		Expect(k8s.Create(ctx, request("other", "check-capacity.autoscaling.x-k8s.io",
			pr.PodSet{PodTemplateRef: pr.Reference{Name: "stated"}, Count: 1}))).To(Succeed())
		Consistently(func(g Gomega) []metav1.Condition {
			got := &pr.ProvisioningRequest{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "other"}, got)).To(Succeed())
			return got.Status.Conditions
		}).WithTimeout(3 * time.Second).Should(BeEmpty())
	})

	// Last: the CRD is gone for the rest of the suite.
	It("stops being served, its holds released, when the CRD is removed", func(ctx context.Context) {
		Expect(k8s.Create(ctx, request("before-removal", imperatorv1alpha1.CapacityHoldProvisioningClass,
			pr.PodSet{PodTemplateRef: pr.Reference{Name: "stated"}, Count: 1}))).To(Succeed())
		holdName := pr.HoldName(namespace, "before-removal", group, machineType)
		Eventually(func() error { return k8s.Get(ctx, client.ObjectKey{Name: holdName}, &imperatorv1alpha1.CapacityHold{}) }).
			WithTimeout(10 * time.Second).Should(Succeed())
		Expect(envtest.UninstallCRDs(env.Config, prCRD)).To(Succeed())
		Eventually(servingLocal).WithTimeout(30 * time.Second).Should(BeFalse())
		Eventually(func() error { return k8s.Get(ctx, client.ObjectKey{Name: holdName}, &imperatorv1alpha1.CapacityHold{}) }).
			WithTimeout(10 * time.Second).Should(Satisfy(apierrors.IsNotFound))
		By("the agent going on: a CapacityHold of anyone's is untouched")
		other := wrappers.MakeCapacityHold("after-removal", group, machineType, 1).ValidUntil(time.Now().Add(time.Hour)).Obj()
		Expect(k8s.Create(ctx, other)).To(Succeed())
		Consistently(func() error {
			return k8s.Get(ctx, client.ObjectKey{Name: other.Name}, &imperatorv1alpha1.CapacityHold{})
		}).
			WithTimeout(time.Second).Should(Succeed())
	})
})
