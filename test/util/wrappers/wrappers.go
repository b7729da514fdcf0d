// Package wrappers builds API objects for tests in a few readable lines, in the
// style of Kueue's testing wrappers:
//
//	wrappers.MakeMachine("general-machine", "general-machine").
//		Type("compute-xlarge", "40000m", "128Gi", 1).GPU("nvidia.com/gpu", 2, "NVIDIA-GeForce-RTX-3090", "").
//		Node("michiru", "compute-xlarge").Tainted().Obj()
package wrappers

import (
	"encoding/json"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// MachineWrapper builds a Machine.
type MachineWrapper struct{ imperatorv1alpha1.Machine }

// MakeMachine starts a Machine labelled with its machine group.
func MakeMachine(name, group string) *MachineWrapper {
	return &MachineWrapper{imperatorv1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{imperatorv1alpha1.MachineGroupKey: group}},
	}}
}

// Obj returns a copy of the Machine.
func (w *MachineWrapper) Obj() *imperatorv1alpha1.Machine { return w.DeepCopy() }

// Label sets a label; an empty value removes it.
func (w *MachineWrapper) Label(key, value string) *MachineWrapper {
	w.Labels = setOrDelete(w.Labels, key, value)
	return w
}

// Type appends a CPU/memory machine type; GPU adds GPUs to the last one.
func (w *MachineWrapper) Type(name, cpu, memory string, available int32) *MachineWrapper {
	w.Spec.MachineTypes = append(w.Spec.MachineTypes, imperatorv1alpha1.MachineType{
		Name:      name,
		Available: available,
		Spec: imperatorv1alpha1.MachineTypeSpec{
			CPU:    resource.MustParse(cpu),
			Memory: resource.MustParse(memory),
		},
	})
	return w
}

// GPU gives the last machine type num GPUs of resource gpuType, selected by
// product and family (either may be empty).
func (w *MachineWrapper) GPU(gpuType string, num int32, product, family string) *MachineWrapper {
	last := &w.Spec.MachineTypes[len(w.Spec.MachineTypes)-1]
	last.Spec.GPU = &imperatorv1alpha1.GPUSpec{Type: gpuType, Num: num, Product: product, Family: family}
	return w
}

// Available sets the available units of the named machine type.
func (w *MachineWrapper) Available(machineType string, available int32) *MachineWrapper {
	for i := range w.Spec.MachineTypes {
		if w.Spec.MachineTypes[i].Name == machineType {
			w.Spec.MachineTypes[i].Available = available
		}
	}
	return w
}

// Node appends a node serving machineType in ready mode without taints.
func (w *MachineWrapper) Node(node, machineType string) *MachineWrapper {
	w.Spec.NodePool = append(w.Spec.NodePool, imperatorv1alpha1.NodePool{
		Name:        node,
		Mode:        imperatorv1alpha1.NodePoolModeReady,
		MachineType: []imperatorv1alpha1.MachineTypeRef{{Name: machineType}},
	})
	return w
}

// Select appends a selector entry taking every node labelled with all of
// matchLabels into machineType, in ready mode without taints.
func (w *MachineWrapper) Select(matchLabels map[string]string, machineType string) *MachineWrapper {
	w.Spec.NodePool = append(w.Spec.NodePool, imperatorv1alpha1.NodePool{
		NodeSelector: &metav1.LabelSelector{MatchLabels: matchLabels},
		Mode:         imperatorv1alpha1.NodePoolModeReady,
		MachineType:  []imperatorv1alpha1.MachineTypeRef{{Name: machineType}},
	})
	return w
}

// Maintenance puts the last node (or selector entry) in maintenance mode.
func (w *MachineWrapper) Maintenance() *MachineWrapper {
	w.Spec.NodePool[len(w.Spec.NodePool)-1].Mode = imperatorv1alpha1.NodePoolModeMaintenance
	return w
}

// Tainted makes the agent taint the last node (or the selected ones).
func (w *MachineWrapper) Tainted() *MachineWrapper {
	w.Spec.NodePool[len(w.Spec.NodePool)-1].Taint = true
	return w
}

// GPUMachine narrows the last machine type's GPU to nodes labelled
// nvidia.com/gpu.machine=machine.
func (w *MachineWrapper) GPUMachine(machine string) *MachineWrapper {
	w.Spec.MachineTypes[len(w.Spec.MachineTypes)-1].Spec.GPU.Machine = machine
	return w
}

// GeneralMachine is the contract's example Machine (docs/contract.md,
// deploy/spoke/samples/general-machine.yaml), exactly: group
// general-machine; compute-xlarge (40 CPU, 128Gi, 2 × RTX-3090, 1 available)
// on michiru; compute-medium (6 CPU, 48Gi, 1 GPU of a DGX-1, 4 available) on
// utaha (maintenance, untainted) and eriri; compute-large (20 CPU, 64Gi, 1
// ampere GPU, 2 available) on no node.
func GeneralMachine() *MachineWrapper {
	return MakeMachine("general-machine", "general-machine").
		Type("compute-medium", "6000m", "48Gi", 4).GPU("nvidia.com/gpu", 1, "", "").GPUMachine("DGX-1").
		Type("compute-xlarge", "40000m", "128Gi", 1).GPU("nvidia.com/gpu", 2, "NVIDIA-GeForce-RTX-3090", "").
		Type("compute-large", "20000m", "64Gi", 2).GPU("nvidia.com/gpu", 1, "", "ampere").
		Node("michiru", "compute-xlarge").Tainted().
		Node("utaha", "compute-medium").Maintenance().
		Node("eriri", "compute-medium").Tainted()
}

// NodeWrapper builds a Node.
type NodeWrapper struct{ corev1.Node }

// MakeNode starts a Ready node with 8 CPUs, 32Gi of memory and 110 pods.
func MakeNode(name string) *NodeWrapper {
	return &NodeWrapper{corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
		Status: corev1.NodeStatus{
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("8"),
				corev1.ResourceMemory: resource.MustParse("32Gi"),
				corev1.ResourcePods:   resource.MustParse("110"),
			},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}}
}

// Obj returns a copy of the Node; Allocatable equals Capacity.
func (w *NodeWrapper) Obj() *corev1.Node {
	n := w.DeepCopy()
	n.Status.Allocatable = n.Status.Capacity.DeepCopy()
	return n
}

// Capacity sets a capacity figure, e.g. Capacity("cpu", "48").
func (w *NodeWrapper) Capacity(name corev1.ResourceName, quantity string) *NodeWrapper {
	w.Status.Capacity[name] = resource.MustParse(quantity)
	return w
}

// GPU gives the node num nvidia.com/gpu and the GPU Feature Discovery labels
// of product and family.
func (w *NodeWrapper) GPU(num int, product, family string) *NodeWrapper {
	w.Status.Capacity["nvidia.com/gpu"] = *resource.NewQuantity(int64(num), resource.DecimalSI)
	w.Label(imperatorv1alpha1.GPUProductLabel, product)
	w.Label(imperatorv1alpha1.GPUFamilyLabel, family)
	return w
}

// Label sets a label; an empty value is skipped.
func (w *NodeWrapper) Label(key, value string) *NodeWrapper {
	if value != "" {
		w.Labels[key] = value
	}
	return w
}

// Annotation sets an annotation.
func (w *NodeWrapper) Annotation(key, value string) *NodeWrapper {
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[key] = value
	return w
}

// Taint adds a taint.
func (w *NodeWrapper) Taint(key, value string, effect corev1.TaintEffect) *NodeWrapper {
	w.Spec.Taints = append(w.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: effect})
	return w
}

// PodWrapper builds a Pod.
type PodWrapper struct{ corev1.Pod }

// MakePod starts a pod with one container "main" running image "registry.k8s.io/pause:3.10".
func MakePod(namespace, name string) *PodWrapper {
	return &PodWrapper{corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
		},
	}}
}

// Obj returns a copy of the Pod.
func (w *PodWrapper) Obj() *corev1.Pod { return w.DeepCopy() }

// Guest labels the pod as a guest of machineType in group.
func (w *PodWrapper) Guest(group, machineType string) *PodWrapper {
	w.Labels[imperatorv1alpha1.MachineGroupKey] = group
	w.Labels[imperatorv1alpha1.MachineTypeKey] = machineType
	w.Labels[imperatorv1alpha1.PodRoleKey] = string(imperatorv1alpha1.PodRoleGuest)
	return w
}

// InjectedGuest labels the pod as a guest of machineType in group, as Guest
// does, and stamps it with the Pod Resource Injector's record
// (imperatorv1alpha1.InjectedAnnotation) naming that group and type and its
// first container, as the injector leaves a guest it admitted: the Machine
// controller counts only guests carrying it. The record names the Machine
// after the group, as the sample general-machine is named. A pod built
// with Guest alone is one a tenant labelled, which counts as nothing.
func (w *PodWrapper) InjectedGuest(group, machineType string) *PodWrapper {
	w.Guest(group, machineType)
	container := ""
	if len(w.Spec.Containers) > 0 {
		container = w.Spec.Containers[0].Name
	}
	record, _ := json.Marshal(map[string]string{
		"machine": group, "machineGroup": group, "machineType": machineType, "container": container,
	})
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[imperatorv1alpha1.InjectedAnnotation] = string(record)
	return w
}

// Label sets a label; an empty value removes it.
func (w *PodWrapper) Label(key, value string) *PodWrapper {
	w.Labels = setOrDelete(w.Labels, key, value)
	return w
}

// Container appends a container.
func (w *PodWrapper) Container(name, image string) *PodWrapper {
	w.Spec.Containers = append(w.Spec.Containers, corev1.Container{Name: name, Image: image})
	return w
}

// ContainerName renames the pod's first container.
func (w *PodWrapper) ContainerName(name string) *PodWrapper {
	w.Spec.Containers[0].Name = name
	return w
}

// TerminationGracePeriod sets spec.terminationGracePeriodSeconds; 0 lets a
// deleted pod go at once.
func (w *PodWrapper) TerminationGracePeriod(seconds int64) *PodWrapper {
	w.Spec.TerminationGracePeriodSeconds = &seconds
	return w
}

// Request sets a request and limit of the container at index i.
func (w *PodWrapper) Request(i int, name corev1.ResourceName, quantity string) *PodWrapper {
	c := &w.Spec.Containers[i]
	if c.Resources.Requests == nil {
		c.Resources.Requests = corev1.ResourceList{}
	}
	if c.Resources.Limits == nil {
		c.Resources.Limits = corev1.ResourceList{}
	}
	c.Resources.Requests[name] = resource.MustParse(quantity)
	c.Resources.Limits[name] = resource.MustParse(quantity)
	return w
}

// Toleration appends a NoSchedule toleration key=value.
func (w *PodWrapper) Toleration(key, value string) *PodWrapper {
	w.Spec.Tolerations = append(w.Spec.Tolerations, corev1.Toleration{
		Key: key, Operator: corev1.TolerationOpEqual, Value: value, Effect: corev1.TaintEffectNoSchedule,
	})
	return w
}

// NodeName binds the pod to a node directly.
func (w *PodWrapper) NodeName(node string) *PodWrapper {
	w.Spec.NodeName = node
	return w
}

// RequiredNodeAffinity sets the required node affinity terms.
func (w *PodWrapper) RequiredNodeAffinity(terms ...corev1.NodeSelectorTerm) *PodWrapper {
	if w.Spec.Affinity == nil {
		w.Spec.Affinity = &corev1.Affinity{}
	}
	if w.Spec.Affinity.NodeAffinity == nil {
		w.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	w.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: terms}
	return w
}

// SeedNodes are nodes for GeneralMachine, as a cluster would have them:
// michiru with 4 RTX-3090 (room for two compute-xlarge units), utaha and eriri
// DGX-1 machines with 8 GPUs each, labelled by GPU Feature Discovery.
func SeedNodes() []*corev1.Node {
	return []*corev1.Node{
		MakeNode("michiru").Capacity(corev1.ResourceCPU, "96").Capacity(corev1.ResourceMemory, "384Gi").
			GPU(4, "NVIDIA-GeForce-RTX-3090", "ampere").Obj(),
		MakeNode("utaha").Capacity(corev1.ResourceCPU, "64").Capacity(corev1.ResourceMemory, "512Gi").
			GPU(8, "Tesla-V100-SXM2-32GB", "volta").Label(imperatorv1alpha1.GPUMachineLabel, "DGX-1").Obj(),
		MakeNode("eriri").Capacity(corev1.ResourceCPU, "64").Capacity(corev1.ResourceMemory, "512Gi").
			GPU(8, "Tesla-V100-SXM2-32GB", "volta").Label(imperatorv1alpha1.GPUMachineLabel, "DGX-1").Obj(),
	}
}

// CapacityHoldWrapper builds a CapacityHold.
type CapacityHoldWrapper struct{ imperatorv1alpha1.CapacityHold }

// MakeCapacityHold starts a hold of count units of machineType in group,
// valid for an hour from now.
func MakeCapacityHold(name, group, machineType string, count int32) *CapacityHoldWrapper {
	return &CapacityHoldWrapper{imperatorv1alpha1.CapacityHold{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: imperatorv1alpha1.CapacityHoldSpec{MachineGroup: group, MachineType: machineType, Count: count,
			ValidUntil: metav1.NewTime(time.Now().Add(time.Hour))},
	}}
}

// Obj returns a copy of the CapacityHold.
func (w *CapacityHoldWrapper) Obj() *imperatorv1alpha1.CapacityHold { return w.DeepCopy() }

// ValidUntil sets spec.validUntil.
func (w *CapacityHoldWrapper) ValidUntil(t time.Time) *CapacityHoldWrapper {
	w.Spec.ValidUntil = metav1.NewTime(t)
	return w
}

// Namespaces sets spec.namespaces, the only namespaces whose guests may
// claim the hold.
func (w *CapacityHoldWrapper) Namespaces(namespaces ...string) *CapacityHoldWrapper {
	w.Spec.Namespaces = namespaces
	return w
}

// Gang makes the pod a member of gang name of size members (the label
// imperator.tenzen-y.io/gang and the annotation
// imperator.tenzen-y.io/gang-size): the members pass the slot gate together.
func (w *PodWrapper) Gang(name string, size int) *PodWrapper {
	w.Labels[imperatorv1alpha1.GangKey] = name
	return w.Annotation(imperatorv1alpha1.GangSizeAnnotation, strconv.Itoa(size))
}

// Annotation sets an annotation; an empty value removes it.
func (w *PodWrapper) Annotation(key, value string) *PodWrapper {
	w.Annotations = setOrDelete(w.Annotations, key, value)
	return w
}

// setOrDelete sets key to value in m, made when nil; an empty value removes
// key. It returns m.
func setOrDelete(m map[string]string, key, value string) map[string]string {
	if value == "" {
		delete(m, key)
		return m
	}
	if m == nil {
		m = map[string]string{}
	}
	m[key] = value
	return m
}

// ClaimsHold makes the pod ask for hold by name (the label
// imperator.tenzen-y.io/hold) and stamps it with the hold's UID
// (imperatorv1alpha1.HoldUIDAnnotation), as the Pod Resource Injector leaves
// a guest it admitted while the hold existed: the UID, not the name, claims
// the hold, so hold must be the one read back from the API server. A pod
// with the label alone (Label) is one a tenant labelled, which claims
// nothing.
func (w *PodWrapper) ClaimsHold(hold *imperatorv1alpha1.CapacityHold) *PodWrapper {
	w.Labels[imperatorv1alpha1.HoldKey] = hold.Name
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[imperatorv1alpha1.HoldUIDAnnotation] = string(hold.UID)
	return w
}

// NamespaceWrapper builds a Namespace.
type NamespaceWrapper struct{ corev1.Namespace }

// MakeNamespace starts a Namespace without labels.
func MakeNamespace(name string) *NamespaceWrapper {
	return &NamespaceWrapper{corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}}
}

// Obj returns a copy of the Namespace.
func (w *NamespaceWrapper) Obj() *corev1.Namespace { return w.DeepCopy() }

// Label sets a label; an empty value removes it.
func (w *NamespaceWrapper) Label(key, value string) *NamespaceWrapper {
	w.Labels = setOrDelete(w.Labels, key, value)
	return w
}

// InjectionEnabled opts the namespace in
// (imperator.tenzen-y.io/inject-resource=enabled): only there are guests
// injected and counted.
func (w *NamespaceWrapper) InjectionEnabled() *NamespaceWrapper {
	return w.Label(imperatorv1alpha1.InjectResourceKey, imperatorv1alpha1.InjectResourceEnabled)
}
