package harness_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/imperator-federation/imperator/test/util/wrappers"
)

const (
	gpuResource = corev1.ResourceName("nvidia.com/gpu")
	gpuTaint    = "example.com/dedicated"
	gpuLabel    = "example.com/pool"
)

var _ = Describe("A cluster of the harness", Ordered, func() {
	var namespace string

	BeforeAll(func(ctx context.Context) {
		c := clusters[0]
		for _, n := range []*corev1.Node{
			wrappers.MakeNode("gpu-1").GPU(4, "NVIDIA-GeForce-RTX-3090", "ampere").Label(gpuLabel, "gpu").Taint(gpuTaint, "gpu", corev1.TaintEffectNoSchedule).Obj(),
			wrappers.MakeNode("gpu-2").GPU(4, "NVIDIA-GeForce-RTX-3090", "ampere").Label(gpuLabel, "gpu").Taint(gpuTaint, "gpu", corev1.TaintEffectNoSchedule).Obj(),
			// Has GPUs but neither the label nor the taint.
			wrappers.MakeNode("gpu-unlabelled").GPU(4, "NVIDIA-GeForce-RTX-3090", "ampere").Obj(),
			wrappers.MakeNode("cpu-1").Obj(),
		} {
			Expect(c.AddNode(ctx, n)).To(Succeed())
		}
		ns, err := c.Kubernetes().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "smoke-"}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		namespace = ns.Name
	}, NodeTimeout(2*time.Minute))

	It("places a GPU StatefulSet only on matching nodes and runs its pods", func(ctx context.Context) {
		kube := clusters[0].Kubernetes()
		labels := map[string]string{"app": "gpu-workload"}
		sts := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu-workload", Namespace: namespace},
			Spec: appsv1.StatefulSetSpec{
				Replicas:            ptr.To[int32](4),
				PodManagementPolicy: appsv1.ParallelPodManagement,
				Selector:            &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       gpuPodSpec(true),
				},
			},
		}
		_, err := kube.AppsV1().StatefulSets(namespace).Create(ctx, sts, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())

		// 2 nodes × 4 GPUs hold exactly the 4 replicas of 2 GPUs each.
		Eventually(func(g Gomega) {
			pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=gpu-workload"})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pods.Items).To(HaveLen(4))
			perNode := map[string]int{}
			for _, p := range pods.Items {
				g.Expect(p.Spec.NodeName).To(BeElementOf("gpu-1", "gpu-2"), "pod %s", p.Name)
				g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "pod %s", p.Name)
				g.Expect(condition(&p, corev1.ContainersReady)).To(Equal(corev1.ConditionTrue), "pod %s", p.Name)
				perNode[p.Spec.NodeName]++
			}
			g.Expect(perNode).To(Equal(map[string]int{"gpu-1": 2, "gpu-2": 2}))
		}).WithContext(ctx).WithTimeout(60 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
	}, SpecTimeout(90*time.Second))

	It("leaves a pod without the toleration Pending as Unschedulable", func(ctx context.Context) {
		kube := clusters[0].Kubernetes()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "no-toleration", Namespace: namespace},
			Spec:       gpuPodSpec(false),
		}
		// One GPU so that resources alone would not stop it.
		pod.Spec.Containers[0].Resources = gpuResources(1)
		_, err := kube.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())

		Eventually(func(g Gomega) {
			p, err := kube.CoreV1().Pods(namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p.Status.Phase).To(Equal(corev1.PodPending))
			g.Expect(p.Spec.NodeName).To(BeEmpty())
			scheduled := findCondition(p, corev1.PodScheduled)
			g.Expect(scheduled).NotTo(BeNil())
			g.Expect(scheduled.Status).To(Equal(corev1.ConditionFalse))
			g.Expect(scheduled.Reason).To(Equal(corev1.PodReasonUnschedulable))
		}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
	}, SpecTimeout(45*time.Second))

	It("removes a deleted pod only when its grace period is over", func(ctx context.Context) {
		kube := clusters[0].Kubernetes()
		for name, grace := range map[string]int64{"grace-0": 0, "grace-5": 5} {
			pod := wrappers.MakePod(namespace, name).Obj()
			pod.Spec.TerminationGracePeriodSeconds = ptr.To(grace)
			pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "cpu-1"}
			_, err := kube.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
			Eventually(func() corev1.PodPhase {
				p, _ := kube.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
				return p.Status.Phase
			}).WithContext(ctx).WithTimeout(30*time.Second).Should(Equal(corev1.PodRunning), "pod %s", name)
		}
		gone := func(name string) func() bool {
			return func() bool {
				_, err := kube.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
				return err != nil
			}
		}

		Expect(kube.CoreV1().Pods(namespace).Delete(ctx, "grace-5", metav1.DeleteOptions{})).To(Succeed())
		Expect(kube.CoreV1().Pods(namespace).Delete(ctx, "grace-0", metav1.DeleteOptions{})).To(Succeed())
		Eventually(gone("grace-0")).WithContext(ctx).WithTimeout(3 * time.Second).Should(BeTrue())
		Consistently(gone("grace-5")).WithContext(ctx).WithTimeout(3 * time.Second).Should(BeFalse())
		Eventually(gone("grace-5")).WithContext(ctx).WithTimeout(10 * time.Second).Should(BeTrue())
	}, SpecTimeout(60*time.Second))

	It("runs the other clusters side by side, each with its own state", func(ctx context.Context) {
		for i, c := range clusters[1:] {
			name := fmt.Sprintf("only-in-%s", c.Name)
			Expect(c.AddNode(ctx, wrappers.MakeNode(name).Obj())).To(Succeed())
			for j, other := range clusters {
				nodes, err := other.Kubernetes().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
				Expect(err).NotTo(HaveOccurred())
				names := make([]string, 0, len(nodes.Items))
				for _, n := range nodes.Items {
					names = append(names, n.Name)
				}
				if j == i+1 {
					Expect(names).To(ContainElement(name))
				} else {
					Expect(names).NotTo(ContainElement(name))
				}
			}
		}
		Expect(clusters[1].Config.Host).NotTo(Equal(clusters[2].Config.Host))
	}, SpecTimeout(90*time.Second))
})

func gpuPodSpec(tolerate bool) corev1.PodSpec {
	spec := corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr.To[int64](0),
		Containers: []corev1.Container{{
			Name:      "main",
			Image:     "registry.k8s.io/pause:3.10",
			Resources: gpuResources(2),
		}},
		Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: gpuLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"gpu"}}},
			}}},
		}},
	}
	if tolerate {
		spec.Tolerations = []corev1.Toleration{{Key: gpuTaint, Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}
	}
	return spec
}

func gpuResources(gpus int64) corev1.ResourceRequirements {
	list := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("1"),
		corev1.ResourceMemory: resource.MustParse("1Gi"),
		gpuResource:           *resource.NewQuantity(gpus, resource.DecimalSI),
	}
	return corev1.ResourceRequirements{Requests: list, Limits: list.DeepCopy()}
}

func findCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func condition(p *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	if c := findCondition(p, t); c != nil {
		return c.Status
	}
	return corev1.ConditionUnknown
}
