package controller

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// gpuResource is the resource a unit's GPUs are requested as.
const gpuResource corev1.ResourceName = "nvidia.com/gpu"

// maxUnits is FindCapacity's largest count.
const maxUnits = 100000

// Demand is a number of units of one machine type, or of one resource shape,
// that must all be in the same cluster.
type Demand struct {
	// Group and Type name a machine type; Type is empty for a shape.
	Group, Type string
	// Shape is what one unit offers at least, when Type is empty.
	Shape *queryv1.ResourceShape
	// Count is the number of units.
	Count int32
}

// String says the demand as people read it: "4 units of h100/compute-xlarge".
func (d Demand) String() string {
	units := "units"
	if d.Count == 1 {
		units = "unit"
	}
	if d.Type != "" {
		name := d.Type
		if d.Group != "" {
			name = d.Group + "/" + d.Type
		}
		return fmt.Sprintf("%d %s of %s", d.Count, units, name)
	}
	return fmt.Sprintf("%d %s of shape {cpu %s, memory %s, gpus %d}", d.Count, units,
		orAny(d.Shape.GetCpu()), orAny(d.Shape.GetMemory()), d.Shape.GetGpuCount())
}

func orAny(s string) string {
	if s == "" {
		return "any"
	}
	return s
}

// Request is the FindCapacity request of the demand: all its units in one cluster.
func (d Demand) Request() *queryv1.FindCapacityRequest {
	req := &queryv1.FindCapacityRequest{Count: d.Count, Mode: queryv1.CapacityMode_CAPACITY_MODE_SAME_CLUSTER}
	if d.Type != "" {
		req.Target = &queryv1.FindCapacityRequest_MachineType{MachineType: &queryv1.MachineTypeRef{Group: d.Group, Type: d.Type}}
	} else {
		req.Target = &queryv1.FindCapacityRequest_Shape{Shape: d.Shape}
	}
	return req
}

// key identifies the demand's target, for merging pod sets of the same one.
func (d Demand) key() string {
	if d.Type != "" {
		return "type/" + d.Group + "/" + d.Type
	}
	return fmt.Sprintf("shape/%s/%s/%d", d.Shape.GetCpu(), d.Shape.GetMemory(), d.Shape.GetGpuCount())
}

// PodSet is what the dispatcher reads of a Workload's pod set.
type PodSet struct {
	Name     string                 `json:"name"`
	Count    int32                  `json:"count"`
	Template corev1.PodTemplateSpec `json:"template"`
}

// Demands derives the units a workload needs from its pod sets: per pod set,
// count × the machine type its template's labels name, or, without a
// machine-type label, count × the shape of one pod's requests. Pod sets of
// the same target are added up (they must fit in the same cluster). A pod
// set that names a group without a type, or states neither a type nor any
// cpu, memory or GPU request, is an error naming its field.
func Demands(podSets []PodSet) ([]Demand, error) {
	path := field.NewPath("spec", "podSets")
	if len(podSets) == 0 {
		return nil, field.Required(path, "the Workload has no pod sets")
	}
	var errs field.ErrorList
	byKey := map[string]*Demand{}
	var order []string
	for i, ps := range podSets {
		p := path.Index(i)
		if ps.Count < 1 {
			// Pods of a pod set of count 0 need nothing.
			continue
		}
		d, err := podSetDemand(p, ps)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev, ok := byKey[d.key()]; ok {
			if int64(prev.Count)+int64(d.Count) > maxUnits {
				errs = append(errs, field.Invalid(p.Child("count"), ps.Count, fmt.Sprintf("the workload asks more than %d units of one kind", maxUnits)))
				continue
			}
			prev.Count += d.Count
			continue
		}
		if d.Count > maxUnits {
			errs = append(errs, field.Invalid(p.Child("count"), ps.Count, fmt.Sprintf("more than %d units", maxUnits)))
			continue
		}
		byKey[d.key()] = &d
		order = append(order, d.key())
	}
	if err := errs.ToAggregate(); err != nil {
		return nil, err
	}
	if len(order) == 0 {
		return nil, field.Invalid(path, len(podSets), "every pod set has count 0")
	}
	out := make([]Demand, 0, len(order))
	for _, k := range order {
		out = append(out, *byKey[k])
	}
	// The largest demand first: its ranking orders the nomination.
	slices.SortStableFunc(out, func(a, b Demand) int { return int(b.Count) - int(a.Count) })
	return out, nil
}

func podSetDemand(p *field.Path, ps PodSet) (Demand, *field.Error) {
	labels := ps.Template.Labels
	group, typ := labels[imperatorv1alpha1.MachineGroupKey], labels[imperatorv1alpha1.MachineTypeKey]
	labelsPath := p.Child("template", "metadata", "labels")
	switch {
	case typ != "":
		return Demand{Group: group, Type: typ, Count: ps.Count}, nil
	case group != "":
		return Demand{}, field.Required(labelsPath.Key(imperatorv1alpha1.MachineTypeKey),
			fmt.Sprintf("pod set %q names machine group %q but no machine type", ps.Name, group))
	}
	shape, err := podShape(ps.Template.Spec)
	if err != nil {
		return Demand{}, field.Invalid(p.Child("template", "spec"), ps.Name, err.Error())
	}
	return Demand{Shape: shape, Count: ps.Count}, nil
}

// podShape is what one pod of spec requests, as Kubernetes counts it: the
// sum of its containers, or its largest init container when that is larger.
func podShape(spec corev1.PodSpec) (*queryv1.ResourceShape, error) {
	sum := corev1.ResourceList{}
	for _, c := range spec.Containers {
		for name, q := range requests(c) {
			v := sum[name]
			v.Add(q)
			sum[name] = v
		}
	}
	for _, c := range spec.InitContainers {
		for name, q := range requests(c) {
			if v, ok := sum[name]; !ok || q.Cmp(v) > 0 {
				sum[name] = q
			}
		}
	}
	cpu, hasCPU := sum[corev1.ResourceCPU]
	mem, hasMem := sum[corev1.ResourceMemory]
	gpu, hasGPU := sum[gpuResource]
	if !hasCPU && !hasMem && (!hasGPU || gpu.IsZero()) {
		return nil, errors.New("the pod template has no " + imperatorv1alpha1.MachineTypeKey +
			" label and requests no cpu, memory or " + string(gpuResource) + ": no unit to look for")
	}
	shape := &queryv1.ResourceShape{}
	if hasCPU {
		shape.Cpu = cpu.String()
	}
	if hasMem {
		shape.Memory = mem.String()
	}
	if hasGPU {
		n, ok := gpu.AsInt64()
		if !ok || n < 0 || n > 1<<20 {
			return nil, fmt.Errorf("%s request %s is not a whole number of GPUs", gpuResource, gpu.String())
		}
		shape.GpuCount = int32(n)
	}
	return shape, nil
}

// requests are a container's requests, its limits where it states no request
// (as the API server defaults them).
func requests(c corev1.Container) corev1.ResourceList {
	out := corev1.ResourceList{}
	for name, q := range c.Resources.Limits {
		out[name] = q
	}
	for name, q := range c.Resources.Requests {
		out[name] = q
	}
	return out
}

// describe joins demands for a message.
func describe(demands []Demand) string {
	parts := make([]string, len(demands))
	for i, d := range demands {
		parts[i] = d.String()
	}
	return strings.Join(parts, " and ")
}
