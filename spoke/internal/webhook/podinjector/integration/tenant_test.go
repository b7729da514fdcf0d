package podinjector_test

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/podinjector"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// What a tenant who may only create pods cannot do (docs/contract.md), with
// the policies of deploy/spoke/policy in the API server: make a type look
// full with pods that never passed the injector, take more than one unit,
// outrank the reservations, or grow a guest afterwards.
var _ = Describe("What a tenant cannot do (deploy/spoke/policy)", Ordered, func() {
	// injectedPod is a pod of team-a as the injector leaves a
	// compute-xlarge guest: what a user could create with the injector's
	// registration gone.
	injectedPod := func(name string) *corev1.Pod {
		GinkgoHelper()
		pod, _, err := podinjector.Inject(wrappers.MakePod("team-a", name).Guest(group, "compute-xlarge").Obj(),
			wrappers.GeneralMachine().Obj())
		Expect(err).NotTo(HaveOccurred())
		return pod
	}

	BeforeAll(func(ctx context.Context) {
		installPolicy(ctx, "pool-guests-only.yaml", poolPod(disabledNamespace, "probe", true, true, nil).Obj())
		// Only this policy refuses a second container asking for GPUs of a
		// pod the injector never saw: the probe cannot be injected here
		// since the pod-role label is missing until the probe is built.
		probe := injectedPod("probe")
		probe.Spec.Containers = append(probe.Spec.Containers, corev1.Container{Name: "sidecar", Image: "busybox",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")},
				Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")}}})
		withoutInjector(ctx, func() {
			installPolicy(ctx, "guest-one-unit.yaml", probe)
		})
	})

	It("refuses a pod carrying the injector's stamp in a namespace that never opted in, naming the annotation", func(ctx context.Context) {
		// The three labels and a copy of a real guest's record, nothing
		// that places it on the pool.
		stray := wrappers.MakePod(disabledNamespace, "stray").Guest(group, "compute-xlarge").Obj()
		stray.Annotations = map[string]string{
			imperatorv1alpha1.InjectedAnnotation: injectedPod("real").Annotations[imperatorv1alpha1.InjectedAnnotation],
		}
		Expect(refused(k8s.Create(ctx, stray, client.DryRunAll))).To(ContainSubstring(
			"metadata.annotations[" + imperatorv1alpha1.InjectedAnnotation + "]: only the Imperator pod injector stamps a pod with it"))

		By("refusing the same stamp on a pod that is no guest in an opted-in namespace")
		plain := wrappers.MakePod("team-a", "plain").Obj()
		plain.Annotations = map[string]string{imperatorv1alpha1.HoldUIDAnnotation: "0b7c-squat"}
		Expect(refused(k8s.Create(ctx, plain, client.DryRunAll))).To(ContainSubstring(
			"metadata.annotations[" + imperatorv1alpha1.HoldUIDAnnotation + "]"))

		By("admitting a labelled pod without stamps there: it is no guest and counts nowhere")
		unstamped := wrappers.MakePod(disabledNamespace, "unstamped").Guest(group, "compute-xlarge").Obj()
		Expect(k8s.Create(ctx, unstamped, client.DryRunAll)).To(Succeed())
	})

	It("refuses, at the injector, a guest whose second container asks for 4 GPUs, naming the container", func(ctx context.Context) {
		pod := guestPod("team-a")
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "sidecar", Image: "busybox",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")}}})
		Expect(refused(k8s.Create(ctx, pod, client.DryRunAll))).To(ContainSubstring(
			`spec.containers[1] ("sidecar").resources.requests[nvidia.com/gpu]: asks for 4`))
	})

	It("refuses in the API server, with the injector's registration gone, every way past one unit, naming the field", func(ctx context.Context) {
		runtimeClass := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "kata"}, Handler: "kata",
			Overhead: &nodev1.Overhead{PodFixed: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}}
		Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, runtimeClass))).To(Succeed())
		gpu := func(n string) corev1.ResourceRequirements {
			q := resource.MustParse(n)
			return corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": q}, Limits: corev1.ResourceList{"nvidia.com/gpu": q}}
		}
		cases := map[string]struct {
			edit func(*corev1.Pod)
			want string
		}{
			"a second container asking for GPUs": {
				edit: func(p *corev1.Pod) {
					p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar", Image: "busybox", Resources: gpu("4")})
				},
				want: "spec.containers[name=sidecar].resources.requests: asks for nvidia.com/gpu of machine type compute-xlarge",
			},
			"a sidecar asking for cpu": {
				edit: func(p *corev1.Pod) {
					p.Spec.InitContainers = []corev1.Container{{Name: "proxy", Image: "envoy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}
				},
				want: "spec.initContainers[name=proxy].resources.requests: asks for cpu",
			},
			"an init container asking for a GPU": {
				edit: func(p *corev1.Pod) {
					p.Spec.InitContainers = []corev1.Container{{Name: "fetch", Image: "busybox", Resources: gpu("1")}}
				},
				want: "spec.initContainers[name=fetch].resources.requests: an init container of a compute-xlarge guest asks for at most the unit",
			},
			"the injected container asking for twice the unit": {
				edit: func(p *corev1.Pod) { p.Spec.Containers[0].Resources = gpu("4") },
				want: "spec.containers[name=main].resources: the injected container of a compute-xlarge guest asks for exactly one unit",
			},
			"pod-level requests above the unit": {
				edit: func(p *corev1.Pod) {
					p.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("90")},
						Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("90")}}
				},
				want: "spec.resources.requests[cpu]: the pod-level request is more than one unit of compute-xlarge",
			},
			"a RuntimeClass with overhead": {
				edit: func(p *corev1.Pod) { p.Spec.RuntimeClassName = ptr.To(runtimeClass.Name) },
				want: "spec.overhead[cpu]: the RuntimeClass kata adds overhead",
			},
		}
		withoutInjector(ctx, func() {
			for name, tc := range cases {
				pod := injectedPod("")
				pod.GenerateName = "over-"
				tc.edit(pod)
				Expect(refused(k8s.Create(ctx, pod, client.DryRunAll))).To(ContainSubstring(tc.want), name)
			}
			By("admitting the pod exactly as the injector leaves it")
			Expect(k8s.Create(ctx, injectedPod("exact"), client.DryRunAll)).To(Succeed())
		})
	})

	It("refuses a guest that could preempt, and admits one whose PriorityClass never preempts", func(ctx context.Context) {
		for _, pc := range []*schedulingv1.PriorityClass{
			{ObjectMeta: metav1.ObjectMeta{Name: "tenant-urgent"}, Value: 1_000_000},
			{ObjectMeta: metav1.ObjectMeta{Name: "tenant-urgent-queued"}, Value: 1_000_000, PreemptionPolicy: ptr.To(corev1.PreemptNever)},
		} {
			Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, pc))).To(Succeed())
		}
		urgent := guestPod("team-a")
		urgent.Spec.PriorityClassName = "tenant-urgent"
		Expect(refused(k8s.Create(ctx, urgent, client.DryRunAll))).To(ContainSubstring(
			"spec.priority: a guest of priority 1000000 (PriorityClass tenant-urgent) would preempt reservation pods"))

		queued := guestPod("team-a")
		queued.Spec.PriorityClassName = "tenant-urgent-queued"
		Expect(k8s.Create(ctx, queued, client.DryRunAll)).To(Succeed())
	})

	It("refuses resizing a guest in place past its unit (pods/resize), to its owner as to anyone", func(ctx context.Context) {
		pod := guestPod("team-a")
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, pod))).To(Succeed()) })
		grown := pod.DeepCopy()
		ninety := resource.MustParse("90")
		grown.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = ninety
		grown.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = ninety
		err := k8s.SubResource("resize").Patch(ctx, grown, client.MergeFrom(pod), client.DryRunAll)
		Expect(refused(err)).To(ContainSubstring("a guest pod holds exactly one unit of its machine type and is not resized in place"))

		By("admitting an update of the guest that leaves its resources alone")
		Expect(k8s.Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"vision"}}}`)), client.DryRunAll)).To(Succeed())
	})

	It("refuses placing a pod by spec.nodeName on a node a Machine selects by label, once its pool lists it", func(ctx context.Context) {
		const selected = "gpu-node-by-label"
		By("the agent's MachineNodePool of a Machine selecting its nodes by label, listing the node it selected")
		pool := &imperatorv1alpha1.MachineNodePool{
			ObjectMeta: metav1.ObjectMeta{Name: "by-label-node-pool"},
			Spec: imperatorv1alpha1.MachineNodePoolSpec{MachineGroup: "by-label", NodePool: []imperatorv1alpha1.NodePool{{
				NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
				MachineType:  []imperatorv1alpha1.MachineTypeRef{{Name: "compute-xlarge"}},
			}}},
		}
		Expect(k8s.Create(ctx, pool)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, pool))).To(Succeed()) })
		pool.Status.NodePool = []imperatorv1alpha1.NodePoolStatus{{Name: selected, Condition: imperatorv1alpha1.NodeConditionReady, MachineType: "compute-xlarge"}}
		Expect(k8s.Status().Update(ctx, pool)).To(Succeed())

		installPolicy(ctx, "pool-selected-nodes-by-scheduler.yaml", wrappers.MakePod(disabledNamespace, "probe").NodeName(selected).Obj())
		Expect(refused(k8s.Create(ctx, wrappers.MakePod(disabledNamespace, "snipe").NodeName(selected).Obj(), client.DryRunAll))).To(
			ContainSubstring("spec.nodeName: node " + selected + " is in the machine pool of by-label-node-pool"))
		By("admitting a pod placed by hand on a node of no pool")
		Expect(k8s.Create(ctx, wrappers.MakePod(disabledNamespace, "elsewhere").NodeName("cpu-node-1").Obj(), client.DryRunAll)).To(Succeed())
	})

	It("removes a hold UID a guest writes itself: a hold's units are claimed only through the injector", func(ctx context.Context) {
		pod := guestPod("team-a")
		pod.Annotations = map[string]string{imperatorv1alpha1.HoldUIDAnnotation: "uid-of-another-teams-hold"}
		Expect(k8s.Create(ctx, pod, client.DryRunAll)).To(Succeed())
		Expect(pod.Annotations).NotTo(HaveKey(imperatorv1alpha1.HoldUIDAnnotation))
	})
})

// withoutInjector runs f with the injector's registration deleted, as an
// administrator could leave it, and puts it back afterwards: what the
// policies refuse then, they refuse whatever admitted the pod.
func withoutInjector(ctx context.Context, f func()) {
	GinkgoHelper()
	registration := &admissionregistrationv1.MutatingWebhookConfiguration{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: webhookConfigurationName}, registration)).To(Succeed())
	Expect(k8s.Delete(ctx, registration)).To(Succeed())
	defer func() {
		again := registration.DeepCopy()
		again.ResourceVersion, again.UID, again.CreationTimestamp, again.Generation, again.ManagedFields = "", "", metav1.Time{}, 0, nil
		Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, again))).To(Succeed())
		Eventually(injectorAnswers).WithContext(ctx).WithTimeout(30 * time.Second).Should(BeTrue())
	}()
	Eventually(injectorAnswers).WithContext(ctx).WithTimeout(30 * time.Second).Should(BeFalse())
	f()
}

// injectorAnswers tells whether the API server sends guests to the
// injector: a guest naming a container it lacks is refused by it, with its
// own words.
func injectorAnswers(ctx context.Context) bool {
	pod := guestPod("team-a")
	pod.Labels[imperatorv1alpha1.InjectingContainerKey] = "absent"
	err := k8s.Create(ctx, pod, client.DryRunAll)
	return err != nil && strings.Contains(err.Error(), `unknown injecting container "absent"`)
}
