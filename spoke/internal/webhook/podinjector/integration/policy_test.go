package podinjector_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/machinetype"
	"github.com/imperator-federation/imperator/test/util/fleet"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// group is the machine group of the sample general-machine (docs/contract.md).
const group = "general-machine"

// loadPolicy reads a file of deploy/spoke/policy: a
// ValidatingAdmissionPolicy and its binding.
func loadPolicy(file string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, error) {
	policies, err := fleet.AdmissionPolicies()
	if err != nil {
		return nil, nil, err
	}
	for _, p := range policies {
		if p.File == file {
			return p.Policy, p.Binding, nil
		}
	}
	return nil, nil, fmt.Errorf("%s holds no policy %s", fleet.AdmissionPolicyDir, file)
}

// poolPod is a pod of namespace that copies what a compute-xlarge guest of
// general-machine gets from the injector: tolerations, required node
// affinity and node selector as chosen.
func poolPod(namespace, name string, tolerations, affinity bool, selector map[string]string) *wrappers.PodWrapper {
	w := wrappers.MakePod(namespace, name)
	var machineType *imperatorv1alpha1.MachineType
	for _, t := range wrappers.GeneralMachine().Obj().Spec.MachineTypes {
		if t.Name == "compute-xlarge" {
			machineType = &t
		}
	}
	Expect(machineType).NotTo(BeNil())
	if tolerations {
		w.Spec.Tolerations = machinetype.Tolerations(group, machineType.Name)
	}
	if affinity {
		w.RequiredNodeAffinity(corev1.NodeSelectorTerm{MatchExpressions: machinetype.Placement(group, machineType)})
	}
	w.Spec.NodeSelector = selector
	return w
}

// agentUser is the agent's service account, the one identity that may
// remove the slot gate and change Imperator's labels and annotations of a
// pod.
const agentUser = "system:serviceaccount:" + agentNamespace + ":imperator-spoke"

// clientAs reaches the API server as user (impersonated, with admin rights,
// so that only the policies can refuse it).
func clientAs(user string, groups ...string) client.Client {
	GinkgoHelper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:masters", "system:authenticated")}
	c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// installPolicy creates the policy and binding of a file of
// deploy/spoke/policy until the spec ends, and waits until the API server
// enforces it: until probe's dry-run creation is refused.
func installPolicy(ctx context.Context, file string, probe *corev1.Pod) {
	GinkgoHelper()
	policy, binding, err := loadPolicy(file)
	Expect(err).NotTo(HaveOccurred())
	Expect(k8s.Create(ctx, policy)).To(Succeed())
	Expect(k8s.Create(ctx, binding)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, binding))).To(Succeed())
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, policy))).To(Succeed())
	})
	// The API server compiles and enforces a new policy asynchronously.
	Eventually(func() error {
		return k8s.Create(ctx, probe.DeepCopy(), client.DryRunAll)
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(HaveOccurred())
}

// refused expects err to be a refusal by a policy and returns its message.
func refused(err error) string {
	GinkgoHelper()
	Expect(err).To(HaveOccurred(), "the request was admitted")
	Expect(apierrors.IsInvalid(err) || apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
	return err.Error()
}

// tolerateAll is a pod of namespace that tolerates every taint: a toleration
// with operator Exists and no key, as DaemonSets and node agents carry.
func tolerateAll(namespace, name string, effect corev1.TaintEffect) *corev1.Pod {
	pod := wrappers.MakePod(namespace, name).Obj()
	pod.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: effect}}
	return pod
}

var _ = Describe("Pool policy (deploy/spoke/policy/pool-guests-only.yaml)", Ordered, func() {
	BeforeAll(func(ctx context.Context) {
		installPolicy(ctx, "pool-guests-only.yaml", poolPod(disabledNamespace, "probe", true, true, nil).Obj())
	})

	refusal := func(ctx context.Context, pod *corev1.Pod) string {
		GinkgoHelper()
		return refused(k8s.Create(ctx, pod, client.DryRunAll))
	}

	// patchAs changes a copy of pod with edit and patches it as c (a dry
	// run), returning the API server's answer.
	patchAs := func(ctx context.Context, c client.Client, pod *corev1.Pod, edit func(*corev1.Pod)) error {
		GinkgoHelper()
		changed := pod.DeepCopy()
		edit(changed)
		return c.Patch(ctx, changed, client.MergeFrom(pod), client.DryRunAll)
	}

	// createGuest creates a guest in team-a through the injector: gated,
	// tolerating the pool, with its annotations.
	createGuest := func(ctx context.Context) *corev1.Pod {
		GinkgoHelper()
		pod := guestPod("team-a")
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		Expect(pod.Spec.SchedulingGates).To(ContainElement(corev1.PodSchedulingGate{Name: imperatorv1alpha1.SlotSchedulingGate}))
		return pod
	}

	It("refuses a pod that copies a guest's tolerations and affinity without being a guest, naming the key", func(ctx context.Context) {
		msg := refusal(ctx, poolPod(disabledNamespace, "copycat", true, true, nil).Obj())
		Expect(msg).To(ContainSubstring("only Imperator guests may use machine pool nodes"))
		Expect(msg).To(ContainSubstring("tolerates the pool taint imperator.tenzen-y.io/compute-xlarge (spec.tolerations)"))
	})

	It("refuses a pod that only selects or requires pool nodes by label, naming the key and the field", func(ctx context.Context) {
		Expect(refusal(ctx, poolPod(disabledNamespace, "selector", false, false,
			map[string]string{imperatorv1alpha1.NodePoolKey: "ready"}).Obj())).
			To(ContainSubstring("selects pool nodes by imperator.tenzen-y.io/node-pool (spec.nodeSelector)"))
		Expect(refusal(ctx, poolPod(disabledNamespace, "affinity", false, true, nil).Obj())).
			To(ContainSubstring("requires pool nodes by imperator.tenzen-y.io/compute-xlarge (spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution)"))
	})

	It("refuses a pod labelled guest where the injector does not run, and a reservation outside the agent's namespace", func(ctx context.Context) {
		Expect(refusal(ctx, poolPod(disabledNamespace, "fake-guest", true, true, nil).Guest(group, "compute-xlarge").Obj())).
			To(ContainSubstring("imperator.tenzen-y.io/compute-xlarge"))
		Expect(refusal(ctx, poolPod(disabledNamespace, "fake-reservation", true, true, nil).
			Label(imperatorv1alpha1.PodRoleKey, string(imperatorv1alpha1.PodRoleReservation)).Obj())).
			To(ContainSubstring("imperator.tenzen-y.io/compute-xlarge"))
	})

	It("refuses a pod that tolerates every taint (operator Exists without a key), which includes the pool's", func(ctx context.Context) {
		for _, effect := range []corev1.TaintEffect{"", corev1.TaintEffectNoSchedule} {
			Expect(refusal(ctx, tolerateAll(disabledNamespace, "tolerate-all", effect))).
				To(ContainSubstring("tolerates every taint, the pool's too (spec.tolerations: operator Exists without a key)"), "effect %q", effect)
		}
		By("admitting one that tolerates every NoExecute taint only: the pool's taints are NoSchedule")
		Expect(k8s.Create(ctx, tolerateAll(disabledNamespace, "tolerate-noexecute", corev1.TaintEffectNoExecute), client.DryRunAll)).To(Succeed())
	})

	It("admits tolerate-everything pods of DaemonSets in node-agent namespaces, kubelets' mirror pods and kube-system", func(ctx context.Context) {
		agents := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpu-operator",
			Labels: map[string]string{imperatorv1alpha1.NodeAgentsKey: imperatorv1alpha1.NodeAgentsAllowed}}}
		Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, agents))).To(Succeed())
		for _, user := range []string{"system:serviceaccount:kube-system:daemon-set-controller", "system:kube-controller-manager"} {
			Expect(clientAs(user).Create(ctx, tolerateAll(agents.Name, "node-exporter-x", ""), client.DryRunAll)).To(Succeed(), user)
			By("refusing the same pod in a namespace no administrator marked for node agents: a namespace editor may create DaemonSets")
			Expect(refused(clientAs(user).Create(ctx, tolerateAll(disabledNamespace, "node-exporter-x", ""), client.DryRunAll))).
				To(ContainSubstring("tolerates every taint"), user)
		}
		mirror := tolerateAll(disabledNamespace, "static-web-node-a", "")
		mirror.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "mirror"}
		mirror.Spec.NodeName = "node-a"
		Expect(clientAs("system:node:node-a", "system:nodes").Create(ctx, mirror, client.DryRunAll)).To(Succeed())
		Expect(k8s.Create(ctx, tolerateAll(metav1.NamespaceSystem, "kube-proxy-x", ""), client.DryRunAll)).To(Succeed())

		By("still refusing a DaemonSet's pod that names a pool key")
		Expect(refused(clientAs("system:serviceaccount:kube-system:daemon-set-controller").
			Create(ctx, poolPod(disabledNamespace, "gpu-exporter-x", true, false, nil).Obj(), client.DryRunAll))).
			To(ContainSubstring("tolerates the pool taint imperator.tenzen-y.io/compute-xlarge"))
	})

	It("keeps a guest at its slot gate: its owner cannot remove the gate, the agent can", func(ctx context.Context) {
		pod := createGuest(ctx)
		ungate := func(p *corev1.Pod) { p.Spec.SchedulingGates = nil }
		Expect(refused(patchAs(ctx, k8s, pod, ungate))).To(ContainSubstring(
			"only the Imperator agent removes the scheduling gate imperator.tenzen-y.io/slot (spec.schedulingGates)"))
		Expect(patchAs(ctx, clientAs(agentUser), pod, ungate)).To(Succeed())
	})

	It("refuses relabelling a pod under imperator.tenzen-y.io/ or changing the injector's annotations, by anyone but the agent, naming the key", func(ctx context.Context) {
		pod := createGuest(ctx)
		for key, edit := range map[string]func(*corev1.Pod){
			"label " + imperatorv1alpha1.PodRoleKey:     func(p *corev1.Pod) { p.Labels[imperatorv1alpha1.PodRoleKey] = "batch" },
			"label " + imperatorv1alpha1.MachineTypeKey: func(p *corev1.Pod) { delete(p.Labels, imperatorv1alpha1.MachineTypeKey) },
			"label " + imperatorv1alpha1.HoldKey:        func(p *corev1.Pod) { p.Labels[imperatorv1alpha1.HoldKey] = "team-a-hold" },
			"annotation " + imperatorv1alpha1.AdmittedAtAnnotation: func(p *corev1.Pod) {
				p.Annotations[imperatorv1alpha1.AdmittedAtAnnotation] = "2000-01-01T00:00:00Z"
			},
			"annotation " + imperatorv1alpha1.InjectedAnnotation: func(p *corev1.Pod) { delete(p.Annotations, imperatorv1alpha1.InjectedAnnotation) },
			"annotation " + imperatorv1alpha1.HoldUIDAnnotation: func(p *corev1.Pod) {
				p.Annotations[imperatorv1alpha1.HoldUIDAnnotation] = "uid-of-another-teams-hold"
			},
			"annotation " + imperatorv1alpha1.QueueAnnotation: func(p *corev1.Pod) {
				p.Annotations[imperatorv1alpha1.QueueAnnotation] = "waiting for compute-xlarge: 1st in line"
			},
			"annotation " + imperatorv1alpha1.ConsumeProvisioningRequestAnnotation: func(p *corev1.Pod) {
				p.Annotations[imperatorv1alpha1.ConsumeProvisioningRequestAnnotation] = "team-a-hold"
				p.Annotations[imperatorv1alpha1.ProvisioningClassNameAnnotation] = "imperator.tenzen-y.io/capacity-hold"
			},
		} {
			Expect(refused(patchAs(ctx, k8s, pod, edit))).To(ContainSubstring("only the Imperator agent changes the "+key+" of a pod"), key)
			Expect(patchAs(ctx, clientAs(agentUser), pod, edit)).To(Succeed(), "the agent changing the %s", key)
		}

		By("refusing a pod that is not a guest labelling itself one")
		plain := wrappers.MakePod(disabledNamespace, "").Obj()
		plain.GenerateName = "plain-"
		Expect(k8s.Create(ctx, plain)).To(Succeed())
		Expect(refused(patchAs(ctx, k8s, plain, func(p *corev1.Pod) {
			p.Labels = map[string]string{imperatorv1alpha1.PodRoleKey: "guest"}
		}))).
			To(ContainSubstring("label " + imperatorv1alpha1.PodRoleKey))

		By("leaving other tools' ProvisioningRequest annotations on pods that are no guests alone")
		Expect(patchAs(ctx, k8s, plain, func(p *corev1.Pod) {
			p.Annotations = map[string]string{
				imperatorv1alpha1.ConsumeProvisioningRequestAnnotation: "batch-job-1",
				imperatorv1alpha1.ProvisioningClassNameAnnotation:      "check-capacity.autoscaling.x-k8s.io",
			}
		})).To(Succeed())

		By("admitting other labels and annotations")
		Expect(patchAs(ctx, k8s, pod, func(p *corev1.Pod) {
			p.Labels["team"] = "vision"
			p.Annotations["example.com/owner"] = "alice"
		})).To(Succeed())
	})

	It("refuses adding a pool toleration to a pod that is not a guest, and judges a guest by what it was", func(ctx context.Context) {
		plain := wrappers.MakePod(disabledNamespace, "").Obj()
		plain.GenerateName = "plain-"
		Expect(k8s.Create(ctx, plain)).To(Succeed())
		Expect(refused(patchAs(ctx, k8s, plain, func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists})
		}))).To(ContainSubstring("tolerates every taint"))

		By("judging an update by what the pod was: labelled a guest in the same update, it is still not one")
		other := wrappers.MakePod("team-a", "").Obj()
		other.GenerateName = "batch-"
		Expect(k8s.Create(ctx, other)).To(Succeed())
		Expect(refused(patchAs(ctx, clientAs(agentUser), other, func(p *corev1.Pod) {
			p.Labels = map[string]string{imperatorv1alpha1.PodRoleKey: "guest"}
			p.Spec.Tolerations = append(p.Spec.Tolerations, machinetype.Tolerations(group, "compute-xlarge")...)
		}))).To(ContainSubstring("tolerates the pool taint imperator.tenzen-y.io/compute-xlarge"))

		By("admitting a toleration added to a guest")
		pod := createGuest(ctx)
		Expect(patchAs(ctx, k8s, pod, func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "example.com/dedicated", Operator: corev1.TolerationOpExists})
		})).To(Succeed())
	})

	It("admits guests, which the injector gates, in namespaces of either label", func(ctx context.Context) {
		for _, ns := range []string{"team-a", legacyNamespace} {
			pod := wrappers.MakePod(ns, "guest").Guest(group, "compute-xlarge").Obj()
			Expect(k8s.Create(ctx, pod, client.DryRunAll)).To(Succeed(), "namespace %s", ns)
			Expect(pod.Spec.SchedulingGates).To(ContainElement(corev1.PodSchedulingGate{Name: imperatorv1alpha1.SlotSchedulingGate}))
		}
	})

	It("admits the agent's reservation pods in its namespace, and pods that do not target the pool", func(ctx context.Context) {
		reservation := poolPod(agentNamespace, "compute-xlarge-general-machine-0", true, true, nil).
			Label(imperatorv1alpha1.MachineGroupKey, group).
			Label(imperatorv1alpha1.MachineTypeKey, "compute-xlarge").
			Label(imperatorv1alpha1.PodRoleKey, string(imperatorv1alpha1.PodRoleReservation)).Obj()
		reservation.Spec.PriorityClassName = ""
		reservation.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
		Expect(k8s.Create(ctx, reservation, client.DryRunAll)).To(Succeed())

		plain := wrappers.MakePod(disabledNamespace, "plain").Obj()
		plain.Spec.Tolerations = []corev1.Toleration{{Key: "example.com/dedicated", Operator: corev1.TolerationOpExists}}
		Expect(k8s.Create(ctx, plain, client.DryRunAll)).To(Succeed())
	})
})

var _ = Describe("Pool node policy (deploy/spoke/policy/pool-nodes-by-scheduler.yaml)", Ordered, func() {
	// michiru is a node of general-machine's pool (the suite's Machine).
	const poolNode = "michiru"

	BeforeAll(func(ctx context.Context) {
		installPolicy(ctx, "pool-nodes-by-scheduler.yaml", wrappers.MakePod(disabledNamespace, "probe").NodeName(poolNode).Obj())
	})

	It("refuses a pod bound by spec.nodeName to a pool node, naming the node and its Machine", func(ctx context.Context) {
		msg := refused(k8s.Create(ctx, wrappers.MakePod(disabledNamespace, "pinned").NodeName(poolNode).Obj(), client.DryRunAll))
		Expect(msg).To(ContainSubstring("spec.nodeName: node michiru is in the machine pool of Machine general-machine"))
		Expect(msg).To(ContainSubstring("only the scheduler places pods there"))
	})

	It("admits a pod bound to a node outside every pool, a reservation pod and a kubelet's mirror pod", func(ctx context.Context) {
		Expect(k8s.Create(ctx, wrappers.MakePod(disabledNamespace, "elsewhere").NodeName("node-a").Obj(), client.DryRunAll)).To(Succeed())

		reservation := wrappers.MakePod(agentNamespace, "compute-xlarge-general-machine-0").NodeName(poolNode).
			Label(imperatorv1alpha1.PodRoleKey, string(imperatorv1alpha1.PodRoleReservation)).Obj()
		Expect(k8s.Create(ctx, reservation, client.DryRunAll)).To(Succeed())

		mirror := wrappers.MakePod(disabledNamespace, "static-web-michiru").NodeName(poolNode).Obj()
		mirror.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "mirror"}
		Expect(clientAs("system:node:"+poolNode, "system:nodes").Create(ctx, mirror, client.DryRunAll)).To(Succeed())
	})

	It("still judges named nodes, and admits other nodes, when a Machine selects its nodes by label", func(ctx context.Context) {
		selecting := wrappers.MakeMachine("policy-selects", "policy-selects").Type("compute-xlarge", "40", "128Gi", 1).
			Select(map[string]string{imperatorv1alpha1.GPUProductLabel: "NVIDIA-H100-80GB-HBM3"}, "compute-xlarge").Obj()
		Expect(k8s.Create(ctx, selecting)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, selecting))).To(Succeed()) })
		// The policy evaluates each Machine; a selector entry has no name
		// and must be skipped, not fail the evaluation (failurePolicy Fail).
		// Its parameters reach it within milliseconds: for seconds after,
		// every answer stays right.
		Consistently(func(g Gomega) {
			err := k8s.Create(ctx, wrappers.MakePod(disabledNamespace, "pinned").NodeName(poolNode).Obj(), client.DryRunAll)
			g.Expect(err).To(HaveOccurred(), "a pod pinned to a named pool node was admitted")
			g.Expect(err.Error()).To(ContainSubstring("spec.nodeName: node michiru is in the machine pool of Machine general-machine"))
			g.Expect(err.Error()).NotTo(ContainSubstring("policy-selects"))
			g.Expect(k8s.Create(ctx, wrappers.MakePod(disabledNamespace, "elsewhere").NodeName("node-a").Obj(), client.DryRunAll)).To(Succeed())
		}).WithTimeout(3 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	})
})
