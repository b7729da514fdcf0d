package podinjector_test

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/admissionpolicy"
	"github.com/imperator-federation/imperator/test/util/framework"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

var _ = Describe("The policy path's holds and groups: a hold's UID stamped as the webhook stamps it, one Machine per group", Ordered, func() {
	var (
		policyEnv *framework.Environment
		clientset kubernetes.Interface
	)
	const (
		holders   = "team-holders"
		outsiders = "team-outsiders"
	)

	BeforeAll(func(ctx context.Context) {
		policyEnv, clientset = startPolicyPath(ctx, holders, outsiders)
	}, NodeTimeout(2*time.Minute))

	// stamped waits until the agent stamped the guest's arrival and returns
	// its annotations then.
	stamped := func(ctx context.Context, namespace, name string) map[string]string {
		pod := &corev1.Pod{}
		Eventually(func(g Gomega) {
			g.Expect(policyEnv.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod)).To(Succeed())
			g.Expect(pod.Annotations).To(HaveKey(imperatorv1alpha1.AdmittedAtAnnotation))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		return pod.Annotations
	}
	// nextSecond waits until the clock has left the second of t, so that
	// what is created next is created after t.
	nextSecond := func(ctx context.Context, t metav1.Time) {
		Eventually(func() int64 { return time.Now().Unix() }).WithContext(ctx).WithTimeout(3 * time.Second).
			WithPolling(20 * time.Millisecond).Should(BeNumerically(">", t.Unix()))
	}

	It("stamps the UID of the hold a guest names, only for the hold's namespaces and guests created after it, and drops a UID the tenant wrote", func(ctx context.Context) {
		hold := wrappers.MakeCapacityHold("holders-hold", group, "compute-xlarge", 1).Namespaces(holders).Obj()
		Expect(policyEnv.Client.Create(ctx, hold)).To(Succeed())

		By("creating, while the agent is down, a guest naming a hold that does not exist yet, then that hold")
		early := guestOf(holders, "early", "compute-xlarge", "main")
		early.Labels[imperatorv1alpha1.HoldKey] = "late-hold"
		Expect(policyEnv.Client.Create(ctx, early)).To(Succeed())
		late := wrappers.MakeCapacityHold("late-hold", group, "compute-xlarge", 1).Obj()
		Expect(policyEnv.Client.Create(ctx, late)).To(Succeed())
		nextSecond(ctx, late.CreationTimestamp)
		nextSecond(ctx, hold.CreationTimestamp)

		By("creating guests: one naming the hold, one from a namespace the hold does not allow, one writing the hold's UID itself")
		claimer := guestOf(holders, "claimer", "compute-xlarge", "main")
		claimer.Labels[imperatorv1alpha1.HoldKey] = hold.Name
		outsider := guestOf(outsiders, "outsider", "compute-xlarge", "main")
		outsider.Labels[imperatorv1alpha1.HoldKey] = hold.Name
		forger := guestOf(holders, "forger", "compute-xlarge", "main")
		forger.Annotations = map[string]string{
			imperatorv1alpha1.HoldUIDAnnotation:    string(hold.UID),
			imperatorv1alpha1.AdmittedAtAnnotation: time.Unix(time.Now().Unix(), 999_999_999).UTC().Format(time.RFC3339Nano),
		}
		for _, pod := range []*corev1.Pod{claimer, outsider, forger} {
			Expect(policyEnv.Client.Create(ctx, pod)).To(Succeed())
		}
		Expect(forger.Annotations).NotTo(HaveKey(imperatorv1alpha1.HoldUIDAnnotation), "the policy keeps a hold UID the tenant wrote")
		Expect(forger.Annotations).NotTo(HaveKey(imperatorv1alpha1.AdmittedAtAnnotation), "the policy keeps an admitted-at the tenant wrote")

		By("starting the agent: it stamps the arrivals, and the hold's UID on the claimer only")
		DeferCleanup(startFirstSight(policyEnv, clientset))
		Expect(stamped(ctx, holders, claimer.Name)).To(HaveKeyWithValue(imperatorv1alpha1.HoldUIDAnnotation, string(hold.UID)))
		Expect(stamped(ctx, outsiders, outsider.Name)).NotTo(HaveKey(imperatorv1alpha1.HoldUIDAnnotation))
		Expect(stamped(ctx, holders, forger.Name)).NotTo(HaveKey(imperatorv1alpha1.HoldUIDAnnotation))
		Expect(stamped(ctx, holders, early.Name)).NotTo(HaveKey(imperatorv1alpha1.HoldUIDAnnotation),
			"a guest created before its hold claims it")
	}, SpecTimeout(2*time.Minute))

	It("refuses the guests of a group two Machines carry, as the webhook does, and admits them again when one is left", func(ctx context.Context) {
		twin := wrappers.MakeMachine("general-machine-twin", group).Type("compute-xlarge", "1", "1Gi", 1).Obj()
		reconcileBindings := func() {
			_, err := (&admissionpolicy.Reconciler{Client: policyEnv.Client, Enabled: true}).Reconcile(ctx, reconcile.Request{})
			Expect(err).NotTo(HaveOccurred())
		}
		By("creating a second Machine of the group on both API servers")
		for _, c := range []client.Client{policyEnv.Client, k8s} {
			Expect(c.Create(ctx, twin.DeepCopy())).To(Succeed())
		}
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, twin.DeepCopy()))).To(Succeed())
		})
		reconcileBindings()
		Eventually(func(g Gomega) {
			err := k8s.Create(ctx, guestOf("team-a", "twin-probe", "compute-xlarge", "main"), client.DryRunAll)
			g.Expect(err).To(MatchError(ContainSubstring("ambiguous machine group")))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		Eventually(func(g Gomega) {
			err := policyEnv.Client.Create(ctx, guestOf(holders, "twin-probe", "compute-xlarge", "main"), client.DryRunAll)
			g.Expect(err).To(MatchError(ContainSubstring(`ambiguous machine group "` + group + `"`)))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

		By("deleting it: the group's guests are admitted and injected once")
		Expect(policyEnv.Client.Delete(ctx, twin.DeepCopy())).To(Succeed())
		reconcileBindings()
		Eventually(func(g Gomega) {
			pod := guestOf(holders, "twin-probe", "compute-xlarge", "main")
			g.Expect(policyEnv.Client.Create(ctx, pod, client.DryRunAll)).To(Succeed())
			g.Expect(pod.Annotations[imperatorv1alpha1.InjectedAnnotation]).To(ContainSubstring(`"machine":"general-machine"`))
			g.Expect(strings.Count(pod.Annotations[imperatorv1alpha1.InjectedAnnotation], `"machine"`)).To(Equal(1))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	}, SpecTimeout(2*time.Minute))

	It("stamps the guests after one whose stamp the API server refuses, instead of retrying that one before them forever", func(ctx context.Context) {
		By("measuring the annotations the policy gives a guest")
		probe := guestOf(holders, "bloated", "compute-xlarge", "main")
		probe.Annotations = map[string]string{"example.com/bloat": "x"}
		Expect(policyEnv.Client.Create(ctx, probe, client.DryRunAll)).To(Succeed())
		size := 0
		for k, v := range probe.Annotations {
			size += len(k) + len(v)
		}
		By("creating a guest whose annotations leave no room for the agent's stamp (the API server's 256 KiB limit)")
		const limit = 256 * 1024
		bloated := guestOf(holders, "bloated", "compute-xlarge", "main")
		bloated.Annotations = map[string]string{"example.com/bloat": strings.Repeat("x", 1+limit-size-8)}
		Expect(policyEnv.Client.Create(ctx, bloated)).To(Succeed())
		nextSecond(ctx, bloated.CreationTimestamp)
		after := guestOf(holders, "after-bloated", "compute-xlarge", "main")
		Expect(policyEnv.Client.Create(ctx, after)).To(Succeed())

		By("starting the agent: the guest after it is stamped, the bloated one is left as it is")
		DeferCleanup(startFirstSight(policyEnv, clientset))
		Expect(stamped(ctx, holders, after.Name)).To(HaveKey(imperatorv1alpha1.AdmittedAtAnnotation))
		Expect(policyEnv.Client.Get(ctx, client.ObjectKeyFromObject(bloated), bloated)).To(Succeed())
		Expect(bloated.Annotations).NotTo(HaveKey(imperatorv1alpha1.AdmittedAtAnnotation))
	}, SpecTimeout(2*time.Minute))
})
