package podinjector_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/podinjector"
	"github.com/imperator-federation/imperator/test/util/repo"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

var quantities = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

// loadGuestSample reads deploy/spoke/samples/guest-deployment.yaml: the
// team-a Namespace with injection enabled and the original Imperator's guest
// Deployment (docs/contract.md).
func loadGuestSample() (*corev1.Namespace, *appsv1.Deployment, error) {
	root, err := repo.Root()
	if err != nil {
		return nil, nil, err
	}
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "spoke", "samples", "guest-deployment.yaml"))
	if err != nil {
		return nil, nil, err
	}
	var ns *corev1.Namespace
	var deploy *appsv1.Deployment
	docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, nil, err
		}
		switch meta.Kind {
		case "Namespace":
			ns = &corev1.Namespace{}
			err = yaml.UnmarshalStrict(doc, ns)
		case "Deployment":
			deploy = &appsv1.Deployment{}
			err = yaml.UnmarshalStrict(doc, deploy)
		}
		if err != nil {
			return nil, nil, err
		}
	}
	if ns == nil || deploy == nil {
		return nil, nil, errors.New("guest-deployment.yaml lacks the Namespace or the Deployment")
	}
	return ns, deploy, nil
}

// podFromTemplate is the pod a ReplicaSet would create from the Deployment's
// template. envtest runs no controller-manager, so the test creates it itself:
// what reaches the webhook is the same object.
func podFromTemplate(deploy *appsv1.Deployment) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:    deploy.Namespace,
			GenerateName: deploy.Name + "-",
			Labels:       deploy.Spec.Template.Labels,
		},
		Spec: *deploy.Spec.Template.Spec.DeepCopy(),
	}
}

func guestPod(namespace string) *corev1.Pod {
	p := wrappers.MakePod(namespace, "").Guest("general-machine", "compute-xlarge").Obj()
	p.GenerateName = "guest-"
	return p
}

// ourTolerations are the pod's tolerations of imperator taints (the API
// server adds NoExecute not-ready/unreachable ones of its own).
func ourTolerations(pod *corev1.Pod) []corev1.Toleration {
	var tols []corev1.Toleration
	for _, t := range pod.Spec.Tolerations {
		if t.Effect == corev1.TaintEffectNoSchedule {
			tols = append(tols, t)
		}
	}
	return tols
}

// injectorRequests is how many admission requests the injector's webhook
// server has answered, from controller-runtime's webhook metrics.
func injectorRequests() float64 {
	GinkgoHelper()
	families, err := ctrlmetrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	var total float64
	for _, family := range families {
		if family.GetName() != "controller_runtime_webhook_requests_total" {
			continue
		}
		for _, metric := range family.GetMetric() {
			for _, label := range metric.GetLabel() {
				if label.GetName() == "webhook" && label.GetValue() == podinjector.WebhookPath {
					total += metric.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// expectUntouched checks that the pod reached the API server as written.
func expectUntouched(pod *corev1.Pod) {
	GinkgoHelper()
	Expect(pod.Annotations).NotTo(HaveKey(imperatorv1alpha1.InjectedAnnotation))
	Expect(ourTolerations(pod)).To(BeEmpty())
	Expect(pod.Spec.Affinity).To(BeNil())
	Expect(pod.Spec.Containers[0].Resources.Requests).To(BeEmpty())
	Expect(pod.Spec.Containers[0].Resources.Limits).To(BeEmpty())
}

var _ = Describe("Pod Resource Injector", func() {
	It("injects a Deployment's guest pods exactly as the original Imperator's Guest Pod example", func(ctx SpecContext) {
		// BeforeSuite created the sample's Namespace.
		_, deploy, err := loadGuestSample()
		Expect(err).NotTo(HaveOccurred())
		Expect(k8s.Create(ctx, deploy)).To(Succeed())

		pod := podFromTemplate(deploy)
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		got := &corev1.Pod{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), got)).To(Succeed())

		By("tolerating the machine type's and the node pool's taints")
		Expect(ourTolerations(got)).To(Equal([]corev1.Toleration{
			{Key: "imperator.tenzen-y.io/compute-xlarge", Operator: corev1.TolerationOpEqual, Value: "general-machine", Effect: corev1.TaintEffectNoSchedule},
			{Key: "imperator.tenzen-y.io/node-pool", Operator: corev1.TolerationOpEqual, Value: "ready", Effect: corev1.TaintEffectNoSchedule},
		}))

		By("requiring the machine type's ready nodes in one term")
		// The original Imperator's example selects nvidia.com/gpu.family=ampere, but its own
		// Machine gives compute-xlarge the product NVIDIA-GeForce-RTX-3090 and
		// no family: the injector follows the Machine.
		wantAffinity := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: "imperator.tenzen-y.io/compute-xlarge", Operator: corev1.NodeSelectorOpIn, Values: []string{"general-machine"}},
					{Key: "imperator.tenzen-y.io/node-pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"ready"}},
					{Key: "nvidia.com/gpu.product", Operator: corev1.NodeSelectorOpIn, Values: []string{"NVIDIA-GeForce-RTX-3090"}},
				},
			}}},
		}}
		Expect(cmp.Diff(wantAffinity, got.Spec.Affinity)).To(BeEmpty())

		By("giving training-container requests = limits = the machine type")
		shape := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("40000m"),
			corev1.ResourceMemory: resource.MustParse("128Gi"),
			"nvidia.com/gpu":      resource.MustParse("2"),
		}
		Expect(got.Spec.Containers).To(HaveLen(1))
		Expect(got.Spec.Containers[0].Name).To(Equal("training-container"))
		Expect(cmp.Diff(corev1.ResourceRequirements{Requests: shape, Limits: shape}, got.Spec.Containers[0].Resources, quantities)).To(BeEmpty())

		By("recording what was injected")
		Expect(got.Annotations).To(HaveKeyWithValue(imperatorv1alpha1.InjectedAnnotation,
			`{"machine":"general-machine","machineGroup":"general-machine","machineType":"compute-xlarge","container":"training-container"}`))
	})

	It("leaves the same pod untouched in a namespace without the label", func(ctx SpecContext) {
		_, deploy, err := loadGuestSample()
		Expect(err).NotTo(HaveOccurred())
		deploy.Namespace = disabledNamespace
		pod := podFromTemplate(deploy)
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		got := &corev1.Pod{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), got)).To(Succeed())
		expectUntouched(got)
	})

	It("honours the original Imperator's legacy namespace label", func(ctx SpecContext) {
		pod := guestPod(legacyNamespace)
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		Expect(pod.Annotations).To(HaveKeyWithValue(imperatorv1alpha1.InjectedAnnotation,
			`{"machine":"general-machine","machineGroup":"general-machine","machineType":"compute-xlarge","container":"main"}`))
		Expect(pod.Spec.Containers[0].Resources.Limits).To(HaveKeyWithValue(corev1.ResourceName("nvidia.com/gpu"), resource.MustParse("2")))
	})

	DescribeTable("never sends pods of excluded namespaces to the webhook, even when they are labelled",
		func(ctx SpecContext, namespace string) {
			// The webhook would deny this pod (its group does not exist), so
			// its creation proves the API server did not call it.
			pod := guestPod(namespace)
			pod.Labels[imperatorv1alpha1.MachineGroupKey] = "no-such-group"
			Expect(k8s.Create(ctx, pod)).To(Succeed())
			expectUntouched(pod)
			Expect(k8s.Delete(ctx, pod)).To(Succeed())
		},
		Entry("kube-system", metav1.NamespaceSystem),
		Entry("the agent's namespace", agentNamespace),
	)

	It("does not intercept pods that are not guests in an enabled namespace", func(ctx SpecContext) {
		// The handler would let this pod through too: only the webhook's
		// request count shows that the API server never called it.
		before := injectorRequests()
		pod := wrappers.MakePod("team-a", "web").Label(imperatorv1alpha1.PodRoleKey, "reservation").
			Label(imperatorv1alpha1.MachineGroupKey, "no-such-group").Obj()
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		expectUntouched(pod)
		Consistently(injectorRequests).WithTimeout(time.Second).Should(Equal(before))

		By("counting the call for a guest pod in the same namespace")
		Expect(k8s.Create(ctx, guestPod("team-a"))).To(Succeed())
		Eventually(injectorRequests).WithTimeout(5 * time.Second).Should(Equal(before + 1))
	})

	// Where an injected guest lands is the real scheduler's business: the
	// multi-cluster e2e suite (test/e2e) checks it on a full control plane.

	DescribeTable("never sends pods of an excluded namespace to the webhook, even when the namespace enables injection",
		func(ctx SpecContext, namespace string) {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(ns), ns); apierrors.IsNotFound(err) {
				Expect(k8s.Create(ctx, ns)).To(Succeed())
			} else {
				Expect(err).NotTo(HaveOccurred())
			}
			patch := client.MergeFrom(ns.DeepCopy())
			if ns.Labels == nil {
				ns.Labels = map[string]string{}
			}
			ns.Labels[imperatorv1alpha1.InjectResourceKey] = imperatorv1alpha1.InjectResourceEnabled
			Expect(k8s.Patch(ctx, ns, patch)).To(Succeed())
			DeferCleanup(func(ctx SpecContext) {
				patch := client.MergeFrom(ns.DeepCopy())
				delete(ns.Labels, imperatorv1alpha1.InjectResourceKey)
				Expect(k8s.Patch(ctx, ns, patch)).To(Succeed())
			})

			// The webhook would deny this pod (unknown group): being
			// admitted untouched proves it never reached the webhook.
			pod := guestPod(namespace)
			pod.Labels[imperatorv1alpha1.MachineGroupKey] = "no-such-group"
			Expect(k8s.Create(ctx, pod)).To(Succeed())
			expectUntouched(pod)
		},
		Entry("kube-system", metav1.NamespaceSystem),
		Entry("the agent's own namespace", agentNamespace),
	)

	DescribeTable("returns each denial's message to the client",
		func(ctx SpecContext, namespace, webhookName string, edit func(*corev1.Pod), wantMessage string) {
			pod := guestPod(namespace)
			edit(pod)
			err := k8s.Create(ctx, pod)
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "create error %v is not Forbidden", err)
			Expect(err.Error()).To(ContainSubstring(`admission webhook "` + webhookName + `" denied the request: ` + wantMessage))
		},
		Entry("unknown machine group", "team-a", podinjector.WebhookName,
			func(p *corev1.Pod) { p.Labels[imperatorv1alpha1.MachineGroupKey] = "no-such-group" },
			`unknown machine group "no-such-group"`),
		Entry("unknown machine type in the group", "team-a", podinjector.WebhookName,
			func(p *corev1.Pod) { p.Labels[imperatorv1alpha1.MachineTypeKey] = "compute-huge" },
			`unknown machine type "compute-huge" (label imperator.tenzen-y.io/machine-type) in machine group "general-machine"`),
		Entry("unknown injecting container", "team-a", podinjector.WebhookName,
			func(p *corev1.Pod) { p.Labels[imperatorv1alpha1.InjectingContainerKey] = "trainer" },
			`unknown injecting container "trainer"`),
		Entry("incomplete label set", "team-a", podinjector.WebhookName,
			func(p *corev1.Pod) { delete(p.Labels, imperatorv1alpha1.MachineTypeKey) },
			"incomplete guest pod labels"),
		Entry("affinity contradicting the machine type", "team-a", podinjector.WebhookName,
			func(p *corev1.Pod) {
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchExpressions: []corev1.NodeSelectorRequirement{
							{Key: imperatorv1alpha1.NodePoolKey, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"ready"}},
						},
					}}},
				}}
			},
			"spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]: "+
				"expression on imperator.tenzen-y.io/node-pool (NotIn [ready]) contradicts machine type \"compute-xlarge\""),
		Entry("guest naming its node", "team-a", podinjector.WebhookName,
			func(p *corev1.Pod) { p.Spec.NodeName = "michiru" },
			`spec.nodeName "michiru": a guest does not name its node; it waits for a unit of machine type "compute-xlarge" `+
				"at the scheduling gate imperator.tenzen-y.io/slot"),
		Entry("unknown machine group in a legacy-labelled namespace", legacyNamespace, podinjector.LegacyWebhookName,
			func(p *corev1.Pod) { p.Labels[imperatorv1alpha1.MachineGroupKey] = "no-such-group" },
			`unknown machine group "no-such-group"`),
	)

	It("stamps when it admitted each guest, overwriting a value the guest brought, so that the queue goes in arrival order", func(ctx SpecContext) {
		before := time.Now()
		first := guestPod("team-a")
		first.Annotations = map[string]string{imperatorv1alpha1.AdmittedAtAnnotation: "2000-01-01T00:00:00Z"}
		Expect(k8s.Create(ctx, first)).To(Succeed())
		second := guestPod("team-a")
		Expect(k8s.Create(ctx, second)).To(Succeed())

		admitted := func(pod *corev1.Pod) time.Time {
			GinkgoHelper()
			got := &corev1.Pod{}
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), got)).To(Succeed())
			Expect(got.Annotations).To(HaveKey(imperatorv1alpha1.AdmittedAtAnnotation))
			at, err := time.Parse(time.RFC3339Nano, got.Annotations[imperatorv1alpha1.AdmittedAtAnnotation])
			Expect(err).NotTo(HaveOccurred())
			Expect(got.Annotations[imperatorv1alpha1.AdmittedAtAnnotation]).To(HaveSuffix("Z"), "in UTC")
			return at
		}
		firstAt, secondAt := admitted(first), admitted(second)
		Expect(firstAt).To(BeTemporally(">=", before.Add(-time.Second)), "the user's value was kept")
		Expect(firstAt).To(BeTemporally("<=", time.Now()))
		Expect(secondAt).To(BeTemporally(">", firstAt), "two guests created within a second still have an order")
	})

	It("allows updates of an existing guest pod without re-injecting it", func(ctx SpecContext) {
		pod := guestPod("team-a")
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		injected := pod.DeepCopy()

		// Re-label it to another type and group that do not exist: an
		// injector intercepting updates would deny or re-inject this.
		patch := client.MergeFrom(pod.DeepCopy())
		pod.Labels[imperatorv1alpha1.MachineTypeKey] = "compute-medium"
		pod.Labels[imperatorv1alpha1.MachineGroupKey] = "no-such-group"
		pod.Labels["team"] = "vision"
		Expect(k8s.Patch(ctx, pod, patch)).To(Succeed())

		got := &corev1.Pod{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), got)).To(Succeed())
		Expect(got.Labels).To(HaveKeyWithValue("team", "vision"))
		Expect(got.Annotations).To(Equal(injected.Annotations))
		Expect(cmp.Diff(injected.Spec, got.Spec, quantities)).To(BeEmpty())
	})

})
