package nodepool

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// member is a node of a pool: named by an entry, or matched by a selector
// entry, with the entry that decides its machine type, mode and taint.
type member struct {
	name  string
	entry imperatorv1alpha1.NodePool
}

// HasSelector reports whether one of the entries of pool selects nodes by
// label.
func HasSelector(entries []imperatorv1alpha1.NodePool) bool {
	for i := range entries {
		if entries[i].NodeSelector != nil {
			return true
		}
	}
	return false
}

// selectorOf is the label selector of a selector entry; nil for a named
// entry, and a selector that matches nothing when it does not parse (the
// Machine validator refuses such a selector; a hand-made pool must not take
// every node).
func selectorOf(entry *imperatorv1alpha1.NodePool) labels.Selector {
	if entry.NodeSelector == nil {
		return nil
	}
	selector, err := metav1.LabelSelectorAsSelector(entry.NodeSelector)
	if err != nil || selector.Empty() {
		return labels.Nothing()
	}
	return selector
}

// EntryFor is the entry of entries that takes node into the pool: the first
// entry naming it, else the first selector entry matching its labels. named
// says whether a name took it; ok is false when no entry does.
func EntryFor(entries []imperatorv1alpha1.NodePool, node *corev1.Node) (entry imperatorv1alpha1.NodePool, named, ok bool) {
	for i := range entries {
		if entries[i].NodeSelector == nil && entries[i].Name == node.Name {
			return entries[i], true, true
		}
	}
	nodeLabels := labels.Set(node.Labels)
	for i := range entries {
		if selector := selectorOf(&entries[i]); selector != nil && selector.Matches(nodeLabels) {
			return entries[i], false, true
		}
	}
	return imperatorv1alpha1.NodePool{}, false, false
}

// Members are the nodes of a pool whose entries are entries, given the nodes
// its selector entries match (selected, in any order, possibly with
// repetitions): every named node in the order of the entries (whether it
// exists or not), then the selected nodes that no entry names, by name. Each
// node appears once, with the entry EntryFor gives it.
func Members(entries []imperatorv1alpha1.NodePool, selected []*corev1.Node) []member {
	out := make([]member, 0, len(entries)+len(selected))
	seen := make(map[string]bool, len(entries)+len(selected))
	for _, entry := range entries {
		if entry.NodeSelector != nil || seen[entry.Name] {
			continue
		}
		seen[entry.Name] = true
		out = append(out, member{name: entry.Name, entry: entry})
	}
	var matched []member
	for _, node := range selected {
		if seen[node.Name] {
			continue
		}
		entry, _, ok := EntryFor(entries, node)
		if !ok {
			continue
		}
		seen[node.Name] = true
		matched = append(matched, member{name: node.Name, entry: entry})
	}
	sort.Slice(matched, func(i, j int) bool { return matched[i].name < matched[j].name })
	return append(out, matched...)
}

// Ownership reasons: why the owner of a node, rather than another pool
// claiming it, keeps it.
const (
	// ownerListedFirst: both name the node; the owner is the older pool.
	ownerListedFirst = "listed it first"
	// ownerNamesIt: the owner names the node, the other only selects it.
	ownerNamesIt = "names it"
	// ownerHoldsIt: both select the node; the owner configured it already.
	ownerHoldsIt = "holds it already"
	// ownerSelectedFirst: both select the node, neither holds it; the owner
	// is the older pool.
	ownerSelectedFirst = "selected it first"
)

// Owner decides which of the live pools claiming node (by name or by
// selector) owns it: a pool naming the node wins over pools that only select
// it; among pools of the same kind, the one whose group the node is annotated
// with (it configured the node already, so a node labelled later never moves
// away from running guests), else the oldest (ties by name). Every pool
// decides from the same node and pools, so they agree and never write the
// node back and forth. Pools being deleted and pools that do not claim node
// are skipped; nil when none is left.
func Owner(node *corev1.Node, pools []*imperatorv1alpha1.MachineNodePool) *imperatorv1alpha1.MachineNodePool {
	var owner *imperatorv1alpha1.MachineNodePool
	var ownerNamed, ownerHolds bool
	for _, pool := range pools {
		if !pool.DeletionTimestamp.IsZero() {
			continue
		}
		_, named, ok := EntryFor(pool.Spec.NodePool, node)
		if !ok {
			continue
		}
		holds := holdsNode(pool, node)
		switch {
		case owner == nil,
			named && !ownerNamed,
			named == ownerNamed && holds && !ownerHolds,
			named == ownerNamed && holds == ownerHolds && olderThan(pool, owner):
			owner, ownerNamed, ownerHolds = pool, named, holds
		}
	}
	return owner
}

// ownerReason says why owner, and not pool, keeps node (Owner).
func ownerReason(node *corev1.Node, owner, pool *imperatorv1alpha1.MachineNodePool) string {
	_, ownerNamed, _ := EntryFor(owner.Spec.NodePool, node)
	_, named, _ := EntryFor(pool.Spec.NodePool, node)
	switch {
	case ownerNamed && named:
		return ownerListedFirst
	case ownerNamed:
		return ownerNamesIt
	case holdsNode(owner, node):
		return ownerHoldsIt
	default:
		return ownerSelectedFirst
	}
}

// holdsNode reports whether node is annotated with the group of pool: the
// pool configured it.
func holdsNode(pool *imperatorv1alpha1.MachineNodePool, node *corev1.Node) bool {
	group, ok := node.Annotations[imperatorv1alpha1.MachineGroupKey]
	return ok && group == pool.Spec.MachineGroup
}

func olderThan(a, b *imperatorv1alpha1.MachineNodePool) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}
