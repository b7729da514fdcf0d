package podinjector

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// checkOneUnit denies a guest that would take more than one unit of its
// machine type once the target container holds the unit: the scheduler
// places a pod by the sum of its app and sidecar containers' requests (or
// its largest init container, if larger), its pod-level requests when set,
// plus its overhead, and the node's device plugin hands out the GPUs every
// container asks for. Since the target container gets requests = limits =
// the unit, the pod fits the unit exactly when, for each of the unit's
// resources (cpu, memory and the type's GPU resource):
//   - no other container, and no sidecar (an init container with
//     restartPolicy Always, which runs beside them), asks for any of it;
//   - no init container asks for more cpu or memory than the unit, nor for
//     any of the GPU: the type's GPUs belong to the target container only;
//   - the pod-level requests, when set, are at most the unit;
//   - the pod has no overhead of it (a RuntimeClass with overhead makes the
//     pod bigger than the slot a reservation pod leaves);
//   - the pod claims no devices through dynamic resource allocation
//     (spec.resourceClaims): its devices are its unit's GPUs.
//
// A container's ask is its request, or its limit when it sets no request
// (the API server defaults one to the other). Resources outside the unit
// (ephemeral-storage, hugepages, other extended resources) are not the
// machine type's business. The imperator-guest-one-unit admission policy
// enforces the same rules in the API server
// (deploy/spoke/policy/guest-one-unit.yaml).
func checkOneUnit(pod *corev1.Pod, target int, typeName string, contract *typeContract) error {
	unit := contract.resources
	for i := range pod.Spec.Containers {
		if i == target {
			continue
		}
		c := &pod.Spec.Containers[i]
		if name, q, ok := firstAsked(c.Resources, contract.resourceNames); ok {
			return denied("%s.resources.requests[%s]: asks for %s of machine type %q's %s, which the injected container %q holds whole "+
				"(a guest gets one unit: %s); only the injected container may ask for cpu, memory or GPUs of the type",
				containerPath("spec.containers", i, c.Name), name, q, typeName, name, pod.Spec.Containers[target].Name, describeUnit(contract))
		}
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		path := containerPath("spec.initContainers", i, c.Name)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			if name, q, ok := firstAsked(c.Resources, contract.resourceNames); ok {
				return denied("%s.resources.requests[%s]: the sidecar asks for %s of machine type %q's %s, which the injected container %q holds whole "+
					"(a guest gets one unit: %s); a sidecar runs beside it and may not ask for cpu, memory or GPUs of the type",
					path, name, q, typeName, name, pod.Spec.Containers[target].Name, describeUnit(contract))
			}
			continue
		}
		for _, name := range contract.resourceNames {
			q, ok := asked(c.Resources, name)
			if !ok || q.IsZero() {
				continue
			}
			if name != corev1.ResourceCPU && name != corev1.ResourceMemory {
				return denied("%s.resources.requests[%s]: an init container may not ask for machine type %q's GPUs (%s): they belong to the injected container %q",
					path, name, typeName, q.String(), pod.Spec.Containers[target].Name)
			}
			if limit := unit[name]; q.Cmp(limit) > 0 {
				return denied("%s.resources.requests[%s]: %s is more than machine type %q's unit has (%s)",
					path, name, q.String(), typeName, limit.String())
			}
		}
	}
	if pod.Spec.Resources != nil {
		for _, name := range contract.resourceNames {
			q, ok := pod.Spec.Resources.Requests[name]
			if !ok {
				q, ok = pod.Spec.Resources.Limits[name]
			}
			if limit := unit[name]; ok && q.Cmp(limit) > 0 {
				return denied("spec.resources.requests[%s]: the pod-level request %s is more than machine type %q's unit has (%s)",
					name, q.String(), typeName, limit.String())
			}
		}
	}
	for _, name := range contract.resourceNames {
		if q, ok := pod.Spec.Overhead[name]; ok && !q.IsZero() {
			return denied("spec.overhead[%s]: %s (from RuntimeClass %q) would make the guest bigger than one unit of machine type %q (%s); "+
				"use a RuntimeClass without overhead", name, q.String(), runtimeClass(pod), typeName, describeUnit(contract))
		}
	}
	if len(pod.Spec.ResourceClaims) > 0 {
		return denied("spec.resourceClaims: a guest of machine type %q gets its devices with its unit (%s); it may not claim more through "+
			"dynamic resource allocation (claim %q)", typeName, describeUnit(contract), pod.Spec.ResourceClaims[0].Name)
	}
	return nil
}

// asked is what resources ask of name: the request, else the limit (which
// the API server copies into a missing request).
func asked(resources corev1.ResourceRequirements, name corev1.ResourceName) (resource.Quantity, bool) {
	if q, ok := resources.Requests[name]; ok {
		return q, true
	}
	q, ok := resources.Limits[name]
	return q, ok
}

// firstAsked returns the first of names that resources ask a non-zero
// quantity of.
func firstAsked(resources corev1.ResourceRequirements, names []corev1.ResourceName) (corev1.ResourceName, string, bool) {
	for _, name := range names {
		if q, ok := asked(resources, name); ok && !q.IsZero() {
			return name, q.String(), true
		}
	}
	return "", "", false
}

// containerPath names a container by its field path and name.
func containerPath(list string, index int, name string) string {
	return list + "[" + strconv.Itoa(index) + "] (" + strconv.Quote(name) + ")"
}

// describeUnit spells a unit as "cpu 40, memory 128Gi, nvidia.com/gpu 2".
func describeUnit(contract *typeContract) string {
	out := ""
	for i, name := range contract.resourceNames {
		if i > 0 {
			out += ", "
		}
		q := contract.resources[name]
		out += fmt.Sprintf("%s %s", name, q.String())
	}
	return out
}

func runtimeClass(pod *corev1.Pod) string {
	if pod.Spec.RuntimeClassName == nil {
		return ""
	}
	return *pod.Spec.RuntimeClassName
}
