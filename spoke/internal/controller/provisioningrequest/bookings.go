package provisioningrequest

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/machinetype"
)

// Reasons of a request's Failed condition that the mapping gives.
const (
	// ReasonPodSetNotMapped: a pod set names no machine type (no group or
	// type label, or its template is missing).
	ReasonPodSetNotMapped = "PodSetNotMapped"
	// ReasonMachineTypeNotFound: no Machine of the group offers the type.
	ReasonMachineTypeNotFound = imperatorv1alpha1.HoldReasonMachineTypeNotFound
	// ReasonResourcesNotStated: the template does not ask for exactly the
	// type's resources, so Kueue's quota would not count them.
	ReasonResourcesNotStated = "ResourcesNotStated"
	// ReasonTooManyUnits: the pod sets of one machine type add up to more
	// units than one CapacityHold can hold (MaxUnits).
	ReasonTooManyUnits = "TooManyUnits"
	// ReasonHoldNameTaken: a CapacityHold not made for the request has the
	// name of the request's hold (HoldName).
	ReasonHoldNameTaken = "HoldNameTaken"
)

// MaxUnits is the most units one CapacityHold holds (the maximum of its
// spec.count): a request booking more of one type is refused instead of
// failing to create its hold on every retry.
const MaxUnits = 10000

// Booking is the units of one machine type a request books: one
// CapacityHold.
type Booking struct {
	MachineGroup string
	MachineType  string
	Count        int32
}

// Refusal says why a request cannot be served; Reason is a condition reason.
type Refusal struct {
	Reason  string
	Message string
}

func (r *Refusal) Error() string { return r.Reason + ": " + r.Message }

// Bookings maps the pod sets of a request to machine types, one Booking per
// type, in the order the pod sets first name them. templates are the
// request namespace's PodTemplates by name; machines are the Machines the
// types are looked up in. It refuses the request when a pod set's template
// is missing, names no group and type (byShape says which labels to add),
// names a type no Machine of the group offers, or does not state the type's resources on its target container,
// and when the pod sets of one type add up to more than MaxUnits.
func Bookings(podSets []PodSet, templates map[string]*corev1.PodTemplate, machines []imperatorv1alpha1.Machine) ([]Booking, *Refusal) {
	if len(podSets) == 0 {
		return nil, &Refusal{Reason: ReasonPodSetNotMapped, Message: "spec.podSets is empty: nothing to hold"}
	}
	var bookings []Booking
	for i, ps := range podSets {
		path := fmt.Sprintf("spec.podSets[%d]", i)
		if ps.Count < 1 {
			return nil, &Refusal{Reason: ReasonPodSetNotMapped, Message: fmt.Sprintf("%s.count is %d: it must be at least 1", path, ps.Count)}
		}
		template, ok := templates[ps.PodTemplateRef.Name]
		if !ok {
			return nil, &Refusal{Reason: ReasonPodSetNotMapped,
				Message: fmt.Sprintf("%s.podTemplateRef: PodTemplate %q does not exist", path, ps.PodTemplateRef.Name)}
		}
		group, typeName := template.Template.Labels[imperatorv1alpha1.MachineGroupKey], template.Template.Labels[imperatorv1alpha1.MachineTypeKey]
		if group == "" || typeName == "" {
			return nil, byShape(path, template, machines)
		}
		spec, found := findType(machines, group, typeName)
		if !found {
			return nil, &Refusal{Reason: ReasonMachineTypeNotFound, Message: fmt.Sprintf(
				"%s: no Machine of machine group %s offers machine type %s", path, group, typeName)}
		}
		if refusal := statesResources(path, &template.Template.Spec, template.Template.Labels, typeName, spec); refusal != nil {
			return nil, refusal
		}
		at := slices.IndexFunc(bookings, func(b Booking) bool { return b.MachineGroup == group && b.MachineType == typeName })
		if at < 0 {
			bookings = append(bookings, Booking{MachineGroup: group, MachineType: typeName})
			at = len(bookings) - 1
		}
		// In int64: int32 counts of many pod sets could wrap round.
		if total := int64(bookings[at].Count) + int64(ps.Count); total > MaxUnits {
			return nil, &Refusal{Reason: ReasonTooManyUnits, Message: fmt.Sprintf(
				"%s: the pod sets of machine type %s of machine group %s add up to %d units, more than a CapacityHold's %d",
				path, typeName, group, total, MaxUnits)}
		}
		bookings[at].Count += ps.Count
	}
	return bookings, nil
}

// findType returns the spec of machine type typeName offered by a Machine
// of group.
func findType(machines []imperatorv1alpha1.Machine, group, typeName string) (imperatorv1alpha1.MachineTypeSpec, bool) {
	for _, m := range machines {
		if m.Labels[imperatorv1alpha1.MachineGroupKey] != group {
			continue
		}
		for _, t := range m.Spec.MachineTypes {
			if t.Name == typeName {
				return t.Spec, true
			}
		}
	}
	return imperatorv1alpha1.MachineTypeSpec{}, false
}

// typeRef is a machine type of a machine group.
type typeRef struct{ group, typeName string }

func (t typeRef) String() string { return t.typeName + " of machine group " + t.group }

// byShape refuses a pod set whose template lacks the group or type label,
// naming what to add. It matches the template by shape, as FindCapacity
// matches shapes: the machine types of the spoke's Machines (of the group
// or type the template names, if it names one) whose unit the target
// container asks for exactly. It never books by shape: the pod injector
// injects and stamps with a hold's UID only pods labelled
// pod-role=guest with their group and type (and denies a guest without
// them), so units held for pods without those labels would be held for
// nobody while the pods ran elsewhere.
func byShape(path string, template *corev1.PodTemplate, machines []imperatorv1alpha1.Machine) *Refusal {
	labels := template.Template.Labels
	missing := fmt.Sprintf("%s: PodTemplate %q has no %s and %s labels, which its pods need to use held units (the pod injector gives a unit, and a hold, only to guests)",
		path, template.Name, imperatorv1alpha1.MachineGroupKey, imperatorv1alpha1.MachineTypeKey)
	target, refusal := targetContainer(path, &template.Template.Spec, labels)
	if refusal != nil {
		return refusal
	}
	var matches, offered []typeRef
	for _, m := range machines {
		group := m.Labels[imperatorv1alpha1.MachineGroupKey]
		if group == "" || (labels[imperatorv1alpha1.MachineGroupKey] != "" && labels[imperatorv1alpha1.MachineGroupKey] != group) {
			continue
		}
		for _, t := range m.Spec.MachineTypes {
			if name := labels[imperatorv1alpha1.MachineTypeKey]; name != "" && name != t.Name {
				continue
			}
			ref := typeRef{group: group, typeName: t.Name}
			if slices.Contains(offered, ref) {
				continue
			}
			offered = append(offered, ref)
			if asksExactly(target, machinetype.Resources(t.Spec)) {
				matches = append(matches, ref)
			}
		}
	}
	names := func(refs []typeRef) string {
		out := make([]string, len(refs))
		for i, r := range refs {
			out[i] = r.String()
		}
		slices.Sort(out)
		return strings.Join(out, ", ")
	}
	switch {
	case len(matches) == 1:
		return &Refusal{Reason: ReasonPodSetNotMapped, Message: fmt.Sprintf(
			"%s; container %q asks for exactly one unit of machine type %s: add the labels %s=%s, %s=%s and %s=%s to the Job's pod template",
			missing, target.Name, matches[0], imperatorv1alpha1.MachineGroupKey, matches[0].group, imperatorv1alpha1.MachineTypeKey, matches[0].typeName,
			imperatorv1alpha1.PodRoleKey, imperatorv1alpha1.PodRoleGuest)}
	case len(matches) > 1:
		return &Refusal{Reason: ReasonPodSetNotMapped, Message: fmt.Sprintf(
			"%s; container %q asks for exactly one unit of each of %s: label the Job's pod template with the machine group and type to use, and %s=%s",
			missing, target.Name, names(matches), imperatorv1alpha1.PodRoleKey, imperatorv1alpha1.PodRoleGuest)}
	case len(offered) == 0:
		return &Refusal{Reason: ReasonPodSetNotMapped, Message: fmt.Sprintf(
			"%s; no Machine of this cluster offers a machine type it could name: label the Job's pod template with the machine group and type it runs on",
			missing)}
	}
	return &Refusal{Reason: ReasonPodSetNotMapped, Message: fmt.Sprintf(
		"%s; container %q asks for no machine type's unit exactly (offered: %s): label the Job's pod template with the machine group and type it runs on, and %s=%s",
		missing, target.Name, names(offered), imperatorv1alpha1.PodRoleKey, imperatorv1alpha1.PodRoleGuest)}
}

// asksExactly tells whether container states exactly the resources of
// unit: the same names (requests, or limits alone), the same quantities.
func asksExactly(container *corev1.Container, unit corev1.ResourceList) bool {
	stated := corev1.ResourceList{}
	for name, q := range container.Resources.Limits {
		stated[name] = q
	}
	for name, q := range container.Resources.Requests {
		stated[name] = q
	}
	if len(stated) != len(unit) {
		return false
	}
	for name, want := range unit {
		if got, ok := stated[name]; !ok || got.Cmp(want) != 0 {
			return false
		}
	}
	return true
}

// targetContainer is the container of a pod set's template that receives
// the unit: the one imperator.tenzen-y.io/injecting-container names, else
// the first.
func targetContainer(path string, spec *corev1.PodSpec, labels map[string]string) (*corev1.Container, *Refusal) {
	if len(spec.Containers) == 0 {
		return nil, &Refusal{Reason: ReasonPodSetNotMapped, Message: path + ": the pod template has no containers"}
	}
	if name := labels[imperatorv1alpha1.InjectingContainerKey]; name != "" {
		at := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == name })
		if at < 0 {
			return nil, &Refusal{Reason: ReasonPodSetNotMapped, Message: fmt.Sprintf("%s: label %s names container %q, which the template does not have",
				path, imperatorv1alpha1.InjectingContainerKey, name)}
		}
		return &spec.Containers[at], nil
	}
	return &spec.Containers[0], nil
}

// statesResources checks that the target container of a pod set's template
// (the one imperator.tenzen-y.io/injecting-container names, else the first)
// asks for exactly one unit of the type: Kueue counts quota from these
// requests, and the injector would make them so anyway.
func statesResources(path string, spec *corev1.PodSpec, labels map[string]string, typeName string, typeSpec imperatorv1alpha1.MachineTypeSpec) *Refusal {
	target, refusal := targetContainer(path, spec, labels)
	if refusal != nil {
		return refusal
	}
	want := machinetype.Resources(typeSpec)
	var wrong []string
	for _, name := range slices.Sorted(func(yield func(corev1.ResourceName) bool) {
		for n := range want {
			if !yield(n) {
				return
			}
		}
	}) {
		got, ok := target.Resources.Requests[name]
		if !ok {
			got, ok = target.Resources.Limits[name]
		}
		if w := want[name]; !ok || got.Cmp(w) != 0 {
			stated := "nothing"
			if ok {
				stated = got.String()
			}
			wrong = append(wrong, fmt.Sprintf("%s %s (asks %s)", name, w.String(), stated))
		}
	}
	if len(wrong) > 0 {
		return &Refusal{Reason: ReasonResourcesNotStated, Message: fmt.Sprintf(
			"%s: container %q must request one unit of machine type %s, so that Kueue's quota counts it: %s",
			path, target.Name, typeName, strings.Join(wrong, ", "))}
	}
	return nil
}
