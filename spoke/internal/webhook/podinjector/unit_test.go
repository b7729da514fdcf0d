package podinjector

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// compute-xlarge of general-machine is 40 CPUs, 128Gi and 2 nvidia.com/gpu:
// what a guest's pod may add around the container that holds it.
func TestGuestTakesOneUnitOnly(t *testing.T) {
	general := wrappers.GeneralMachine().Obj()
	sidecar := func(p *corev1.Pod, resources corev1.ResourceList) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "proxy", Image: "envoy",
			RestartPolicy: ptrTo(corev1.ContainerRestartPolicyAlways), Resources: corev1.ResourceRequirements{Requests: resources}})
	}
	initContainer := func(p *corev1.Pod, resources corev1.ResourceList) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "fetch", Image: "busybox",
			Resources: corev1.ResourceRequirements{Requests: resources}})
	}
	list := func(pairs ...string) corev1.ResourceList {
		out := corev1.ResourceList{}
		for i := 0; i < len(pairs); i += 2 {
			out[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
		}
		return out
	}
	cases := map[string]struct {
		pod        *corev1.Pod
		edit       func(*corev1.Pod)
		wantDenied []string
	}{
		"a second container asking for 4 GPUs is refused, naming it": {
			pod:        guest().Container("sidecar", "busybox").Request(1, "nvidia.com/gpu", "4").Obj(),
			wantDenied: []string{`spec.containers[1] ("sidecar").resources.requests[nvidia.com/gpu]`, "asks for 4", `"main" holds whole`},
		},
		"a second container with a GPU limit only (the request defaults to it) is refused": {
			pod: guest().Container("sidecar", "busybox").Obj(),
			edit: func(p *corev1.Pod) {
				p.Spec.Containers[1].Resources.Limits = list("nvidia.com/gpu", "1")
			},
			wantDenied: []string{`spec.containers[1] ("sidecar").resources.requests[nvidia.com/gpu]`},
		},
		"a second container asking for cpu is refused: the target holds all the unit's cpu": {
			pod:        guest().Container("sidecar", "busybox").Request(1, corev1.ResourceCPU, "100m").Obj(),
			wantDenied: []string{`spec.containers[1] ("sidecar").resources.requests[cpu]`, "asks for 100m"},
		},
		"a second container asking for none of the unit is admitted": {
			pod: guest().Container("sidecar", "busybox").Request(1, corev1.ResourceEphemeralStorage, "1Gi").Obj(),
		},
		"a second container asking for zero cpu is admitted": {
			pod: guest().Container("sidecar", "busybox").Request(1, corev1.ResourceCPU, "0").Obj(),
		},
		"a sidecar asking for memory is refused: it runs beside the target": {
			pod:        guest().Obj(),
			edit:       func(p *corev1.Pod) { sidecar(p, list("memory", "128Mi")) },
			wantDenied: []string{`spec.initContainers[0] ("proxy").resources.requests[memory]`, "sidecar"},
		},
		"an init container asking for a GPU is refused": {
			pod:        guest().Obj(),
			edit:       func(p *corev1.Pod) { initContainer(p, list("nvidia.com/gpu", "1")) },
			wantDenied: []string{`spec.initContainers[0] ("fetch").resources.requests[nvidia.com/gpu]`, "GPUs"},
		},
		"an init container asking for zero GPUs is admitted, as the policy admits it": {
			pod:  guest().Obj(),
			edit: func(p *corev1.Pod) { initContainer(p, list("nvidia.com/gpu", "0")) },
		},
		"an init container asking for more cpu than the unit is refused": {
			pod:        guest().Obj(),
			edit:       func(p *corev1.Pod) { initContainer(p, list("cpu", "41")) },
			wantDenied: []string{`spec.initContainers[0] ("fetch").resources.requests[cpu]`, "41 is more than", "(40)"},
		},
		"an init container asking for the whole unit's cpu and memory is admitted: it runs before the target": {
			pod:  guest().Obj(),
			edit: func(p *corev1.Pod) { initContainer(p, list("cpu", "40", "memory", "128Gi")) },
		},
		"pod-level requests above the unit are refused": {
			pod: guest().Obj(),
			edit: func(p *corev1.Pod) {
				p.Spec.Resources = &corev1.ResourceRequirements{Requests: list("cpu", "90")}
			},
			wantDenied: []string{"spec.resources.requests[cpu]", "pod-level request 90"},
		},
		"pod-level requests of the unit are admitted": {
			pod: guest().Obj(),
			edit: func(p *corev1.Pod) {
				p.Spec.Resources = &corev1.ResourceRequirements{Requests: list("cpu", "40", "memory", "128Gi")}
			},
		},
		"a RuntimeClass overhead of cpu is refused, naming the class": {
			pod: guest().Obj(),
			edit: func(p *corev1.Pod) {
				p.Spec.RuntimeClassName = ptrTo("kata")
				p.Spec.Overhead = list("cpu", "250m")
			},
			wantDenied: []string{"spec.overhead[cpu]", `RuntimeClass "kata"`},
		},
		"a device claimed through dynamic resource allocation is refused": {
			pod: guest().Obj(),
			edit: func(p *corev1.Pod) {
				p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "extra-gpus", ResourceClaimName: ptrTo("gpus")}}
			},
			wantDenied: []string{"spec.resourceClaims", `"extra-gpus"`},
		},
		"the injecting container named by label holds the unit; the first container may not ask": {
			pod:        guest().Label(containerL, "trainer").Container("trainer", "pytorch").Request(0, "nvidia.com/gpu", "1").Obj(),
			wantDenied: []string{`spec.containers[0] ("main").resources.requests[nvidia.com/gpu]`, `"trainer" holds whole`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := tc.pod
			if tc.edit != nil {
				tc.edit(pod)
			}
			got, record, err := Inject(pod, general)
			if len(tc.wantDenied) > 0 {
				if err == nil {
					t.Fatalf("Inject() admitted the guest, want a denial containing %q", tc.wantDenied)
				}
				for _, want := range tc.wantDenied {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("denial %q does not contain %q", err.Error(), want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Inject() error = %v", err)
			}
			assertFitsUnit(t, got, record, general.MachineType(record.MachineType))
		})
	}
}

// assertFitsUnit checks an admitted guest with the scheduler's own sum
// (k8s.io/component-helpers/resource.PodRequests: app and sidecar
// containers, init containers, pod-level requests, overhead) after the API
// server's defaulting of a missing request to its limit: the pod asks for at
// most one unit of each of the type's resources, and only the injected
// container asks for its GPUs.
func assertFitsUnit(t *testing.T, pod *corev1.Pod, record *Record, machineType *imperatorv1alpha1.MachineType) {
	t.Helper()
	defaulted := pod.DeepCopy()
	for _, list := range [][]corev1.Container{defaulted.Spec.Containers, defaulted.Spec.InitContainers} {
		for i := range list {
			r := &list[i].Resources
			for name, limit := range r.Limits {
				if _, ok := r.Requests[name]; !ok {
					if r.Requests == nil {
						r.Requests = corev1.ResourceList{}
					}
					r.Requests[name] = limit
				}
			}
		}
	}
	unit := corev1.ResourceList{corev1.ResourceCPU: machineType.Spec.CPU, corev1.ResourceMemory: machineType.Spec.Memory}
	var gpu corev1.ResourceName
	if machineType.Spec.GPU != nil && machineType.Spec.GPU.Type != "" {
		gpu = corev1.ResourceName(machineType.Spec.GPU.Type)
		unit[gpu] = *resource.NewQuantity(int64(machineType.Spec.GPU.Num), resource.DecimalSI)
	}
	requests := resourcehelper.PodRequests(defaulted, resourcehelper.PodResourcesOptions{})
	for name, limit := range unit {
		if got := requests[name]; got.Cmp(limit) > 0 {
			t.Fatalf("admitted guest asks for %s %s in all (scheduler's sum), more than one unit of %s (%s)",
				name, got.String(), machineType.Name, limit.String())
		}
	}
	if gpu == "" {
		return
	}
	for _, list := range [][]corev1.Container{defaulted.Spec.Containers, defaulted.Spec.InitContainers} {
		for _, c := range list {
			if q, ok := c.Resources.Requests[gpu]; ok && !q.IsZero() && c.Name != record.Container {
				t.Fatalf("admitted guest's container %q asks for %s %s: only %q may", c.Name, q.String(), gpu, record.Container)
			}
		}
	}
}
