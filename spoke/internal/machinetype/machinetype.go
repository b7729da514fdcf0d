// Package machinetype is the scheduling contract of a machine type: what a
// pod of the type requests, which taints it tolerates and which node labels
// it requires. Reservation pods (the Machine controller) and injected guests
// (the Pod Resource Injector) both take it from here, so a guest always fits
// exactly the slot a reservation held.
package machinetype

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// Resources is one unit of the type: its cpu, memory and GPUs, used as both
// requests and limits.
func Resources(spec imperatorv1alpha1.MachineTypeSpec) corev1.ResourceList {
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    spec.CPU,
		corev1.ResourceMemory: spec.Memory,
	}
	if gpu := spec.GPU; gpu != nil && gpu.Type != "" {
		resources[corev1.ResourceName(gpu.Type)] = *resource.NewQuantity(int64(gpu.Num), resource.DecimalSI)
	}
	return resources
}

// Tolerations are the NoSchedule tolerations of the type's taint
// (imperator.tenzen-y.io/<type>=<group>) and of the ready node pool's taint.
func Tolerations(group, typeName string) []corev1.Toleration {
	return []corev1.Toleration{
		{Key: imperatorv1alpha1.MachineTypeKeyFor(typeName), Operator: corev1.TolerationOpEqual, Value: group, Effect: corev1.TaintEffectNoSchedule},
		{Key: imperatorv1alpha1.NodePoolKey, Operator: corev1.TolerationOpEqual, Value: string(imperatorv1alpha1.NodePoolReady), Effect: corev1.TaintEffectNoSchedule},
	}
}

// Placement is the node label requirements of the type in a group, in this
// order: the type's own key, the ready node pool, then the GPU Feature
// Discovery selectors that are set (family, product, machine). Each requires
// its key to equal one value.
func Placement(group string, machineType *imperatorv1alpha1.MachineType) []corev1.NodeSelectorRequirement {
	reqs := []corev1.NodeSelectorRequirement{
		in(imperatorv1alpha1.MachineTypeKeyFor(machineType.Name), group),
		in(imperatorv1alpha1.NodePoolKey, string(imperatorv1alpha1.NodePoolReady)),
	}
	if gpu := machineType.Spec.GPU; gpu != nil {
		for _, sel := range []struct{ key, value string }{
			{imperatorv1alpha1.GPUFamilyLabel, gpu.Family},
			{imperatorv1alpha1.GPUProductLabel, gpu.Product},
			{imperatorv1alpha1.GPUMachineLabel, gpu.Machine},
		} {
			if sel.value != "" {
				reqs = append(reqs, in(sel.key, sel.value))
			}
		}
	}
	return reqs
}

func in(key, value string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{value}}
}
