package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// poolNodes resolves m's spec.nodePool to the nodes it takes: a named entry
// takes its node, a selector entry every node it matches that no entry
// names (a name wins over a selector for its node). The entries point into m.
func poolNodes(ctx context.Context, c client.Client, m *imperatorv1alpha1.Machine) (map[string]*imperatorv1alpha1.NodePool, error) {
	out := map[string]*imperatorv1alpha1.NodePool{}
	for i := range m.Spec.NodePool {
		if name := m.Spec.NodePool[i].Name; name != "" {
			out[name] = &m.Spec.NodePool[i]
		}
	}
	for i := range m.Spec.NodePool {
		entry := &m.Spec.NodePool[i]
		if entry.NodeSelector == nil {
			continue
		}
		selector, err := metav1.LabelSelectorAsSelector(entry.NodeSelector)
		if err != nil {
			return nil, fmt.Errorf("nodeSelector of spec.nodePool[%d] of Machine %s: %w", i, m.Name, err)
		}
		nodes := &corev1.NodeList{}
		if err := c.List(ctx, nodes, client.MatchingLabelsSelector{Selector: selector}); err != nil {
			return nil, fmt.Errorf("listing the nodes spec.nodePool[%d] of Machine %s selects: %w", i, m.Name, err)
		}
		for _, n := range nodes.Items {
			if _, taken := out[n.Name]; !taken {
				out[n.Name] = entry
			}
		}
	}
	return out, nil
}

// poolEntry returns the spec.nodePool entry that takes node in m (by name
// or by selector), or nil.
func poolEntry(ctx context.Context, c client.Client, m *imperatorv1alpha1.Machine, node string) *imperatorv1alpha1.NodePool {
	GinkgoHelper()
	pool, err := poolNodes(ctx, c, m)
	Expect(err).NotTo(HaveOccurred())
	return pool[node]
}

// expectPoolNode checks what the agent put on a node of a Machine's pool:
// the per-type label (value: group), the machine-type and node-pool labels,
// the machine-group annotation, and the two NoSchedule taints exactly when
// the pool entry says taint: true.
func expectPoolNode(g Gomega, ctx context.Context, c client.Client, group, name string, entry imperatorv1alpha1.NodePool, state imperatorv1alpha1.NodePoolState) {
	node := &corev1.Node{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
	typ := entry.MachineType[0].Name
	g.Expect(node.Labels).To(HaveKeyWithValue(imperatorv1alpha1.MachineTypeKeyFor(typ), group), "labels of node %s", node.Name)
	g.Expect(node.Labels).To(HaveKeyWithValue(imperatorv1alpha1.MachineTypeKey, typ), "labels of node %s", node.Name)
	g.Expect(node.Labels).To(HaveKeyWithValue(imperatorv1alpha1.NodePoolKey, string(state)), "labels of node %s", node.Name)
	g.Expect(node.Annotations).To(HaveKeyWithValue(imperatorv1alpha1.MachineGroupKey, group), "annotations of node %s", node.Name)
	var want []string
	if entry.Taint {
		want = []string{
			imperatorv1alpha1.MachineTypeKeyFor(typ) + "=" + group + ":NoSchedule",
			imperatorv1alpha1.NodePoolKey + "=" + string(state) + ":NoSchedule",
		}
	}
	g.Expect(imperatorTaints(node)).To(ConsistOf(want), "imperator taints of node %s (taint: %t)", node.Name, entry.Taint)
}

// imperatorTaints are the node's taints under the imperator prefix, as
// key=value:effect.
func imperatorTaints(node *corev1.Node) []string {
	var out []string
	for _, t := range node.Spec.Taints {
		if strings.HasPrefix(t.Key, imperatorv1alpha1.Prefix) {
			out = append(out, t.Key+"="+t.Value+":"+string(t.Effect))
		}
	}
	return out
}

// hasTaint reports whether node carries a taint with key and effect.
func hasTaint(node *corev1.Node, key string, effect corev1.TaintEffect) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key && t.Effect == effect })
}

// expectPoolCondition checks the MachineNodePool status of a node.
func expectPoolCondition(g Gomega, ctx context.Context, c client.Client, machine, node string, want imperatorv1alpha1.NodeCondition) {
	pool := &imperatorv1alpha1.MachineNodePool{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: imperatorv1alpha1.NodePoolName(machine)}, pool)).To(Succeed())
	var got []string
	for _, s := range pool.Status.NodePool {
		got = append(got, s.Name+"="+string(s.Condition))
	}
	g.Expect(got).To(ContainElement(node+"="+string(want)), "status.nodePool of MachineNodePool %s", pool.Name)
}

// reservationPods lists the reservation pods of group/typ in namespace.
func reservationPods(g Gomega, ctx context.Context, c client.Client, namespace, group, typ string) []corev1.Pod {
	pods := &corev1.PodList{}
	g.Expect(c.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{
		imperatorv1alpha1.PodRoleKey:      string(imperatorv1alpha1.PodRoleReservation),
		imperatorv1alpha1.MachineGroupKey: group,
		imperatorv1alpha1.MachineTypeKey:  typ,
	})).To(Succeed())
	return pods.Items
}

// boundPods are the pods bound to a node and not terminating: what the
// agent counts as reserved or used.
func boundPods(pods []corev1.Pod) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out
}

// describePods is "name@node(phase)" per pod, for messages.
func describePods(pods []corev1.Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, fmt.Sprintf("%s@%s(%s)", p.Name, p.Spec.NodeName, p.Status.Phase))
	}
	return out
}

// usageString renders a usage for comparisons with readable failures.
func usageString(maximum, reserved, used, waiting int32) string {
	return fmt.Sprintf("maximum=%d reserved=%d used=%d waiting=%d", maximum, reserved, used, waiting)
}

func statusUsageString(u *imperatorv1alpha1.Usage) string {
	if u == nil {
		return "<none>"
	}
	return usageString(u.Maximum, u.Reserved, u.Used, u.Waiting)
}

func hubUsageString(u *queryv1.TypeUsage) string {
	if u == nil {
		return "<none>"
	}
	return usageString(u.GetMaximum(), u.GetReserved(), u.GetUsed(), u.GetWaiting())
}

// expectHubMatchesMachine checks that the hub's usage of cluster shows, for
// every machine type in the Machine's status, the same figures.
func expectHubMatchesMachine(g Gomega, ctx context.Context, ctl *Imperatorctl, cluster string, m *imperatorv1alpha1.Machine) {
	g.Expect(m.Status.AvailableMachines).NotTo(BeEmpty(), "status of Machine %s", m.Name)
	usage, err := ctl.Usage(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	for _, am := range m.Status.AvailableMachines {
		hub := UsageOf(usage, cluster, Group(m), am.Name)
		g.Expect(hubUsageString(hub)).To(Equal(statusUsageString(&am.Usage)),
			"hub usage of %s %s/%s vs the Machine's status", cluster, Group(m), am.Name)
	}
}

// expectHubMatchesSpokes checks that the hub shows, for every Machine of
// every spoke named, the figures of its status, once the agent has written
// that status for the Machine's current spec.
func expectHubMatchesSpokes(g Gomega, ctx context.Context, env *Env, spokes []string) {
	for _, name := range spokes {
		var machines imperatorv1alpha1.MachineList
		g.Expect(env.Spoke(name).Client.List(ctx, &machines)).To(Succeed(), "Machines of %s", name)
		for i := range machines.Items {
			m := &machines.Items[i]
			g.Expect(m.Status.Conditions).NotTo(BeEmpty(), "status of Machine %s/%s", name, m.Name)
			for _, c := range m.Status.Conditions {
				g.Expect(c.ObservedGeneration).To(Equal(m.Generation), "condition %s of Machine %s/%s observed its spec", c.Type, name, m.Name)
			}
			expectHubMatchesMachine(g, ctx, env.Ctl, name, m)
		}
	}
}

// hubNodeCounts returns the hub's node counts of group/typ in cluster.
func hubNodeCounts(g Gomega, ctx context.Context, ctl *Imperatorctl, cluster, group, typ string) *federationv1.NodeCounts {
	resp, err := ctl.Machines(ctx, "--cluster", cluster, "--group", group, "--type", typ)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.GetMachineTypes()).To(HaveLen(1), "machines --cluster %s --group %s --type %s", cluster, group, typ)
	counts := resp.GetMachineTypes()[0].GetNodes()
	if counts == nil {
		counts = &federationv1.NodeCounts{}
	}
	return counts
}

// countsString renders node counts for comparisons.
func countsString(c *federationv1.NodeCounts) string {
	return fmt.Sprintf("ready=%d notReady=%d maintenance=%d missing=%d conflict=%d",
		c.GetReady(), c.GetNotReady(), c.GetMaintenance(), c.GetMissing(), c.GetConflict())
}

// expectManagedCluster checks the hub cluster's OCM ManagedCluster of name:
// accepted, with the Available condition at status.
func expectManagedCluster(g Gomega, ctx context.Context, hub client.Client, name string, status metav1.ConditionStatus) {
	mc := &clusterv1.ManagedCluster{}
	g.Expect(hub.Get(ctx, client.ObjectKey{Name: name}, mc)).To(Succeed(), "ManagedCluster %s", name)
	g.Expect(mc.Spec.HubAcceptsClient).To(BeTrue(), "ManagedCluster %s accepts its client", name)
	cond := meta.FindStatusCondition(mc.Status.Conditions, clusterv1.ManagedClusterConditionAvailable)
	g.Expect(cond).NotTo(BeNil(), "ManagedCluster %s has condition %s", name, clusterv1.ManagedClusterConditionAvailable)
	g.Expect(cond.Status).To(Equal(status), "ManagedCluster %s condition %s: %s", name, cond.Type, cond.Message)
}

// expectQuantity checks one resource of a list.
func expectQuantity(g Gomega, list corev1.ResourceList, name corev1.ResourceName, want resource.Quantity, what string) {
	got, ok := list[name]
	g.Expect(ok).To(BeTrue(), "%s has no %s (has %v)", what, name, list)
	g.Expect(got.Cmp(want)).To(BeZero(), "%s %s = %s, want %s", what, name, got.String(), want.String())
}

// usageTable renders every cluster's usage, sorted, for before/after
// comparisons.
func usageTable(resp *queryv1.GetUsageResponse) []string {
	var rows []string
	for _, cu := range resp.GetClusters() {
		for _, t := range cu.GetTypes() {
			rows = append(rows, fmt.Sprintf("%s %s/%s %s free=%d", cu.GetCluster(), t.GetGroup(), t.GetType(), hubUsageString(t), t.GetFree()))
		}
	}
	slices.Sort(rows)
	return rows
}

// quantity is n as a decimal quantity (a GPU count).
func quantity(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.DecimalSI) }

// tokenTable renders bootstrap tokens (without secrets), sorted by ID.
func tokenTable(resp *queryv1.ListTokensResponse) []string {
	var rows []string
	for _, t := range resp.GetTokens() {
		rows = append(rows, fmt.Sprintf("%s cluster=%s usedBy=%s expires=%s", t.GetId(), t.GetClusterName(), t.GetUsedBy(), t.GetExpiration().AsTime().UTC().Format(time.RFC3339)))
	}
	slices.Sort(rows)
	return rows
}
