package podinjector_test

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
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/machinetype"
	"github.com/imperator-federation/imperator/test/util/repo"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// group is the machine group of seed 000's general-machine.
const group = "general-machine"

// loadPoolPolicy reads deploy/spoke/policy/pool-guests-only.yaml: the
// ValidatingAdmissionPolicy and its binding.
func loadPoolPolicy() (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, error) {
	root, err := repo.Root()
	if err != nil {
		return nil, nil, err
	}
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "spoke", "policy", "pool-guests-only.yaml"))
	if err != nil {
		return nil, nil, err
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for _, obj := range []any{policy, binding} {
		doc, err := docs.Read()
		if err != nil {
			return nil, nil, err
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, nil, err
		}
	}
	if _, err := docs.Read(); !errors.Is(err, io.EOF) {
		return nil, nil, errors.New("pool-guests-only.yaml holds more than the policy and its binding")
	}
	return policy, binding, nil
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

var _ = Describe("Pool policy (deploy/spoke/policy)", Ordered, func() {
	BeforeAll(func(ctx context.Context) {
		policy, binding, err := loadPoolPolicy()
		Expect(err).NotTo(HaveOccurred())
		Expect(k8s.Create(ctx, policy)).To(Succeed())
		Expect(k8s.Create(ctx, binding)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, binding))).To(Succeed())
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, policy))).To(Succeed())
		})
		// The API server compiles and enforces a new policy asynchronously.
		Eventually(func() error {
			return k8s.Create(ctx, poolPod(disabledNamespace, "probe", true, true, nil).Obj(), client.DryRunAll)
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(HaveOccurred())
	})

	refusal := func(ctx context.Context, pod *corev1.Pod) string {
		GinkgoHelper()
		err := k8s.Create(ctx, pod, client.DryRunAll)
		Expect(err).To(HaveOccurred(), "pod %s/%s was admitted", pod.Namespace, pod.Name)
		Expect(apierrors.IsInvalid(err) || apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		return err.Error()
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
