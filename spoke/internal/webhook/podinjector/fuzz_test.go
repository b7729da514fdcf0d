package podinjector

import (
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// fuzzBytes hands out choices from the fuzzer's bytes; once they run out
// every choice is the first option.
type fuzzBytes struct{ data []byte }

func (f *fuzzBytes) intn(n int) int {
	if n <= 1 || len(f.data) == 0 {
		return 0
	}
	b := f.data[0]
	f.data = f.data[1:]
	return int(b) % n
}

func (f *fuzzBytes) bool() bool { return f.intn(2) == 1 }

func pick[T any](f *fuzzBytes, options ...T) T { return options[f.intn(len(options))] }

// Pools the fuzzer draws from: our keys and values, near misses, and junk.
var (
	fuzzGroups     = []string{"", group, "other-group", "dgx"}
	fuzzTypes      = []string{"", "compute-xlarge", "compute-medium", "compute-large", "a100", "node-pool", "nope"}
	fuzzContainers = []string{"main", "sidecar", "trainer", "", "main"}
	fuzzKeys       = []string{
		xlargeKey, mediumKey, largeKey, imperatorv1alpha1.Prefix + "a100", nodePool,
		imperatorv1alpha1.GPUFamilyLabel, imperatorv1alpha1.GPUProductLabel, imperatorv1alpha1.GPUMachineLabel,
		"topology.kubernetes.io/zone", "",
	}
	fuzzValues    = []string{group, "ready", "maintenance", "dgx", "ampere", "NVIDIA-GeForce-RTX-3090", "DGX-1", "DGX-A100", "1", "", "a"}
	fuzzOperators = []corev1.NodeSelectorOperator{
		corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn, corev1.NodeSelectorOpExists,
		corev1.NodeSelectorOpDoesNotExist, corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt, "Bogus", "",
	}
	fuzzResources  = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, "nvidia.com/gpu", corev1.ResourceEphemeralStorage, "example.com/fpga"}
	fuzzQuantities = []string{"0", "1", "2", "40", "40000m", "128Gi", "1Gi", "500m", "8"}
	fuzzRecords    = []string{
		xlargeRecordMain, "{", "null", `{"replaced":[{"resource":"cpu","request":"1"}]}`,
		`{"machine":"general-machine","machineGroup":"general-machine","machineType":"compute-xlarge","container":"main","replaced":[{"resource":"cpu","request":"1"},{"resource":"cpu"}]}`,
	}
)

func fuzzMachines() []*imperatorv1alpha1.Machine {
	return []*imperatorv1alpha1.Machine{
		nil,
		wrappers.GeneralMachine().Obj(),
		wrappers.MakeMachine("dgx", "dgx").Type("a100", "64", "512Gi", 1).GPU("nvidia.com/gpu", 8, "NVIDIA-A100-SXM4-80GB", "ampere").GPUMachine("DGX-A100").Obj(),
		// A type name colliding with the node-pool key: our own expressions
		// contradict each other, which must be a denial, not a panic.
		wrappers.MakeMachine("odd", "other-group").Type("node-pool", "1", "1Gi", 1).Type("compute-xlarge", "1", "1Gi", 1).Obj(),
		{ObjectMeta: metav1.ObjectMeta{Name: "empty"}},
	}
}

func fuzzContainer(f *fuzzBytes) corev1.Container {
	c := corev1.Container{Name: pick(f, fuzzContainers...), Image: "pause"}
	for range f.intn(4) {
		if c.Resources.Requests == nil {
			c.Resources.Requests = corev1.ResourceList{}
			c.Resources.Limits = corev1.ResourceList{}
		}
		name := pick(f, fuzzResources...)
		if f.bool() {
			c.Resources.Requests[name] = resource.MustParse(pick(f, fuzzQuantities...))
		} else {
			c.Resources.Limits[name] = resource.MustParse(pick(f, fuzzQuantities...))
		}
	}
	return c
}

func fuzzRequirements(f *fuzzBytes, n int) []corev1.NodeSelectorRequirement {
	var reqs []corev1.NodeSelectorRequirement
	for range n {
		req := corev1.NodeSelectorRequirement{Key: pick(f, fuzzKeys...), Operator: pick(f, fuzzOperators...)}
		for range f.intn(3) {
			req.Values = append(req.Values, pick(f, fuzzValues...))
		}
		reqs = append(reqs, req)
	}
	return reqs
}

// fuzzPod builds an arbitrary pod from the fuzzer's bytes: any combination of
// labels, containers, init containers, resources, tolerations, affinity
// shapes, nodeSelector and (possibly malformed) injection records.
func fuzzPod(f *fuzzBytes) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "fuzz"}}
	labels := map[string]string{}
	// A slice, not a map: the bytes must be consumed in a fixed order.
	for _, label := range []struct {
		key     string
		options []string
	}{
		{imperatorv1alpha1.PodRoleKey, []string{"guest", "", "reservation", "guest"}},
		{imperatorv1alpha1.MachineGroupKey, fuzzGroups},
		{imperatorv1alpha1.MachineTypeKey, fuzzTypes},
	} {
		if v := pick(f, label.options...); v != "" || f.bool() {
			labels[label.key] = v
		}
	}
	if f.bool() {
		labels[imperatorv1alpha1.InjectingContainerKey] = pick(f, fuzzContainers...)
	}
	if len(labels) > 0 || f.bool() {
		pod.Labels = labels
	}
	if f.intn(4) == 0 {
		pod.Annotations = map[string]string{imperatorv1alpha1.InjectedAnnotation: pick(f, fuzzRecords...)}
	}

	for range f.intn(4) {
		pod.Spec.Containers = append(pod.Spec.Containers, fuzzContainer(f))
	}
	for range f.intn(3) {
		c := fuzzContainer(f)
		if f.bool() {
			c.RestartPolicy = ptrTo(corev1.ContainerRestartPolicyAlways) // a sidecar
		}
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, c)
	}
	if f.intn(4) == 0 {
		level := fuzzContainer(f).Resources
		pod.Spec.Resources = &level
	}
	if f.intn(4) == 0 {
		pod.Spec.RuntimeClassName = ptrTo("kata")
		pod.Spec.Overhead = fuzzContainer(f).Resources.Requests
	}
	if f.intn(8) == 0 {
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptrTo("gpus")}}
	}
	for range f.intn(4) {
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{
			Key:      pick(f, fuzzKeys...),
			Operator: pick(f, corev1.TolerationOpEqual, corev1.TolerationOpExists, ""),
			Value:    pick(f, fuzzValues...),
			Effect:   pick(f, corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute, ""),
		})
	}
	if f.bool() {
		pod.Spec.NodeSelector = map[string]string{}
		for range f.intn(3) {
			pod.Spec.NodeSelector[pick(f, fuzzKeys...)] = pick(f, fuzzValues...)
		}
	}

	switch f.intn(5) {
	case 0: // no affinity
	case 1:
		pod.Spec.Affinity = &corev1.Affinity{}
	case 2:
		pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}}
	default:
		na := &corev1.NodeAffinity{}
		if f.bool() {
			na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
			for range f.intn(4) {
				na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = append(
					na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms,
					corev1.NodeSelectorTerm{MatchExpressions: fuzzRequirements(f, f.intn(4))})
			}
		}
		for range f.intn(3) {
			na.PreferredDuringSchedulingIgnoredDuringExecution = append(na.PreferredDuringSchedulingIgnoredDuringExecution,
				corev1.PreferredSchedulingTerm{Weight: int32(1 + f.intn(100)), Preference: term(fuzzRequirements(f, 1+f.intn(2))...)})
		}
		pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: na}
	}
	return pod
}

// FuzzInject feeds arbitrary pods and Machines to Inject and checks that it
// never panics nor modifies its input, that it denies only with a message,
// that an admitted guest carries its machine type in every required term,
// its tolerations and its target container, that it asks for no more than
// one unit as the scheduler counts it, and that re-injecting changes
// nothing.
func FuzzInject(f *testing.F) {
	for _, seed := range []string{
		"", "\x00\x01\x01\x01", "\x00\x01\x01\x00\x01\x03\x01\x02\x03\x04\x05\x06\x07",
		"\x03\x01\x01\x01\x01\x01\x02\x00\x01\x04\x01\x03\x00\x00\x02\x03\x04",
		"\x02\x00\x01\x00\x01\x04\x01\x02\x02\x01\x03\x01\x03\x02\x04\x00\x00\x04\x01\x03\x03\x05\x02",
	} {
		f.Add([]byte(seed))
	}
	machines := fuzzMachines()

	f.Fuzz(func(t *testing.T, data []byte) {
		choices := &fuzzBytes{data: data}
		machine := pick(choices, machines...)
		pod := fuzzPod(choices)
		before := pod.DeepCopy()

		got, record, err := Inject(pod, machine)
		if diff := cmp.Diff(before, pod, quantities); diff != "" {
			t.Fatalf("Inject modified its input (-before +after):\n%s", diff)
		}
		if err != nil {
			var deniedErr *DeniedError
			if !errors.As(err, &deniedErr) || deniedErr.Reason == "" {
				t.Fatalf("Inject() error = %v, want a denial with a message", err)
			}
			return
		}
		if record == nil {
			if diff := cmp.Diff(before, got, quantities); diff != "" {
				t.Fatalf("a pod that is not a guest was changed (-before +after):\n%s", diff)
			}
			return
		}

		machineType := machine.MachineType(record.MachineType)
		if machineType == nil {
			t.Fatalf("record names machine type %q, which the Machine does not offer", record.MachineType)
		}
		assertInjected(t, got, record, machineType)
		assertFitsUnit(t, got, record, machineType)

		again, againRecord, err := Inject(got, machine)
		if err != nil {
			t.Fatalf("re-injecting an injected pod: %v", err)
		}
		if diff := cmp.Diff(got, again, quantities); diff != "" {
			t.Fatalf("re-injecting changed the pod (-once +twice):\n%s", diff)
		}
		if diff := cmp.Diff(record, againRecord); diff != "" {
			t.Fatalf("re-injecting changed the record (-once +twice):\n%s", diff)
		}
	})
}

// assertInjected checks an injected pod against the machine type, written
// independently of the implementation.
func assertInjected(t *testing.T, pod *corev1.Pod, record *Record, machineType *imperatorv1alpha1.MachineType) {
	t.Helper()
	typeKey := imperatorv1alpha1.Prefix + machineType.Name
	want := []corev1.NodeSelectorRequirement{in(typeKey, record.MachineGroup), in(nodePool, "ready")}
	wantResources := corev1.ResourceList{corev1.ResourceCPU: machineType.Spec.CPU, corev1.ResourceMemory: machineType.Spec.Memory}
	if gpu := machineType.Spec.GPU; gpu != nil {
		for key, value := range map[string]string{
			imperatorv1alpha1.GPUFamilyLabel: gpu.Family, imperatorv1alpha1.GPUProductLabel: gpu.Product, imperatorv1alpha1.GPUMachineLabel: gpu.Machine,
		} {
			if value != "" {
				want = append(want, in(key, value))
			}
		}
		wantResources[corev1.ResourceName(gpu.Type)] = resource.MustParse(strconv.Itoa(int(gpu.Num)))
	}

	if pod.Spec.Affinity == nil || pod.Spec.Affinity.NodeAffinity == nil ||
		pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil ||
		len(pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		t.Fatalf("injected pod has no required node selector terms: %+v", pod.Spec.Affinity)
	}
	for i, term := range pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, req := range want {
			if !slices.ContainsFunc(term.MatchExpressions, func(e corev1.NodeSelectorRequirement) bool {
				return e.Key == req.Key && e.Operator == req.Operator && slices.Equal(e.Values, req.Values)
			}) {
				t.Fatalf("required term %d lacks %s In %v: %+v", i, req.Key, req.Values, term.MatchExpressions)
			}
		}
	}

	for _, tol := range []corev1.Toleration{toleration(typeKey, record.MachineGroup), toleration(nodePool, "ready")} {
		if !slices.ContainsFunc(pod.Spec.Tolerations, func(t corev1.Toleration) bool {
			return t.Key == tol.Key && t.Value == tol.Value && t.Effect == tol.Effect &&
				(t.Operator == corev1.TolerationOpEqual || t.Operator == "")
		}) {
			t.Fatalf("injected pod lacks toleration %s=%s: %+v", tol.Key, tol.Value, pod.Spec.Tolerations)
		}
	}

	var container *corev1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == record.Container {
			container = &pod.Spec.Containers[i]
			break
		}
	}
	if container == nil {
		t.Fatalf("record names container %q, which the pod does not have", record.Container)
	}
	for name, q := range wantResources {
		if got := container.Resources.Requests[name]; got.Cmp(q) != 0 {
			t.Fatalf("container %q requests %s=%s, want %s", container.Name, name, got.String(), q.String())
		}
		if got := container.Resources.Limits[name]; got.Cmp(q) != 0 {
			t.Fatalf("container %q limits %s=%s, want %s", container.Name, name, got.String(), q.String())
		}
	}
}
