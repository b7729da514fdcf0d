package podinjector_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/yaml"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/admissionpolicy"
	"github.com/imperator-federation/imperator/test/util/framework"
	"github.com/imperator-federation/imperator/test/util/repo"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// equivalencePods is how many random pods go through both paths; override
// with IMPERATOR_EQUIVALENCE_PODS.
const equivalencePods = 400

// equivalenceMachines are the Machines both API servers hold: the sample's
// general-machine (the suite's), a GPU type with every GPU selector, and a
// CPU-only group.
func equivalenceMachines() []*imperatorv1alpha1.Machine {
	return []*imperatorv1alpha1.Machine{
		wrappers.MakeMachine("equiv-dgx", "equiv-dgx").Type("a100", "64", "512Gi", 1).
			GPU("nvidia.com/gpu", 8, "NVIDIA-A100-SXM4-80GB", "ampere").GPUMachine("DGX-A100").Obj(),
		wrappers.MakeMachine("equiv-cpu", "equiv-cpu").Type("compute-xlarge", "1", "1Gi", 1).Type("cpu-small", "500m", "512Mi", 2).Obj(),
	}
}

var _ = Describe("One contract, two paths: the injector webhook and the admission policies (deploy/spoke/policy/injection)", Ordered, func() {
	var policyEnv *framework.Environment

	BeforeAll(func(ctx context.Context) {
		By("starting a second API server that injects by MutatingAdmissionPolicy, with no webhook")
		var err error
		policyEnv, err = framework.Start(ctx, framework.Options{CRDs: framework.SpokeCRDs})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { Expect(policyEnv.Stop()).To(Succeed()) })

		namespace, _, err := loadGuestSample()
		Expect(err).NotTo(HaveOccurred())
		namespace.ResourceVersion = ""
		Expect(policyEnv.Client.Create(ctx, namespace)).To(Succeed())
		Expect(policyEnv.Client.Create(ctx, wrappers.GeneralMachine().Obj())).To(Succeed())
		for _, machine := range equivalenceMachines() {
			Expect(policyEnv.Client.Create(ctx, machine.DeepCopy())).To(Succeed())
			Expect(k8s.Create(ctx, machine.DeepCopy())).To(Succeed())
			DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, machine))).To(Succeed()) })
			Eventually(func() error {
				return env.Manager.Cache.Get(ctx, client.ObjectKeyFromObject(machine), &imperatorv1alpha1.Machine{})
			}).WithContext(ctx).WithTimeout(10 * time.Second).Should(Succeed())
		}

		By("installing the one-unit policy on both, and the injection policies on the second")
		oneUnitProbe := guestOf("team-a", "probe-one-unit", "compute-xlarge", "main", "sidecar")
		oneUnitProbe.Spec.Containers[1].Resources.Requests = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
		installPolicy(ctx, "guest-one-unit.yaml", oneUnitProbe)
		policy, binding, err := loadPolicy("guest-one-unit.yaml")
		Expect(err).NotTo(HaveOccurred())
		Expect(policyEnv.Client.Create(ctx, policy)).To(Succeed())
		Expect(policyEnv.Client.Create(ctx, binding)).To(Succeed())
		Expect(installInjectionPolicies(ctx, policyEnv.Client)).To(Succeed())
		By("writing the unknown-group binding as the agent does")
		_, err = (&admissionpolicy.Reconciler{Client: policyEnv.Client, Enabled: true}).Reconcile(ctx, reconcile.Request{})
		Expect(err).NotTo(HaveOccurred())

		By("waiting until the second API server injects, refuses an unknown type and enforces one unit")
		Eventually(func(g Gomega) {
			pod := guestOf("team-a", "probe", "compute-xlarge", "main")
			g.Expect(policyEnv.Client.Create(ctx, pod, client.DryRunAll)).To(Succeed())
			g.Expect(pod.Annotations).To(HaveKey(imperatorv1alpha1.InjectedAnnotation))
			g.Expect(policyEnv.Client.Create(ctx, guestOf("team-a", "probe", "nope", "main"), client.DryRunAll)).NotTo(Succeed())
			g.Expect(policyEnv.Client.Create(ctx, oneUnitProbe.DeepCopy(), client.DryRunAll)).NotTo(Succeed())
			forged := guestOf("team-a", "probe", "compute-xlarge", "main")
			forged.Labels[imperatorv1alpha1.MachineGroupKey] = "unknown-group"
			forged.Annotations = map[string]string{imperatorv1alpha1.InjectedAnnotation: "{}"}
			g.Expect(policyEnv.Client.Create(ctx, forged, client.DryRunAll)).NotTo(Succeed())
			for _, machine := range equivalenceMachines() {
				pod := guestOf("team-a", "probe", machine.Spec.MachineTypes[0].Name, "main")
				pod.Labels[imperatorv1alpha1.MachineGroupKey] = machine.Labels[imperatorv1alpha1.MachineGroupKey]
				g.Expect(policyEnv.Client.Create(ctx, pod, client.DryRunAll)).To(Succeed())
				g.Expect(pod.Annotations).To(HaveKey(imperatorv1alpha1.InjectedAnnotation))
			}
		}).WithContext(ctx).WithTimeout(60 * time.Second).Should(Succeed())
	}, NodeTimeout(3*time.Minute))

	It("gives every random pod the same result on both: the same pod, or a refusal on both", func(ctx context.Context) {
		n := equivalencePods
		if v := os.Getenv("IMPERATOR_EQUIVALENCE_PODS"); v != "" {
			var err error
			n, err = strconv.Atoi(v)
			Expect(err).NotTo(HaveOccurred(), "IMPERATOR_EQUIVALENCE_PODS")
		}
		seed := uint64(GinkgoRandomSeed())
		random := rand.New(rand.NewPCG(seed, 36))
		outcomes := map[string]int{}
		recordsKeptByWebhookOnly := 0
		for i := range n {
			pod := randomPod(random, fmt.Sprintf("equiv-%d", i))
			viaWebhook, viaPolicy := pod.DeepCopy(), pod.DeepCopy()
			webhookErr := k8s.Create(ctx, viaWebhook, client.DryRunAll)
			policyErr := policyEnv.Client.Create(ctx, viaPolicy, client.DryRunAll)
			outcomes[outcomeOf(webhookErr)+" / "+outcomeOf(policyErr)]++
			input, _ := json.Marshal(pod)
			Expect(webhookErr == nil).To(Equal(policyErr == nil),
				"pod %d (seed %d) admitted by one path only\nwebhook: %v\npolicy: %v\npod: %s", i, seed, webhookErr, policyErr, input)
			if webhookErr != nil {
				continue
			}
			if _, had := pod.Annotations[imperatorv1alpha1.InjectedAnnotation]; had && viaWebhook.Annotations[imperatorv1alpha1.InjectedAnnotation] != viaPolicy.Annotations[imperatorv1alpha1.InjectedAnnotation] {
				// CEL cannot read the record the pod was created with: the
				// webhook keeps its earlier replaced entries, the policy
				// writes the record from this admission alone. Everything
				// but those entries must agree.
				recordsKeptByWebhookOnly++
				Expect(recordWithoutReplaced(viaPolicy)).To(Equal(recordWithoutReplaced(viaWebhook)), "pod %d: %s", i, input)
				delete(viaWebhook.Annotations, imperatorv1alpha1.InjectedAnnotation)
				delete(viaPolicy.Annotations, imperatorv1alpha1.InjectedAnnotation)
			}
			Expect(comparable(viaPolicy)).To(BeComparableTo(comparable(viaWebhook)),
				"pod %d (seed %d) differs (-webhook +policy):\n%s\npod: %s", i, seed,
				cmp.Diff(comparable(viaWebhook), comparable(viaPolicy)), input)
		}
		AddReportEntry("outcomes (webhook / policy)", outcomes)
		AddReportEntry("records with earlier replaced entries kept by the webhook only", recordsKeptByWebhookOnly)
		_, _ = fmt.Fprintf(GinkgoWriter, "%d pods, seed %d, outcomes (webhook / policy): %v; earlier records kept by the webhook only: %d\n",
			n, seed, outcomes, recordsKeptByWebhookOnly)
		Expect(outcomes).To(HaveKey("admitted / admitted"), "the generator produced no admissible guest")
	}, SpecTimeout(5*time.Minute))
})

// installInjectionPolicies creates every policy and binding of
// deploy/spoke/policy/injection in c.
func installInjectionPolicies(ctx context.Context, c client.Client) error {
	objects, err := readInjectionPolicies()
	if err != nil {
		return err
	}
	for _, obj := range objects {
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

// guestOf is a guest of general-machine's machine type in namespace with
// the named containers.
func guestOf(namespace, name, machineType string, containers ...string) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{
		imperatorv1alpha1.PodRoleKey:      string(imperatorv1alpha1.PodRoleGuest),
		imperatorv1alpha1.MachineGroupKey: group,
		imperatorv1alpha1.MachineTypeKey:  machineType,
	}}}
	for _, c := range containers {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c, Image: "pause"})
	}
	return pod
}

// outcomeOf names an answer: admitted, or the refusal's HTTP status and
// reason.
func outcomeOf(err error) string {
	if err == nil {
		return "admitted"
	}
	if status, ok := err.(apierrors.APIStatus); ok {
		return fmt.Sprintf("%d %s", status.Status().Code, status.Status().Reason)
	}
	return "error"
}

// comparable is what a user sees of a created pod: its labels,
// annotations (but admitted-at, which only the webhook stamps: the policy
// path has no clock) and spec.
func comparable(pod *corev1.Pod) map[string]any {
	annotations := maps(pod.Annotations)
	delete(annotations, imperatorv1alpha1.AdmittedAtAnnotation)
	spec, err := json.Marshal(pod.Spec)
	Expect(err).NotTo(HaveOccurred())
	var decoded any
	Expect(json.Unmarshal(spec, &decoded)).To(Succeed())
	return map[string]any{"labels": maps(pod.Labels), "annotations": annotations, "spec": decoded}
}

func maps(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func recordWithoutReplaced(pod *corev1.Pod) map[string]any {
	var record map[string]any
	Expect(json.Unmarshal([]byte(pod.Annotations[imperatorv1alpha1.InjectedAnnotation]), &record)).To(Succeed())
	delete(record, "replaced")
	return record
}

// The generator draws from the same vocabulary as the injector's fuzz test
// (spoke/internal/webhook/podinjector/fuzz_test.go), adapted to pods an API
// server is asked to create: our keys and values, near misses and junk.
var (
	randomGroups     = []string{"", group, "equiv-dgx", "equiv-cpu", "unknown-group"}
	randomTypes      = []string{"", "compute-xlarge", "compute-medium", "compute-large", "a100", "cpu-small", "nope"}
	randomContainers = []string{"main", "sidecar", "trainer", ""}
	randomKeys       = []string{
		imperatorv1alpha1.Prefix + "compute-xlarge", imperatorv1alpha1.Prefix + "compute-medium", imperatorv1alpha1.Prefix + "a100",
		imperatorv1alpha1.NodePoolKey, imperatorv1alpha1.GPUFamilyLabel, imperatorv1alpha1.GPUProductLabel, imperatorv1alpha1.GPUMachineLabel,
		"topology.kubernetes.io/zone",
	}
	randomValues    = []string{group, "equiv-dgx", "ready", "maintenance", "ampere", "NVIDIA-GeForce-RTX-3090", "NVIDIA-A100-SXM4-80GB", "DGX-1", "DGX-A100", "1", "a"}
	randomOperators = []corev1.NodeSelectorOperator{
		corev1.NodeSelectorOpIn, corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn, corev1.NodeSelectorOpExists,
		corev1.NodeSelectorOpDoesNotExist, corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt,
	}
	randomResources  = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, "nvidia.com/gpu", corev1.ResourceEphemeralStorage, "example.com/fpga"}
	randomQuantities = []string{"0", "1", "2", "40", "40000m", "128Gi", "1Gi", "500m", "8", "64", "512Gi"}
	randomRecords    = []string{
		`{"machine":"general-machine","machineGroup":"general-machine","machineType":"compute-xlarge","container":"main"}`, "{", "null",
		`{"machine":"general-machine","machineGroup":"general-machine","machineType":"compute-xlarge","container":"main","replaced":[{"resource":"cpu","request":"1"}]}`,
	}
)

func choose[T any](r *rand.Rand, options []T) T { return options[r.IntN(len(options))] }

func randomContainer(r *rand.Rand, name string) corev1.Container {
	c := corev1.Container{Name: name, Image: "pause"}
	for range r.IntN(4) {
		resourceName, quantity := choose(r, randomResources), resource.MustParse(choose(r, randomQuantities))
		if r.IntN(2) == 0 {
			if c.Resources.Requests == nil {
				c.Resources.Requests = corev1.ResourceList{}
			}
			c.Resources.Requests[resourceName] = quantity
		} else {
			if c.Resources.Limits == nil {
				c.Resources.Limits = corev1.ResourceList{}
			}
			c.Resources.Limits[resourceName] = quantity
		}
	}
	return c
}

func randomRequirements(r *rand.Rand, n int) []corev1.NodeSelectorRequirement {
	var reqs []corev1.NodeSelectorRequirement
	for range n {
		req := corev1.NodeSelectorRequirement{Key: choose(r, randomKeys), Operator: choose(r, randomOperators)}
		// Mostly what the API server accepts for the operator, sometimes not.
		switch {
		case r.IntN(8) == 0:
			for range r.IntN(3) {
				req.Values = append(req.Values, choose(r, randomValues))
			}
		case req.Operator == corev1.NodeSelectorOpIn || req.Operator == corev1.NodeSelectorOpNotIn:
			for range 1 + r.IntN(2) {
				req.Values = append(req.Values, choose(r, randomValues))
			}
		case req.Operator == corev1.NodeSelectorOpGt || req.Operator == corev1.NodeSelectorOpLt:
			req.Values = []string{choose(r, []string{"0", "1", "5"})}
		}
		reqs = append(reqs, req)
	}
	return reqs
}

// randomPod is a pod of team-a (injection enabled): mostly guests, of known
// and unknown groups, types and containers, with resources, init
// containers, sidecars, tolerations, node selectors, affinity shapes and
// earlier records drawn at random. Many are invalid for the API server:
// both paths must refuse those.
func randomPod(r *rand.Rand, name string) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, Labels: map[string]string{}}}
	if r.IntN(5) > 0 {
		pod.Labels[imperatorv1alpha1.PodRoleKey] = string(imperatorv1alpha1.PodRoleGuest)
	}
	if g := choose(r, randomGroups); g != "" {
		pod.Labels[imperatorv1alpha1.MachineGroupKey] = g
	}
	if t := choose(r, randomTypes); t != "" {
		pod.Labels[imperatorv1alpha1.MachineTypeKey] = t
	}
	if r.IntN(3) == 0 {
		pod.Labels[imperatorv1alpha1.InjectingContainerKey] = choose(r, randomContainers[:3])
	}
	if r.IntN(4) == 0 {
		pod.Annotations = map[string]string{imperatorv1alpha1.InjectedAnnotation: choose(r, randomRecords)}
	}
	if r.IntN(6) == 0 {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[imperatorv1alpha1.AdmittedAtAnnotation] = "2020-01-01T00:00:00Z"
	}
	names := slices.Clone(randomContainers[:3])
	r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	for i := range 1 + r.IntN(3) {
		pod.Spec.Containers = append(pod.Spec.Containers, randomContainer(r, names[i]))
	}
	for i := range r.IntN(2) {
		c := randomContainer(r, "init-"+strconv.Itoa(i))
		if r.IntN(2) == 0 {
			always := corev1.ContainerRestartPolicyAlways
			c.RestartPolicy = &always
		}
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, c)
	}
	for range r.IntN(3) {
		t := corev1.Toleration{Key: choose(r, randomKeys), Operator: choose(r, []corev1.TolerationOperator{corev1.TolerationOpEqual, ""}),
			Value: choose(r, randomValues), Effect: choose(r, []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute, ""})}
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, t)
	}
	if r.IntN(4) == 0 {
		pod.Spec.NodeSelector = map[string]string{}
		for range 1 + r.IntN(2) {
			pod.Spec.NodeSelector[choose(r, randomKeys)] = choose(r, randomValues)
		}
	}
	if r.IntN(10) == 0 {
		pod.Spec.NodeName = "michiru"
	}
	switch r.IntN(5) {
	case 0, 1: // no affinity
	case 2:
		pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}}
	default:
		na := &corev1.NodeAffinity{}
		if r.IntN(4) > 0 {
			na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
			for range 1 + r.IntN(3) {
				term := corev1.NodeSelectorTerm{MatchExpressions: randomRequirements(r, r.IntN(3))}
				if len(term.MatchExpressions) == 0 || r.IntN(4) == 0 {
					term.MatchFields = []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"michiru"}}}
				}
				na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = append(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms, term)
			}
		}
		if r.IntN(2) == 0 {
			na.PreferredDuringSchedulingIgnoredDuringExecution = []corev1.PreferredSchedulingTerm{{
				Weight: int32(1 + r.IntN(100)), Preference: corev1.NodeSelectorTerm{MatchExpressions: randomRequirements(r, 1)}}}
		}
		pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: na}
	}
	return pod
}

// injectionPolicyDir holds the injection policies, relative to the
// repository root.
var injectionPolicyDir = filepath.Join("deploy", "spoke", "policy", "injection")

// readInjectionPolicies reads every object of injectionPolicyDir.
func readInjectionPolicies() ([]*unstructured.Unstructured, error) {
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	// The policies, not the directory's kustomization.yaml.
	paths, err := filepath.Glob(filepath.Join(root, injectionPolicyDir, "guest-*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no policies in %s", injectionPolicyDir)
	}
	var objects []*unstructured.Unstructured
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
		for {
			doc, err := docs.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", path, err)
			}
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
				return nil, fmt.Errorf("reading %s: %w", path, err)
			}
			if len(obj.Object) > 0 {
				objects = append(objects, obj)
			}
		}
	}
	return objects, nil
}
