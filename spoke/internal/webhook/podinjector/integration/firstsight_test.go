package podinjector_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/podinjector"
	"github.com/imperator-federation/imperator/test/util/framework"
)

var _ = Describe("The policy path with the agent away: arrival order by its first sight across a restart, and no guest refused", Ordered, func() {
	var (
		policyEnv *framework.Environment
		clientset kubernetes.Interface
	)
	const namespace = "team-fifo"

	BeforeAll(func(ctx context.Context) {
		policyEnv, clientset = startPolicyPath(ctx, namespace)
	}, NodeTimeout(2*time.Minute))

	// createGuests creates guests one after the other (each committed
	// before the next is sent): their arrival order is their index.
	createGuests := func(ctx context.Context, from, to int) {
		for i := from; i < to; i++ {
			Expect(policyEnv.Client.Create(ctx, guestOf(namespace, fmt.Sprintf("guest-%02d", i), "compute-xlarge", "main"))).To(Succeed())
		}
	}
	// line is the guests in the Machine controller's order: admitted-at
	// (the queue takes a stamp within the creation second), then UID.
	line := func(g Gomega, ctx context.Context) []string {
		var pods corev1.PodList
		g.Expect(policyEnv.Client.List(ctx, &pods, client.InNamespace(namespace))).To(Succeed())
		stamp := func(p *corev1.Pod) time.Time {
			t, err := time.Parse(time.RFC3339Nano, p.Annotations[imperatorv1alpha1.AdmittedAtAnnotation])
			g.Expect(err).NotTo(HaveOccurred(), "%s has no admitted-at stamp", p.Name)
			g.Expect(t.Unix()).To(Equal(p.CreationTimestamp.Unix()), "%s is stamped outside its creation second", p.Name)
			return t
		}
		items := make([]*corev1.Pod, len(pods.Items))
		for i := range pods.Items {
			items[i] = &pods.Items[i]
		}
		slices.SortFunc(items, func(a, b *corev1.Pod) int {
			if c := stamp(a).Compare(stamp(b)); c != 0 {
				return c
			}
			return cmp.Compare(a.UID, b.UID)
		})
		names := make([]string, len(items))
		for i, p := range items {
			names[i] = p.Name
		}
		return names
	}
	arrival := func(n int) []string {
		names := make([]string, n)
		for i := range n {
			names[i] = fmt.Sprintf("guest-%02d", i)
		}
		return names
	}

	It("stamps guests in the order they were created, also those created while the agent was down", func(ctx context.Context) {
		By("creating 8 guests while the agent runs")
		stop := startFirstSight(policyEnv, clientset)
		createGuests(ctx, 0, 8)
		Eventually(func(g Gomega) []string { return line(g, ctx) }).WithContext(ctx).WithTimeout(30 * time.Second).
			Should(Equal(arrival(8)))

		By("stopping the agent and creating 8 more, named so that name order is not arrival order")
		stop()
		for i := 8; i < 16; i++ {
			// Names in reverse: a list returns them by name.
			Expect(policyEnv.Client.Create(ctx, guestOf(namespace, fmt.Sprintf("guest-%02d", 8+15-i), "compute-xlarge", "main"))).To(Succeed())
		}
		var pods corev1.PodList
		Expect(policyEnv.Client.List(ctx, &pods, client.InNamespace(namespace))).To(Succeed())
		unstamped := 0
		for _, p := range pods.Items {
			g := p.Spec.SchedulingGates
			Expect(g).To(ContainElement(corev1.PodSchedulingGate{Name: imperatorv1alpha1.SlotSchedulingGate}), "%s admitted ungated while the agent is down", p.Name)
			if _, ok := p.Annotations[imperatorv1alpha1.AdmittedAtAnnotation]; !ok {
				unstamped++
			}
		}
		Expect(unstamped).To(Equal(8), "guests created while the agent is down are admitted, gated, and not stamped yet")

		By("starting the agent again: the line is the arrival order")
		stop = startFirstSight(policyEnv, clientset)
		DeferCleanup(stop)
		want := arrival(8)
		for i := 8; i < 16; i++ {
			want = append(want, fmt.Sprintf("guest-%02d", 8+15-i))
		}
		Eventually(func(g Gomega) []string { return line(g, ctx) }).WithContext(ctx).WithTimeout(30 * time.Second).
			Should(Equal(want))
	}, SpecTimeout(2*time.Minute))

	It("refuses every guest create with the webhook registered and the agent down, and none without it", func(ctx context.Context) {
		const n = 20
		create := func(prefix string) (refused int) {
			for i := range n {
				if err := policyEnv.Client.Create(ctx, guestOf(namespace, fmt.Sprintf("%s-%02d", prefix, i), "compute-xlarge", "main")); err != nil {
					refused++
				}
			}
			return refused
		}
		By("the policy path, no agent: every guest admitted")
		Expect(create("down-policy")).To(Equal(0))

		By("registering the injector's webhook at an address where no agent answers (the webhook path while the agent is down)")
		url := "https://127.0.0.1:1" + podinjector.WebhookPath
		registration := podinjector.MutatingWebhookConfiguration(webhookConfigurationName, agentNamespace,
			admissionregistrationv1.WebhookClientConfig{URL: &url})
		Expect(policyEnv.Client.Create(ctx, registration)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(policyEnv.Client.Delete(ctx, registration))).To(Succeed())
		})
		Eventually(func() error {
			return policyEnv.Client.Create(ctx, guestOf(namespace, "probe", "compute-xlarge", "main"), client.DryRunAll)
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(HaveOccurred())
		refused := create("down-webhook")
		AddReportEntry("guest creates refused while the agent is down", map[string]string{
			"policy": fmt.Sprintf("0 of %d", n), "webhook": fmt.Sprintf("%d of %d", refused, n)})
		Expect(refused).To(Equal(n))
	}, SpecTimeout(2*time.Minute))
})
