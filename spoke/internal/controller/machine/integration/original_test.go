package machine_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// originalFixtures is what the original Imperator leaves in a cluster, as
// package migrate reproduces it from the original's code.
var originalFixtures = filepath.Join("..", "..", "..", "migrate", "testdata", "original.yaml")

// originalReservationSet is the original Imperator's reservation
// StatefulSet of the fixtures (name <machine-group>-<machine-type>, the
// sleeper container, selector and labels of the three reservation keys),
// made for machineType of the suite's group with replicas pods on node, and
// owned by the Machine without being controlled by it, as the agent leaves
// it at start-up (migrate.Detach).
func originalReservationSet(machine *imperatorv1alpha1.Machine, machineType string, replicas int32, node string) *appsv1.StatefulSet {
	GinkgoHelper()
	data, err := os.ReadFile(originalFixtures)
	Expect(err).NotTo(HaveOccurred())
	reader := yaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var sts *appsv1.StatefulSet
	for sts == nil {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		Expect(err).NotTo(HaveOccurred())
		var meta metav1.TypeMeta
		Expect(sigsyaml.Unmarshal(doc, &meta)).To(Succeed())
		if meta.Kind == "StatefulSet" {
			sts = &appsv1.StatefulSet{}
			Expect(sigsyaml.UnmarshalStrict(doc, sts)).To(Succeed())
		}
	}
	Expect(sts).NotTo(BeNil(), "no StatefulSet in %s", originalFixtures)
	Expect(sts.Spec.Template.Spec.Containers).To(ConsistOf(HaveField("Name", "sleeper")), "the fixture's reservation container")

	labels := map[string]string{
		imperatorv1alpha1.MachineGroupKey: group,
		imperatorv1alpha1.MachineTypeKey:  machineType,
		imperatorv1alpha1.PodRoleKey:      string(imperatorv1alpha1.PodRoleReservation),
	}
	s := shapes[machineType]
	resources := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(s.cpu), corev1.ResourceMemory: resource.MustParse(s.memory)}
	name := group + "-" + machineType // the original's order, the reverse of ours
	sts.Name, sts.Namespace, sts.Labels = name, agentNamespace, labels
	sts.OwnerReferences = []metav1.OwnerReference{{APIVersion: imperatorv1alpha1.GroupVersion.String(), Kind: "Machine",
		Name: machine.Name, UID: machine.UID, Controller: ptr.To(false), BlockOwnerDeletion: ptr.To(true)}}
	sts.Spec.Replicas = ptr.To(replicas)
	sts.Spec.ServiceName = name
	sts.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels}
	sts.Spec.Template.Labels = labels
	sts.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: resources, Limits: resources}
	sts.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	sts.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	return sts
}

var _ = Describe("The original Imperator's reservation pods beside the Machine's", func() {
	It("count nowhere: the Machine's reserved and free units stay its own, and guests are let through as before", func(ctx context.Context) {
		guests := createGuestNamespace(ctx, injectionEnabled)

		By("general-machine reserving 2 compute-small on kasumi, a node with room for 4")
		machine := smallMachine(2)
		createMachine(ctx, machine)
		Eventually(usage(ctx, machineName)).WithTimeout(60 * time.Second).Should(HaveKeyWithValue("compute-small", u(2, 2, 0, 0)))

		By("the original's reservation StatefulSet of the same group and type running 2 pods on kasumi, labelled exactly as ours")
		original := originalReservationSet(machine, "compute-small", 2, "kasumi")
		Expect(k8s.Create(ctx, original)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, original, client.PropagationPolicy(metav1.DeletePropagationForeground)))).To(Succeed())
		})
		originalPods := func(g Gomega) int {
			n := 0
			for _, p := range reservationPods(ctx, g, "compute-small") {
				if ref := metav1.GetControllerOf(&p); ref != nil && ref.UID == original.UID && running(&p) && p.Spec.NodeName == "kasumi" {
					n++
				}
			}
			return n
		}
		Eventually(originalPods).WithTimeout(60 * time.Second).Should(Equal(2))
		Expect(runningReservations(ctx, Default, "compute-small")).To(Equal(4), "ours and the original's, all with the same labels")

		By("the Machine still reports 2 reserved of 2, its StatefulSet keeps 2 replicas, and it is Ready")
		Consistently(usage(ctx, machineName)).WithTimeout(5 * time.Second).Should(HaveKeyWithValue("compute-small", u(2, 2, 0, 0)))
		Expect(statefulSet(ctx, Default, "compute-small").Spec.Replicas).To(HaveValue(Equal(int32(2))))
		Expect(condition(ctx, machineName, imperatorv1alpha1.ConditionReady)(Default)).To(HaveField("Status", metav1.ConditionTrue))
		Expect(condition(ctx, machineName, imperatorv1alpha1.ConditionStrayGuests)(Default)).To(HaveField("Status", metav1.ConditionFalse))

		By("a guest takes one of the Machine's 2 units, not a third beside the original's")
		Expect(k8s.Create(ctx, guest(guests, "first", "compute-small"))).To(Succeed())
		Eventually(podStates(ctx, guests)).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"first": "Running"}))
		Eventually(usage(ctx, machineName)).WithTimeout(30 * time.Second).Should(HaveKeyWithValue("compute-small", u(2, 1, 1, 0)))
		Expect(originalPods(Default)).To(Equal(2), "the original's pods are left alone")
	})
})
