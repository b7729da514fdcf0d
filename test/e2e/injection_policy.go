package e2e

import (
	"context"
	"fmt"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// InjectionPolicyInput configures InjectionPolicySpec.
type InjectionPolicyInput struct {
	Env   *Env
	Spoke string
	// Namespace, Node and Machine are the journey's own, created and
	// deleted by it; the Machine's one type offers Available units on Node.
	Namespace, Node, Machine string
	Available                int32
	// Guests are created while the agent is down, more than Available.
	Guests int
}

// injectionSwitch is what of the fleet the journey drives (*fleet.Fleet):
// the agent's --injection, the policies of deploy/spoke/policy/injection,
// and a node of its own. An attached fleet has none: the journey is skipped.
type injectionSwitch interface {
	SetAgentInjection(spoke, mode string)
	InstallInjectionPolicies(ctx context.Context, spoke string) error
	UninstallInjectionPolicies(ctx context.Context, spoke string) error
	AddSpokeNode(ctx context.Context, spoke string, node *corev1.Node) error
	DeleteSpokeNode(ctx context.Context, spoke, name string) error
}

// InjectionPolicySpec is journey 13: on Kubernetes 1.36 the API server
// injects guests itself (MutatingAdmissionPolicy, the agent's
// --injection=policy; docs/contract.md, "Injection by admission policy").
// The spoke's agent is switched to the policy path; with the agent stopped,
// guests are still admitted (none refused), injected with their unit and
// held at the slot gate; once the agent is back it lets the first of them
// through in the order they arrived, not in name order, and the rest wait
// in that order. The spoke goes back to the webhook afterwards.
func InjectionPolicySpec(ctx context.Context, in InjectionPolicyInput) {
	sw, ok := in.Env.Fleet.(injectionSwitch)
	if !ok {
		Skip("the attached fleet's agents cannot be restarted with another --injection")
	}
	spoke := in.Env.Spoke(in.Spoke)
	const typ = "policy-small"

	By(fmt.Sprintf("switching the agent of %s to --injection=policy, with the injection policies installed", in.Spoke))
	Expect(in.Env.Fleet.StopAgent(in.Spoke)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		By(fmt.Sprintf("putting the agent of %s back on the webhook", in.Spoke))
		Expect(in.Env.Fleet.StopAgent(in.Spoke)).To(Succeed())
		sw.SetAgentInjection(in.Spoke, "")
		Expect(sw.UninstallInjectionPolicies(ctx, in.Spoke)).To(Succeed())
		Expect(in.Env.Fleet.StartAgent(ctx, in.Spoke)).To(Succeed())
	})
	Expect(sw.InstallInjectionPolicies(ctx, in.Spoke)).To(Succeed())
	sw.SetAgentInjection(in.Spoke, "policy")
	Expect(in.Env.Fleet.StartAgent(ctx, in.Spoke)).To(Succeed())
	Eventually(ctx, func() bool {
		err := spoke.Client.Get(ctx, client.ObjectKey{Name: "imperator-pod-injector"}, &admissionregistrationv1.MutatingWebhookConfiguration{})
		return apierrors.IsNotFound(err)
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(BeTrue(), "the agent on the policy path leaves the pod injector's webhook out")

	By(fmt.Sprintf("adding node %s and Machine %s: %d units of %s, reserved", in.Node, in.Machine, in.Available, typ))
	Expect(sw.AddSpokeNode(ctx, in.Spoke, wrappers.MakeNode(in.Node).Capacity(corev1.ResourceCPU, "16").
		Capacity(corev1.ResourceMemory, "64Gi").GPU(4, "NVIDIA-A100-SXM4-80GB", "ampere").Obj())).To(Succeed())
	DeferCleanup(func(ctx context.Context) { Expect(sw.DeleteSpokeNode(ctx, in.Spoke, in.Node)).To(Succeed()) })
	machine := wrappers.MakeMachine(in.Machine, in.Machine).Type(typ, "2", "8Gi", in.Available).GPU("nvidia.com/gpu", 1, "", "").
		Node(in.Node, typ).Tainted().Obj()
	Expect(spoke.Client.Create(ctx, machine)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		Expect(client.IgnoreNotFound(spoke.Client.Delete(ctx, machine))).To(Succeed())
		Eventually(ctx, func() bool {
			return apierrors.IsNotFound(spoke.Client.Get(ctx, client.ObjectKeyFromObject(machine), &imperatorv1alpha1.Machine{}))
		}).WithTimeout(spokeTimeout).WithPolling(poll).Should(BeTrue(), "Machine %s deleted", in.Machine)
	})
	ns := wrappers.MakeNamespace(in.Namespace).InjectionEnabled().Obj()
	Expect(spoke.Client.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(spoke.Client.Delete(ctx, ns))).To(Succeed()) })
	guest := func(name string) *corev1.Pod {
		return wrappers.MakePod(in.Namespace, name).Guest(in.Machine, typ).Obj()
	}
	Eventually(ctx, func(g Gomega) {
		m := &imperatorv1alpha1.Machine{}
		g.Expect(spoke.Client.Get(ctx, client.ObjectKeyFromObject(machine), m)).To(Succeed())
		u := StatusUsage(m, typ)
		g.Expect(u).NotTo(BeNil())
		g.Expect(u.Reserved).To(Equal(in.Available), "reservation pods bound on %s", in.Node)
		probe := guest("probe")
		g.Expect(spoke.Client.Create(ctx, probe, client.DryRunAll)).To(Succeed())
		g.Expect(probe.Annotations).To(HaveKey(imperatorv1alpha1.InjectedAnnotation), "the API server injects the Machine's guests")
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By(fmt.Sprintf("stopping the agent and creating %d guests, last name first: every one admitted, injected with its unit and gated", in.Guests))
	Expect(in.Env.Fleet.StopAgent(in.Spoke)).To(Succeed())
	var arrival []string
	for i := in.Guests - 1; i >= 0; i-- {
		pod := guest(fmt.Sprintf("guest-%d", i))
		Expect(spoke.Client.Create(ctx, pod)).To(Succeed(), "a guest create refused while the agent is down")
		arrival = append(arrival, pod.Name)
		Expect(pod.Spec.SchedulingGates).To(ContainElement(corev1.PodSchedulingGate{Name: imperatorv1alpha1.SlotSchedulingGate}))
		Expect(pod.Annotations).To(HaveKey(imperatorv1alpha1.InjectedAnnotation))
		Expect(pod.Annotations).NotTo(HaveKey(imperatorv1alpha1.AdmittedAtAnnotation), "nothing but the agent stamps the arrival")
		for _, list := range []corev1.ResourceList{pod.Spec.Containers[0].Resources.Requests, pod.Spec.Containers[0].Resources.Limits} {
			expectQuantity(Default, list, corev1.ResourceCPU, resource.MustParse("2"), pod.Name+" cpu")
			expectQuantity(Default, list, corev1.ResourceMemory, resource.MustParse("8Gi"), pod.Name+" memory")
			expectQuantity(Default, list, "nvidia.com/gpu", resource.MustParse("1"), pod.Name+" GPU")
		}
	}

	By(fmt.Sprintf("starting the agent: the first %d to arrive go through the gate, the others wait in arrival order", in.Available))
	Expect(in.Env.Fleet.StartAgent(ctx, in.Spoke)).To(Succeed())
	Eventually(ctx, func(g Gomega) {
		pods := &corev1.PodList{}
		g.Expect(spoke.Client.List(ctx, pods, client.InNamespace(in.Namespace))).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(in.Guests))
		stamps := map[string]time.Time{}
		var through []string
		for _, p := range pods.Items {
			stamp, err := time.Parse(time.RFC3339Nano, p.Annotations[imperatorv1alpha1.AdmittedAtAnnotation])
			g.Expect(err).NotTo(HaveOccurred(), "%s stamped by the agent", p.Name)
			stamps[p.Name] = stamp
			if !slices.ContainsFunc(p.Spec.SchedulingGates, func(s corev1.PodSchedulingGate) bool { return s.Name == imperatorv1alpha1.SlotSchedulingGate }) {
				through = append(through, p.Name)
			}
		}
		line := slices.SortedFunc(slices.Values(arrival), func(a, b string) int { return stamps[a].Compare(stamps[b]) })
		g.Expect(line).To(Equal(arrival), "the line is the arrival order")
		g.Expect(through).To(ConsistOf(arrival[:in.Available]), "the first %d to arrive are let through", in.Available)
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
}
