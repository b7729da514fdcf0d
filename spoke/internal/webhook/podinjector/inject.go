package podinjector

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// Record is what the injector did to a pod. It is stored, as JSON, in the
// pod's imperatorv1alpha1.InjectedAnnotation so that a user can see why the
// pod looks the way it does.
type Record struct {
	// Machine is the name of the Machine whose machine type was injected.
	Machine string `json:"machine"`
	// MachineGroup and MachineType name the injected machine type.
	MachineGroup string `json:"machineGroup"`
	MachineType  string `json:"machineType"`
	// Container is the container that received the requests and limits.
	Container string `json:"container"`
	// Replaced lists the resources the container already set to other values,
	// with the values they had, sorted by resource name.
	Replaced []ReplacedResource `json:"replaced,omitempty"`
}

// ReplacedResource is a resource of the target container whose request or
// limit differed from the machine type and was overwritten.
type ReplacedResource struct {
	// Resource is the resource name, e.g. cpu.
	Resource corev1.ResourceName `json:"resource"`
	// Request and Limit are the values the container set before injection;
	// empty when it did not set them.
	Request string `json:"request,omitempty"`
	Limit   string `json:"limit,omitempty"`
}

// DeniedError is returned by Inject when a pod must not be admitted. Its
// message is shown to the user who created the pod.
type DeniedError struct{ Reason string }

func (e *DeniedError) Error() string { return e.Reason }

func denied(format string, args ...any) *DeniedError {
	return &DeniedError{Reason: fmt.Sprintf(format, args...)}
}

// Inject returns a copy of pod carrying the machine type it asks for, taken
// from machine (the Machine of the pod's machine group, nil when there is
// none), and the record of what was injected. pod is never modified. The
// copy owns what Inject changes (annotations, the required node affinity,
// tolerations, scheduling gates, the containers' requests and limits) and
// shares every other field with pod: deep-copy it before changing those.
//
// Pods without pod-role=guest are not the injector's business: they come back
// unchanged with a nil Record. A guest pod is denied (*DeniedError) when its
// labels are incomplete, its machine group or type is unknown, its injecting
// container does not exist, or its node affinity or nodeSelector contradicts
// the machine type's placement.
//
// The pod is held at the imperatorv1alpha1.SlotSchedulingGate scheduling
// gate: the scheduler leaves it alone until the agent's Machine controller
// grants it a unit of its machine type, in arrival order, and removes the
// gate. A guest therefore never runs beyond the type's available units and
// is never tried by the scheduler before its slot is free.
//
// The target container gets requests = limits = the machine type's cpu,
// memory and GPUs, merged into what it already sets. The pod tolerates the
// machine type's and the node pool's NoSchedule taints, and every required
// node selector term is narrowed (ANDed) to the machine type's ready nodes.
// Inject is idempotent: Inject(Inject(pod)) equals Inject(pod).
func Inject(pod *corev1.Pod, machine *imperatorv1alpha1.Machine) (*corev1.Pod, *Record, error) {
	return inject(pod, machine, nil)
}

// inject is Inject taking the machine type's contract from contracts, which
// may be nil. With a cache, the node selector requirements added to the
// returned pod share their Values with the cached contract, which every
// admission of the type reads: the handler only encodes the returned pod
// into its patch, and nothing may modify it. (Inject passes no cache: its
// caller owns every value it gets.)
func inject(pod *corev1.Pod, machine *imperatorv1alpha1.Machine, contracts *contractCache) (*corev1.Pod, *Record, error) {
	if pod == nil {
		return nil, nil, denied("no pod in the request")
	}
	if pod.Labels[imperatorv1alpha1.PodRoleKey] != string(imperatorv1alpha1.PodRoleGuest) {
		return pod.DeepCopy(), nil, nil
	}

	group := pod.Labels[imperatorv1alpha1.MachineGroupKey]
	typeName := pod.Labels[imperatorv1alpha1.MachineTypeKey]
	var missing []string
	if group == "" {
		missing = append(missing, imperatorv1alpha1.MachineGroupKey)
	}
	if typeName == "" {
		missing = append(missing, imperatorv1alpha1.MachineTypeKey)
	}
	if len(missing) > 0 {
		return nil, nil, denied("incomplete guest pod labels: a pod labelled %s=%s must also set %s",
			imperatorv1alpha1.PodRoleKey, imperatorv1alpha1.PodRoleGuest, strings.Join(missing, " and "))
	}

	if machine == nil {
		return nil, nil, denied("unknown machine group %q (label %s): no Machine is labelled %s=%s",
			group, imperatorv1alpha1.MachineGroupKey, imperatorv1alpha1.MachineGroupKey, group)
	}
	machineType := machine.MachineType(typeName)
	if machineType == nil {
		return nil, nil, denied("unknown machine type %q (label %s) in machine group %q: Machine %s offers %s",
			typeName, imperatorv1alpha1.MachineTypeKey, group, machine.Name, machineTypeNames(machine))
	}

	if pod.Spec.NodeName != "" {
		return nil, nil, denied("spec.nodeName %q: a guest does not name its node; it waits for a unit of machine type %q "+
			"at the scheduling gate %s and the scheduler places it on a node of the pool", pod.Spec.NodeName, typeName,
			imperatorv1alpha1.SlotSchedulingGate)
	}

	out := injectionCopy(pod)
	target, err := targetContainer(out)
	if err != nil {
		return nil, nil, err
	}
	container := &out.Spec.Containers[target]

	contract := contracts.of(machine, group, machineType)
	if err := checkNodeSelector(out.Spec.NodeSelector, typeName, contract.placement); err != nil {
		return nil, nil, err
	}
	if err := injectNodeAffinity(out, typeName, contract.placement); err != nil {
		return nil, nil, err
	}
	injectTolerations(out, contract.tolerations)
	injectSlotGate(out)
	replaced := injectResources(container, contract)
	if err := checkOneUnit(out, target, typeName, contract); err != nil {
		return nil, nil, err
	}

	record := &Record{
		Machine:      machine.Name,
		MachineGroup: group,
		MachineType:  typeName,
		Container:    container.Name,
		Replaced:     mergeReplaced(previousReplaced(pod, machine.Name, group, typeName, container.Name), replaced),
	}
	encoded, err := json.Marshal(record)
	if err != nil {
		// A Record holds only strings; this cannot fail, but never panic on it.
		return nil, nil, fmt.Errorf("encoding annotation %s: %w", imperatorv1alpha1.InjectedAnnotation, err)
	}
	out.Annotations[imperatorv1alpha1.InjectedAnnotation] = string(encoded)
	return out, record, nil
}

// injectionCopy returns a shallow copy of pod that owns what Inject changes
// and shares the rest: its own annotations (room for the two the injector
// sets), containers and target requests and limits (injectResources clones
// those maps), and tolerations and scheduling gates clipped to their length,
// so that appending to them never writes into pod's arrays.
// injectNodeAffinity copies the affinity on the path it changes. Copying
// only that, rather than the whole pod, keeps an admission's allocations
// to what it changes (BenchmarkHandle reports them).
func injectionCopy(pod *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{TypeMeta: pod.TypeMeta, ObjectMeta: pod.ObjectMeta, Spec: pod.Spec, Status: pod.Status}
	out.Annotations = make(map[string]string, len(pod.Annotations)+2)
	maps.Copy(out.Annotations, pod.Annotations)
	out.Spec.Containers = slices.Clone(pod.Spec.Containers)
	out.Spec.Tolerations = slices.Clip(pod.Spec.Tolerations)
	out.Spec.SchedulingGates = slices.Clip(pod.Spec.SchedulingGates)
	return out
}

func machineTypeNames(machine *imperatorv1alpha1.Machine) string {
	if len(machine.Spec.MachineTypes) == 0 {
		return "no machine types"
	}
	names := make([]string, 0, len(machine.Spec.MachineTypes))
	for _, t := range machine.Spec.MachineTypes {
		names = append(names, strconv.Quote(t.Name))
	}
	return strings.Join(names, ", ")
}

// targetContainer returns the index of the container named by the
// injecting-container label, or 0 (the first container) when the label is
// absent or empty. Init and ephemeral containers are never targets.
func targetContainer(pod *corev1.Pod) (int, error) {
	name := pod.Labels[imperatorv1alpha1.InjectingContainerKey]
	if name == "" {
		if len(pod.Spec.Containers) == 0 {
			return 0, denied("pod has no containers to inject the machine type into")
		}
		return 0, nil
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return i, nil
		}
	}
	names := make([]string, 0, len(pod.Spec.Containers))
	for _, c := range pod.Spec.Containers {
		names = append(names, strconv.Quote(c.Name))
	}
	return 0, denied("unknown injecting container %q (label %s): the pod's containers are [%s]",
		name, imperatorv1alpha1.InjectingContainerKey, strings.Join(names, ", "))
}

// checkNodeSelector denies a pod whose spec.nodeSelector pins one of our keys
// to another value: such a pod could never be scheduled.
func checkNodeSelector(selector map[string]string, typeName string, reqs []corev1.NodeSelectorRequirement) error {
	for _, req := range reqs {
		if value, ok := selector[req.Key]; ok && value != req.Values[0] {
			return denied("spec.nodeSelector[%s]=%q contradicts machine type %q, which requires %s=%s",
				req.Key, value, typeName, req.Key, req.Values[0])
		}
	}
	return nil
}

// injectNodeAffinity ANDs reqs into every required node selector term of the
// pod, or makes them the single term when the pod has none. Preferred terms
// are left alone. An existing expression on one of our keys is kept when a
// node satisfying ours also satisfies it; otherwise the pod is denied.
//
// The pod's affinity is shared with Inject's input (injectionCopy): it is
// replaced by a copy of the path to the required terms, each term's
// expressions clipped so that appending never writes into the input's array.
// The expressions added share their Values with reqs, which nothing modifies.
func injectNodeAffinity(pod *corev1.Pod, typeName string, reqs []corev1.NodeSelectorRequirement) error {
	affinity := &corev1.Affinity{}
	if pod.Spec.Affinity != nil {
		*affinity = *pod.Spec.Affinity
	}
	nodeAffinity := &corev1.NodeAffinity{}
	if affinity.NodeAffinity != nil {
		*nodeAffinity = *affinity.NodeAffinity
	}
	required := &corev1.NodeSelector{}
	if nodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		*required = *nodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	required.NodeSelectorTerms = slices.Clone(required.NodeSelectorTerms)
	if len(required.NodeSelectorTerms) == 0 {
		required.NodeSelectorTerms = []corev1.NodeSelectorTerm{{}}
	}
	nodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = required
	affinity.NodeAffinity = nodeAffinity
	pod.Spec.Affinity = affinity
	for i := range required.NodeSelectorTerms {
		term := &required.NodeSelectorTerms[i]
		term.MatchExpressions = slices.Grow(slices.Clip(term.MatchExpressions), len(reqs))
		for _, req := range reqs {
			present := false
			for _, existing := range term.MatchExpressions {
				if existing.Key != req.Key {
					continue
				}
				if !satisfiedBy(existing, req.Values[0]) {
					return denied("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[%d]: "+
						"expression on %s (%s) contradicts machine type %q, which requires %s=%s",
						i, req.Key, describeRequirement(existing), typeName, req.Key, req.Values[0])
				}
				present = present || isRequirement(existing, req)
			}
			if !present {
				term.MatchExpressions = append(term.MatchExpressions, req)
			}
		}
	}
	return nil
}

// satisfiedBy reports whether a node labelled req.Key=value satisfies req.
func satisfiedBy(req corev1.NodeSelectorRequirement, value string) bool {
	switch req.Operator {
	case corev1.NodeSelectorOpIn:
		return slices.Contains(req.Values, value)
	case corev1.NodeSelectorOpNotIn:
		return !slices.Contains(req.Values, value)
	case corev1.NodeSelectorOpExists:
		return true
	case corev1.NodeSelectorOpDoesNotExist:
		return false
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if len(req.Values) != 1 {
			return false
		}
		bound, err := strconv.ParseInt(req.Values[0], 10, 64)
		if err != nil {
			return false
		}
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return false
		}
		if req.Operator == corev1.NodeSelectorOpGt {
			return n > bound
		}
		return n < bound
	default:
		return false
	}
}

func isRequirement(a, b corev1.NodeSelectorRequirement) bool {
	return a.Key == b.Key && a.Operator == b.Operator && slices.Equal(a.Values, b.Values)
}

func describeRequirement(req corev1.NodeSelectorRequirement) string {
	if len(req.Values) == 0 {
		return string(req.Operator)
	}
	return fmt.Sprintf("%s [%s]", req.Operator, strings.Join(req.Values, ", "))
}

// injectTolerations adds the NoSchedule tolerations of the machine type's and
// the node pool's taints unless the pod already has them.
func injectTolerations(pod *corev1.Pod, tolerations []corev1.Toleration) {
	pod.Spec.Tolerations = slices.Grow(pod.Spec.Tolerations, len(tolerations))
	for _, want := range tolerations {
		if !slices.ContainsFunc(pod.Spec.Tolerations, func(t corev1.Toleration) bool { return sameToleration(t, want) }) {
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, want)
		}
	}
}

// injectSlotGate adds the slot scheduling gate unless the pod has it.
func injectSlotGate(pod *corev1.Pod) {
	if !slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool {
		return g.Name == imperatorv1alpha1.SlotSchedulingGate
	}) {
		pod.Spec.SchedulingGates = append(pod.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: imperatorv1alpha1.SlotSchedulingGate})
	}
}

// sameToleration compares tolerations as the API does: an empty operator
// means Equal. TolerationSeconds only matters for NoExecute, which ours are not.
func sameToleration(a, b corev1.Toleration) bool {
	op := func(o corev1.TolerationOperator) corev1.TolerationOperator {
		if o == "" {
			return corev1.TolerationOpEqual
		}
		return o
	}
	return a.Key == b.Key && op(a.Operator) == op(b.Operator) && a.Value == b.Value && a.Effect == b.Effect
}

// injectResources sets requests = limits = the machine type's cpu, memory
// and GPUs on the container, keeping every other resource it sets, and
// returns the resources whose request or limit held another value.
func injectResources(container *corev1.Container, contract *typeContract) []ReplacedResource {
	want := contract.resources
	// The lists are shared with Inject's input (injectionCopy).
	container.Resources.Requests = cloneResources(container.Resources.Requests, len(want))
	container.Resources.Limits = cloneResources(container.Resources.Limits, len(want))
	var replaced []ReplacedResource
	for _, name := range contract.resourceNames {
		quantity := want[name]
		request, hasRequest := container.Resources.Requests[name]
		limit, hasLimit := container.Resources.Limits[name]
		requestDiffers := hasRequest && request.Cmp(quantity) != 0
		limitDiffers := hasLimit && limit.Cmp(quantity) != 0
		if requestDiffers || limitDiffers {
			r := ReplacedResource{Resource: name}
			if hasRequest {
				r.Request = request.String()
			}
			if hasLimit {
				r.Limit = limit.String()
			}
			replaced = append(replaced, r)
		}
		// Keep the user's spelling of an equal quantity: nothing to patch.
		if !hasRequest || requestDiffers {
			container.Resources.Requests[name] = quantity.DeepCopy()
		}
		if !hasLimit || limitDiffers {
			container.Resources.Limits[name] = quantity.DeepCopy()
		}
	}
	return replaced
}

// cloneResources returns a copy of list with room for extra more names.
func cloneResources(list corev1.ResourceList, extra int) corev1.ResourceList {
	out := make(corev1.ResourceList, len(list)+extra)
	maps.Copy(out, list)
	return out
}

// previousReplaced returns the replacements recorded by an earlier injection
// of the same machine type into the same container, so that re-injecting an
// injected pod keeps the user's original values on record. A record for
// anything else, or one that does not parse, is ignored and overwritten.
func previousReplaced(pod *corev1.Pod, machine, group, typeName, container string) []ReplacedResource {
	raw, ok := pod.Annotations[imperatorv1alpha1.InjectedAnnotation]
	if !ok {
		return nil
	}
	var previous Record
	if err := json.Unmarshal([]byte(raw), &previous); err != nil {
		return nil
	}
	if previous.Machine != machine || previous.MachineGroup != group ||
		previous.MachineType != typeName || previous.Container != container {
		return nil
	}
	return previous.Replaced
}

// mergeReplaced keeps the earliest record of each resource, sorted by name.
func mergeReplaced(previous, current []ReplacedResource) []ReplacedResource {
	byName := make(map[corev1.ResourceName]ReplacedResource, len(previous)+len(current))
	for _, r := range current {
		byName[r.Resource] = r
	}
	for _, r := range previous {
		byName[r.Resource] = r
	}
	if len(byName) == 0 {
		return nil
	}
	merged := make([]ReplacedResource, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		merged = append(merged, byName[name])
	}
	return merged
}
