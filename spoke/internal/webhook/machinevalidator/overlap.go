package machinevalidator

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// The validator reads nodes from the agent's cache to match selectors.
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch

// maxOverlapsPerEntry bounds how many overlapping nodes one selector entry
// reports: a selector taking a whole rack of another Machine's nodes says so
// in a readable answer.
const maxOverlapsPerEntry = 10

// selectedBefore reports whether oldMachine has a selector entry equal to
// selector: the update does not add it.
func selectedBefore(oldMachine *imperatorv1alpha1.Machine, selector *metav1.LabelSelector) bool {
	if oldMachine == nil {
		return false
	}
	for _, entry := range oldMachine.Spec.NodePool {
		if entry.NodeSelector != nil && equality.Semantic.DeepEqual(entry.NodeSelector, selector) {
			return true
		}
	}
	return false
}

// selectingEntry is the index of the first selector entry of machine that
// matches node, or -1.
func selectingEntry(machine *imperatorv1alpha1.Machine, node *corev1.Node) int {
	for i, entry := range machine.Spec.NodePool {
		if entry.NodeSelector == nil {
			continue
		}
		selector, err := metav1.LabelSelectorAsSelector(entry.NodeSelector)
		if err != nil || selector.Empty() {
			continue
		}
		if selector.Matches(labels.Set(node.Labels)) {
			return i
		}
	}
	return -1
}

// selectingMachines are the Machines other than machine with a selector entry.
func (v *Validator) selectingMachines(ctx context.Context, machine *imperatorv1alpha1.Machine) ([]imperatorv1alpha1.Machine, error) {
	list := &imperatorv1alpha1.MachineList{}
	if err := v.Reader.List(ctx, list, client.MatchingFields{MachineSelectorKey: MachineSelects}); err != nil {
		return nil, fmt.Errorf("listing the Machines with a node selector: %w", err)
	}
	out := make([]imperatorv1alpha1.Machine, 0, len(list.Items))
	for _, other := range list.Items {
		if other.Name != machine.Name {
			out = append(out, other)
		}
	}
	return out, nil
}

// validateNameSelected refuses naming node when it exists and another
// Machine's selector matches it. A node that does not exist yet is allowed:
// should it appear with such labels, the name wins and the node-pool
// controller reports the other Machine's claim as a Conflict.
func (v *Validator) validateNameSelected(ctx context.Context, machine *imperatorv1alpha1.Machine, path *field.Path, name string) (*field.Error, error) {
	others, err := v.selectingMachines(ctx, machine)
	if err != nil || len(others) == 0 {
		return nil, err
	}
	node := &corev1.Node{}
	if err := v.Reader.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting node %s: %w", name, err)
	}
	for i := range others {
		if j := selectingEntry(&others[i], node); j >= 0 {
			return field.Invalid(path, name, fmt.Sprintf(
				"node %s is already in Machine %s (machine group %q) through its spec.nodePool[%d].nodeSelector; a node belongs to one Machine",
				name, others[i].Name, others[i].Labels[imperatorv1alpha1.MachineGroupKey], j)), nil
		}
	}
	return nil, nil
}

// validateSelectorOverlap refuses a selector that matches an existing node
// another Machine names or selects, naming the node and that Machine.
func (v *Validator) validateSelectorOverlap(ctx context.Context, machine *imperatorv1alpha1.Machine, path *field.Path, selector *metav1.LabelSelector) (field.ErrorList, error) {
	parsed, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil || parsed.Empty() {
		// ValidateMachine reports it.
		return nil, nil
	}
	nodes := &corev1.NodeList{}
	if err := v.Reader.List(ctx, nodes, client.MatchingLabelsSelector{Selector: parsed}); err != nil {
		return nil, fmt.Errorf("listing the nodes of %s: %w", path, err)
	}
	sort.Slice(nodes.Items, func(i, j int) bool { return nodes.Items[i].Name < nodes.Items[j].Name })
	selecting, err := v.selectingMachines(ctx, machine)
	if err != nil {
		return nil, err
	}
	var overlaps []string
	for i := range nodes.Items {
		node := &nodes.Items[i]
		naming := &imperatorv1alpha1.MachineList{}
		if err := v.Reader.List(ctx, naming, client.MatchingFields{MachineNodeNameKey: node.Name}); err != nil {
			return nil, fmt.Errorf("listing the Machines of node %s: %w", node.Name, err)
		}
		if other := otherThan(naming.Items, machine.Name); other != nil {
			overlaps = append(overlaps, fmt.Sprintf("node %s, which Machine %s (machine group %q) names",
				node.Name, other.Name, other.Labels[imperatorv1alpha1.MachineGroupKey]))
			continue
		}
		for j := range selecting {
			if k := selectingEntry(&selecting[j], node); k >= 0 {
				overlaps = append(overlaps, fmt.Sprintf("node %s, which Machine %s (machine group %q) selects by its spec.nodePool[%d].nodeSelector",
					node.Name, selecting[j].Name, selecting[j].Labels[imperatorv1alpha1.MachineGroupKey], k))
				break
			}
		}
	}
	if len(overlaps) == 0 {
		return nil, nil
	}
	var errs field.ErrorList
	for i, overlap := range overlaps {
		if i == maxOverlapsPerEntry {
			errs = append(errs, field.Invalid(path, parsed.String(),
				fmt.Sprintf("selects %d more nodes of other Machines; a node belongs to one Machine", len(overlaps)-maxOverlapsPerEntry)))
			break
		}
		errs = append(errs, field.Invalid(path, parsed.String(), "selects "+overlap+"; a node belongs to one Machine"))
	}
	return errs, nil
}

// otherThan is the first Machine of machines not named name, or nil.
func otherThan(machines []imperatorv1alpha1.Machine, name string) *imperatorv1alpha1.Machine {
	for i := range machines {
		if machines[i].Name != name {
			return &machines[i]
		}
	}
	return nil
}
