package machinetype

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

func TestPodsOfAMachineTypeAskForExactlyItsShapeAndNodes(t *testing.T) {
	cpuOnly := imperatorv1alpha1.MachineType{
		Name: "cpu-small",
		Spec: imperatorv1alpha1.MachineTypeSpec{CPU: resource.MustParse("2"), Memory: resource.MustParse("4Gi")},
	}
	gpu := imperatorv1alpha1.MachineType{
		Name: "compute-xlarge",
		Spec: imperatorv1alpha1.MachineTypeSpec{
			CPU: resource.MustParse("40"), Memory: resource.MustParse("128Gi"),
			GPU: &imperatorv1alpha1.GPUSpec{Type: "nvidia.com/gpu", Num: 2, Product: "NVIDIA-GeForce-RTX-3090", Machine: "DGX-1"},
		},
	}
	in := func(key, value string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{value}}
	}
	cases := map[string]struct {
		machineType   imperatorv1alpha1.MachineType
		wantResources corev1.ResourceList
		wantPlacement []corev1.NodeSelectorRequirement
	}{
		"cpu-only type: no GPU resource, no GPU selector": {
			machineType:   cpuOnly,
			wantResources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
			wantPlacement: []corev1.NodeSelectorRequirement{
				in("imperator.tenzen-y.io/cpu-small", "pool"),
				in("imperator.tenzen-y.io/node-pool", "ready"),
			},
		},
		"GPU type: GPU count and only the selectors that are set, family before product before machine": {
			machineType: gpu,
			wantResources: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("40"), corev1.ResourceMemory: resource.MustParse("128Gi"),
				"nvidia.com/gpu": resource.MustParse("2"),
			},
			wantPlacement: []corev1.NodeSelectorRequirement{
				in("imperator.tenzen-y.io/compute-xlarge", "pool"),
				in("imperator.tenzen-y.io/node-pool", "ready"),
				in("nvidia.com/gpu.product", "NVIDIA-GeForce-RTX-3090"),
				in("nvidia.com/gpu.machine", "DGX-1"),
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.wantResources, Resources(tc.machineType.Spec)); diff != "" {
				t.Errorf("Resources (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPlacement, Placement("pool", &tc.machineType)); diff != "" {
				t.Errorf("Placement (-want +got):\n%s", diff)
			}
			wantTolerations := []corev1.Toleration{
				{Key: "imperator.tenzen-y.io/" + tc.machineType.Name, Operator: corev1.TolerationOpEqual, Value: "pool", Effect: corev1.TaintEffectNoSchedule},
				{Key: "imperator.tenzen-y.io/node-pool", Operator: corev1.TolerationOpEqual, Value: "ready", Effect: corev1.TaintEffectNoSchedule},
			}
			if diff := cmp.Diff(wantTolerations, Tolerations("pool", tc.machineType.Name)); diff != "" {
				t.Errorf("Tolerations (-want +got):\n%s", diff)
			}
		})
	}
}
