package fleet

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// SpokeSpec describes a spoke cluster of the fleet: its name (also its name
// at the hub) and the simulated nodes it starts with.
type SpokeSpec struct {
	Name  string
	Nodes []*corev1.Node
}

// DefaultSpokes are the two spokes of `make up`: spoke-a with the sample's
// RTX-3090/DGX-1 nodes (michiru, utaha, eriri) and spoke-b with two H100
// (hopper) nodes.
func DefaultSpokes() []SpokeSpec {
	return []SpokeSpec{
		{Name: "spoke-a", Nodes: wrappers.SeedNodes()},
		{Name: "spoke-b", Nodes: []*corev1.Node{h100Node("kasumi"), h100Node("megumi")}},
	}
}

// NumberedSpokes are DefaultSpokes followed by spoke-03, spoke-04, … up to n
// spokes in all, each with one H100 node: a fleet of many clusters (the
// fault suite's hub crash under a burst from ten spokes).
func NumberedSpokes(n int) []SpokeSpec {
	spokes := DefaultSpokes()
	for i := len(spokes) + 1; i <= n; i++ {
		name := fmt.Sprintf("spoke-%02d", i)
		spokes = append(spokes, SpokeSpec{Name: name, Nodes: []*corev1.Node{h100Node(name + "-gpu")}})
	}
	return spokes
}

func h100Node(name string) *corev1.Node {
	return wrappers.MakeNode(name).
		Capacity(corev1.ResourceCPU, "192").Capacity(corev1.ResourceMemory, "2Ti").
		GPU(8, "NVIDIA-H100-80GB-HBM3", "hopper").
		Label("nvidia.com/gpu.machine", "DGX-H100").Obj()
}
