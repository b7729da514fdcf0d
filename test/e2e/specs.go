package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// How long the journeys wait for what a user would wait for.
const (
	poll = 500 * time.Millisecond
	// joinTimeout: spokes show up at the hub after they joined.
	joinTimeout = time.Minute
	// spokeTimeout: the agent labels nodes, reconciles reservations and the
	// scheduler and kwok run the pods.
	spokeTimeout = time.Minute
	// hubPropagation: "the hub's usage moves within seconds" once the
	// spoke's Machine status moved.
	hubPropagation = 10 * time.Second
	// reconnectTimeout: agents reconnect to a restarted hub by themselves,
	// with capped backoff.
	reconnectTimeout = 90 * time.Second
	// offlineSlack is added to the hub's grace period before a silent spoke
	// must show offline.
	offlineSlack = 20 * time.Second
)

// JoinInput configures JoinSpec.
type JoinInput struct {
	Env *Env
	// Spokes must be listed Available; the fleet joined them with tokens.
	Spokes []string
	// NewTokenCluster is the cluster name a fresh token is bound to.
	NewTokenCluster string
	// WantModes is the MODE each spoke must show in `imperatorctl clusters
	// -o wide` (in-cluster, or hosted for a spoke served by a hosted agent).
	WantModes map[string]string
}

// JoinSpec is journey 1: the spokes joined with their one-time tokens and
// `imperatorctl clusters` lists them Available, `-o wide` with the MODE of
// their agents (a hosted member is told apart only there); the hub cluster registers
// them as OCM ManagedClusters; a platform engineer creates a fresh join
// token and sees it (without its secret) in `token list`.
func JoinSpec(ctx context.Context, in JoinInput) {
	ctl := in.Env.Ctl

	By("imperatorctl clusters lists every spoke Available and connected")
	Eventually(ctx, func(g Gomega) {
		resp, err := ctl.Clusters(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		for _, name := range in.Spokes {
			c := ClusterNamed(resp, name)
			g.Expect(c).NotTo(BeNil(), "cluster %s in imperatorctl clusters", name)
			g.Expect(c.GetState()).To(Equal(queryv1.ClusterState_CLUSTER_STATE_AVAILABLE), "state of %s", name)
			g.Expect(c.GetConnected()).To(BeTrue(), "%s connected", name)
			g.Expect(c.GetAgentVersion()).NotTo(BeEmpty(), "agent version of %s", name)
		}
	}).WithTimeout(joinTimeout).WithPolling(poll).Should(Succeed())

	if len(in.WantModes) > 0 {
		By(fmt.Sprintf("imperatorctl clusters -o wide shows how each agent runs: %v", in.WantModes))
		Eventually(ctx, func(g Gomega) {
			modes, res, err := ctl.TableColumn(ctx, "MODE", "clusters", "-o", "wide")
			g.Expect(err).NotTo(HaveOccurred())
			for name, want := range in.WantModes {
				g.Expect(modes).To(HaveKeyWithValue(name, want), "MODE of %s in:\n%s", name, res.Stdout)
			}
		}).WithTimeout(joinTimeout).WithPolling(poll).Should(Succeed())
	}

	By("the hub cluster has an accepted, available ManagedCluster per spoke")
	Eventually(ctx, func(g Gomega) {
		for _, name := range in.Spokes {
			expectManagedCluster(g, ctx, in.Env.Hub.Client, name, metav1.ConditionTrue)
		}
	}).WithTimeout(joinTimeout).WithPolling(poll).Should(Succeed())

	By("every spoke used a join token bound to its name")
	tokens, err := ctl.Tokens(ctx)
	Expect(err).NotTo(HaveOccurred())
	for _, name := range in.Spokes {
		Expect(tokens.GetTokens()).To(ContainElement(HaveField("GetUsedBy()", name)), "a token used by %s", name)
	}

	By("a platform engineer creates a fresh join token")
	created := &queryv1.CreateTokenResponse{}
	description := "e2e journey 1"
	_, err = ctl.JSON(ctx, created, []string{"token", "create", "--ttl", "1h", "--cluster", in.NewTokenCluster, "--description", description})
	Expect(err).NotTo(HaveOccurred())
	id, secret, found := strings.Cut(created.GetToken(), ".")
	Expect(found && id != "" && secret != "").To(BeTrue(), "token %q is <id>.<secret>", created.GetToken())
	Expect(created.GetInfo().GetId()).To(Equal(id))
	DeferCleanup(func(ctx context.Context) {
		res, err := ctl.Run(ctx, "token", "revoke", id)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(BeZero(), "%s", res)
	})

	By("token list shows it, unused and without its secret")
	res, err := ctl.Run(ctx, "token", "list", "-o", "json")
	Expect(err).NotTo(HaveOccurred())
	Expect(res.ExitCode).To(BeZero(), "%s", res)
	Expect(res.Stdout).NotTo(ContainSubstring(secret), "token list must not show secrets")
	tokens, err = ctl.Tokens(ctx)
	Expect(err).NotTo(HaveOccurred())
	idx := slices.IndexFunc(tokens.GetTokens(), func(t *queryv1.Token) bool { return t.GetId() == id })
	Expect(idx).NotTo(Equal(-1), "token %s in token list:\n%s", id, res.Stdout)
	listed := tokens.GetTokens()[idx]
	Expect(listed.GetClusterName()).To(Equal(in.NewTokenCluster))
	Expect(listed.GetDescription()).To(Equal(description))
	Expect(listed.GetUsedBy()).To(BeEmpty())
	Expect(listed.GetExpiration().AsTime()).To(BeTemporally("~", time.Now().Add(time.Hour), 5*time.Minute))
}

// MachineInput configures MachineSpec.
type MachineInput struct {
	Env   *Env
	Spoke string
	// MachineFile is a sample Machine (deploy/spoke/samples).
	MachineFile string
	// WantReserved is the number of reservation pods each machine type of
	// the Machine must get: what its ready nodes can hold of available.
	WantReserved map[string]int32
	// WantPool is what each node of the Machine's pool must show once the
	// agent configured it; every node of the pool must be named.
	WantPool map[string]PoolNode
}

// PoolNode is what a user sees of one node of a Machine's pool: its
// imperator.tenzen-y.io/node-pool label (and taint, when the pool taints)
// and its condition in the MachineNodePool status.
type PoolNode struct {
	State     imperatorv1alpha1.NodePoolState
	Condition imperatorv1alpha1.NodeCondition
}

// MachineSpec is journey 2 (and the first half of 5): a platform engineer
// applies a Machine on a spoke; it becomes Ready, every node of its pool is
// labelled (and tainted when taint: true) after its mode, reservation pods
// run on the ready nodes serving their type, and the hub's usage shows the
// Machine's maximum/reserved figures.
func MachineSpec(ctx context.Context, in MachineInput) {
	spoke := in.Env.Spoke(in.Spoke)
	want, err := ReadMachine(in.MachineFile)
	Expect(err).NotTo(HaveOccurred())
	group := Group(want)
	Expect(group).NotTo(BeEmpty(), "%s has a machine-group label", in.MachineFile)

	By(fmt.Sprintf("applying Machine %s on %s", want.Name, in.Spoke))
	Expect(ApplyMachine(ctx, spoke.Client, want)).To(Succeed())

	By("the Machine becomes Ready")
	m := &imperatorv1alpha1.Machine{}
	Eventually(ctx, func(g Gomega) {
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: want.Name}, m)).To(Succeed())
		g.Expect(MachineReady(m)).To(BeTrue(), "Ready condition of Machine %s: %+v", m.Name, m.Status.Conditions)
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By("every node of the pool carries the labels, annotation and taints of its mode")
	Eventually(ctx, func(g Gomega) {
		pool, err := poolNodes(ctx, spoke.Client, want)
		g.Expect(err).NotTo(HaveOccurred())
		names := slices.Sorted(maps.Keys(pool))
		g.Expect(names).To(ConsistOf(slices.Sorted(maps.Keys(in.WantPool))), "the nodes the pool of %s takes, by name or by selector", want.Name)
		for _, name := range names {
			node := in.WantPool[name]
			expectPoolNode(g, ctx, spoke.Client, group, name, *pool[name], node.State)
			expectPoolCondition(g, ctx, spoke.Client, want.Name, name, node.Condition)
		}
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By("reservation pods run on ready nodes that serve their machine type")
	Eventually(ctx, func(g Gomega) {
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: want.Name}, m)).To(Succeed())
		for _, mt := range want.Spec.MachineTypes {
			wantReserved, ok := in.WantReserved[mt.Name]
			g.Expect(ok).To(BeTrue(), "WantReserved names machine type %s", mt.Name)
			pods := boundPods(reservationPods(g, ctx, spoke.Client, in.Env.Namespace, group, mt.Name))
			g.Expect(pods).To(HaveLen(int(wantReserved)), "bound reservation pods of %s: %v", mt.Name, describePods(pods))
			nodes := readyNodesServing(g, ctx, spoke.Client, want, in.WantPool, mt.Name)
			for _, p := range pods {
				g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "reservation pod %s", p.Name)
				g.Expect(nodes).To(ContainElement(p.Spec.NodeName), "reservation pod %s of %s runs on a ready node serving it", p.Name, mt.Name)
			}
			g.Expect(statusUsageString(StatusUsage(m, mt.Name))).To(Equal(usageString(mt.Available, wantReserved, 0, 0)),
				"status usage of %s in Machine %s", mt.Name, m.Name)
		}
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By("the hub's usage shows the Machine's maximum and reserved figures")
	Eventually(ctx, func(g Gomega) {
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: want.Name}, m)).To(Succeed())
		expectHubMatchesMachine(g, ctx, in.Env.Ctl, in.Spoke, m)
	}).WithTimeout(joinTimeout).WithPolling(poll).Should(Succeed())
}

// readyNodesServing are the nodes of m's pool that serve typ and that pool
// says must be ready.
func readyNodesServing(g Gomega, ctx context.Context, c client.Client, m *imperatorv1alpha1.Machine, pool map[string]PoolNode, typ string) []string {
	entries, err := poolNodes(ctx, c, m)
	g.Expect(err).NotTo(HaveOccurred())
	var nodes []string
	for name, entry := range entries {
		if pool[name].State == imperatorv1alpha1.NodePoolReady && slices.ContainsFunc(entry.MachineType, func(r imperatorv1alpha1.MachineTypeRef) bool { return r.Name == typ }) {
			nodes = append(nodes, name)
		}
	}
	slices.Sort(nodes)
	return nodes
}

// GuestInput configures GuestSpec.
type GuestInput struct {
	Env   *Env
	Spoke string
	// GuestFile holds an injection-enabled Namespace and a Deployment whose
	// pod template carries the three labels.
	GuestFile string
	// MachineName is the Machine of the guests' machine group.
	MachineName string
	// WantNodes are the nodes the guests may run on.
	WantNodes []string
}

// GuestSpec is journey 3: a team deploys a guest Deployment with the three
// labels in an enabled namespace; its pods are injected with the machine
// type's resources (requests = limits) and run on the type's nodes, the
// reservation gives way, and the hub's usage moves within seconds.
func GuestSpec(ctx context.Context, in GuestInput) {
	spoke := in.Env.Spoke(in.Spoke)
	w, err := ReadGuestWorkload(in.GuestFile)
	Expect(err).NotTo(HaveOccurred())
	labels := w.Deployment.Spec.Template.Labels
	group, typ := labels[imperatorv1alpha1.MachineGroupKey], labels[imperatorv1alpha1.MachineTypeKey]
	Expect(labels).To(HaveKeyWithValue(imperatorv1alpha1.PodRoleKey, string(imperatorv1alpha1.PodRoleGuest)))
	container := w.Deployment.Spec.Template.Spec.Containers[0].Name
	if name, ok := labels[imperatorv1alpha1.InjectingContainerKey]; ok {
		container = name
	}
	replicas := int32(1)
	if w.Deployment.Spec.Replicas != nil {
		replicas = *w.Deployment.Spec.Replicas
	}

	m := &imperatorv1alpha1.Machine{}
	Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.MachineName}, m)).To(Succeed())
	Expect(Group(m)).To(Equal(group), "the guests ask for the group of Machine %s", m.Name)
	mt := m.MachineType(typ)
	Expect(mt).NotTo(BeNil(), "Machine %s has machine type %s", m.Name, typ)
	Expect(mt.Spec.GPU).NotTo(BeNil(), "machine type %s has GPUs", typ)
	Expect(mt.Available).To(BeNumerically(">=", replicas), "enough %s units for the guests", typ)
	wantReserved := mt.Available - replicas

	By(fmt.Sprintf("a team deploys %s/%s asking for %d × %s/%s", w.Deployment.Namespace, w.Deployment.Name, replicas, group, typ))
	applied := time.Now()
	Expect(ApplyGuestWorkload(ctx, spoke.Client, w)).To(Succeed())

	By("the guest pods are injected and run on the type's nodes")
	Eventually(ctx, func(g Gomega) {
		pods := &corev1.PodList{}
		g.Expect(spoke.Client.List(ctx, pods, client.InNamespace(w.Deployment.Namespace), client.MatchingLabels(w.Deployment.Spec.Selector.MatchLabels))).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(int(replicas)), "guest pods: %v", describePods(pods.Items))
		for _, p := range pods.Items {
			g.Expect(p.Annotations).To(HaveKey(imperatorv1alpha1.InjectedAnnotation), "guest pod %s is injected", p.Name)
			idx := slices.IndexFunc(p.Spec.Containers, func(c corev1.Container) bool { return c.Name == container })
			g.Expect(idx).NotTo(Equal(-1), "guest pod %s has container %s", p.Name, container)
			res := p.Spec.Containers[idx].Resources
			for what, list := range map[string]corev1.ResourceList{"requests": res.Requests, "limits": res.Limits} {
				what = fmt.Sprintf("%s of %s/%s", what, p.Name, container)
				expectQuantity(g, list, corev1.ResourceCPU, mt.Spec.CPU, what)
				expectQuantity(g, list, corev1.ResourceMemory, mt.Spec.Memory, what)
				expectQuantity(g, list, corev1.ResourceName(mt.Spec.GPU.Type), *quantity(int64(mt.Spec.GPU.Num)), what)
			}
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "guest pod %s@%s", p.Name, p.Spec.NodeName)
			g.Expect(in.WantNodes).To(ContainElement(p.Spec.NodeName), "guest pod %s runs on a node of %s", p.Name, typ)
		}
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By("the reservation gives way: the Machine counts the guests as used")
	Eventually(ctx, func(g Gomega) {
		pods := boundPods(reservationPods(g, ctx, spoke.Client, in.Env.Namespace, group, typ))
		g.Expect(pods).To(HaveLen(int(wantReserved)), "bound reservation pods of %s: %v", typ, describePods(pods))
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.MachineName}, m)).To(Succeed())
		g.Expect(statusUsageString(StatusUsage(m, typ))).To(Equal(usageString(mt.Available, wantReserved, replicas, 0)),
			"status usage of %s in Machine %s", typ, m.Name)
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
	spokeMoved := time.Now()

	By("the hub's usage moves within seconds")
	Eventually(ctx, func(g Gomega) {
		usage, err := in.Env.Ctl.Usage(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		hub := UsageOf(usage, in.Spoke, group, typ)
		g.Expect(hubUsageString(hub)).To(Equal(usageString(mt.Available, wantReserved, replicas, 0)), "hub usage of %s %s/%s", in.Spoke, group, typ)
		g.Expect(hub.GetFree()).To(Equal(min(wantReserved, mt.Available-replicas)), "hub free units of %s/%s", group, typ)
	}).WithTimeout(hubPropagation).WithPolling(poll).Should(Succeed())
	AddReportEntry("guest journey timings", fmt.Sprintf("spoke status moved %s after the apply; the hub followed %s later",
		spokeMoved.Sub(applied).Round(time.Millisecond), time.Since(spokeMoved).Round(time.Millisecond)))
}

// NodePoolInput configures NodePoolSpec.
type NodePoolInput struct {
	Env         *Env
	Spoke       string
	MachineName string
	// MaintenanceNode is a node of the pool in mode maintenance.
	MaintenanceNode string
	// UnhealthyNode is a ready node that is cordoned.
	UnhealthyNode string
}

// NodePoolSpec is journey 4: the node-pool follows a platform engineer's
// mode changes and the nodes' health, and so do the hub's answers.
//
// A maintenance node is put into ready and back: its labels, the
// MachineNodePool status and the hub's node counts follow.
//
// A ready node becomes unhealthy: the agent treats any of the
// node.kubernetes.io/{not-ready,unschedulable,network-unavailable,
// unreachable} taints alike. The journey cordons the node, which gives it
// node.kubernetes.io/unschedulable:NoSchedule. It does not taint it
// unreachable by hand: on a node whose kubelet (kwok) keeps reporting Ready,
// kube-controller-manager's node lifecycle controller removes a hand-made
// unreachable or not-ready NoSchedule taint within a second, so the agent
// never sees a stable unhealthy node. Cordoning keeps the reservation pods
// bound (NoSchedule does not evict), but a guest's injected affinity asks
// for node-pool=ready nodes, so the units held there are not reserved any
// more: the Machine's reserved count and the hub's free units drop by them
// (to 0 when the node is the type's only ready one), the InsufficientCapacity
// condition names the node, and all of it comes back with the uncordon.
func NodePoolSpec(ctx context.Context, in NodePoolInput) {
	spoke := in.Env.Spoke(in.Spoke)
	m := &imperatorv1alpha1.Machine{}
	Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.MachineName}, m)).To(Succeed())
	group := Group(m)
	maintenance := poolEntry(ctx, spoke.Client, m, in.MaintenanceNode)
	Expect(maintenance).NotTo(BeNil(), "%s is in the pool of %s", in.MaintenanceNode, m.Name)
	Expect(maintenance.Mode).To(Equal(imperatorv1alpha1.NodePoolModeMaintenance))
	unhealthy := poolEntry(ctx, spoke.Client, m, in.UnhealthyNode)
	Expect(unhealthy).NotTo(BeNil(), "%s is in the pool of %s", in.UnhealthyNode, m.Name)
	Expect(unhealthy.Mode).To(Equal(imperatorv1alpha1.NodePoolModeReady))

	counts := func(typ string) string {
		var out string
		Eventually(ctx, func(g Gomega) { out = countsString(hubNodeCounts(g, ctx, in.Env.Ctl, in.Spoke, group, typ)) }).
			WithTimeout(hubPropagation).WithPolling(poll).Should(Succeed())
		return out
	}
	maintenanceType := maintenance.MachineType[0].Name
	maintenanceCountsBefore := counts(maintenanceType)

	setMode := func(mode imperatorv1alpha1.NodePoolMode) {
		GinkgoHelper()
		Expect(UpdateMachine(ctx, spoke.Client, in.MachineName, func(m *imperatorv1alpha1.Machine) {
			poolEntry(ctx, spoke.Client, m, in.MaintenanceNode).Mode = mode
		})).To(Succeed())
	}
	DeferCleanup(func(ctx context.Context) {
		Expect(UpdateMachine(ctx, spoke.Client, in.MachineName, func(m *imperatorv1alpha1.Machine) {
			poolEntry(ctx, spoke.Client, m, in.MaintenanceNode).Mode = imperatorv1alpha1.NodePoolModeMaintenance
		})).To(Succeed())
	})

	By(fmt.Sprintf("%s: mode maintenance → ready", in.MaintenanceNode))
	setMode(imperatorv1alpha1.NodePoolModeReady)
	Eventually(ctx, func(g Gomega) {
		expectPoolNode(g, ctx, spoke.Client, group, in.MaintenanceNode, *maintenance, imperatorv1alpha1.NodePoolReady)
		expectPoolCondition(g, ctx, spoke.Client, in.MachineName, in.MaintenanceNode, imperatorv1alpha1.NodeConditionReady)
		after := hubNodeCounts(g, ctx, in.Env.Ctl, in.Spoke, group, maintenanceType)
		g.Expect(countsString(after)).To(Equal(shiftCounts(maintenanceCountsBefore, "maintenance", "ready")), "hub node counts of %s", maintenanceType)
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By(fmt.Sprintf("%s: mode ready → maintenance", in.MaintenanceNode))
	setMode(imperatorv1alpha1.NodePoolModeMaintenance)
	Eventually(ctx, func(g Gomega) {
		expectPoolNode(g, ctx, spoke.Client, group, in.MaintenanceNode, *maintenance, imperatorv1alpha1.NodePoolMaintenance)
		expectPoolCondition(g, ctx, spoke.Client, in.MachineName, in.MaintenanceNode, imperatorv1alpha1.NodeConditionMaintenance)
		g.Expect(countsString(hubNodeCounts(g, ctx, in.Env.Ctl, in.Spoke, group, maintenanceType))).To(Equal(maintenanceCountsBefore))
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	unhealthyType := unhealthy.MachineType[0].Name
	unhealthyCountsBefore := counts(unhealthyType)
	var reservedBefore int32
	Eventually(ctx, func(g Gomega) {
		onNode := 0
		for _, p := range boundPods(reservationPods(g, ctx, spoke.Client, in.Env.Namespace, group, unhealthyType)) {
			if p.Spec.NodeName == in.UnhealthyNode {
				onNode++
			}
		}
		g.Expect(onNode).To(BeNumerically(">", 0), "%s reservation pods bound to %s", unhealthyType, in.UnhealthyNode)
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.MachineName}, m)).To(Succeed())
		u := StatusUsage(m, unhealthyType)
		g.Expect(u).NotTo(BeNil())
		g.Expect(u.Reserved).To(Equal(reservedOnReadyNodes(g, ctx, spoke.Client, in.Env.Namespace, group, unhealthyType)))
		reservedBefore = u.Reserved
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
	capacityBefore, code, err := in.Env.Ctl.Capacity(ctx, unhealthyType)
	Expect(err).NotTo(HaveOccurred())
	Expect(code).To(BeZero(), "capacity %s while %s is healthy", unhealthyType, in.UnhealthyNode)
	Expect(CandidateNames(capacityBefore)).To(ContainElement(in.Spoke), "capacity %s lists %s", unhealthyType, in.Spoke)
	freeBefore := CandidateOf(capacityBefore, in.Spoke).GetFree()

	setUnschedulable := func(ctx context.Context, unschedulable bool) {
		GinkgoHelper()
		Expect(UpdateNode(ctx, spoke.Client, in.UnhealthyNode, func(n *corev1.Node) { n.Spec.Unschedulable = unschedulable })).To(Succeed())
	}
	DeferCleanup(setUnschedulable, false)

	By(fmt.Sprintf("%s is cordoned: it gets the unschedulable taint and the pool marks it not-ready", in.UnhealthyNode))
	setUnschedulable(ctx, true)
	Eventually(ctx, func(g Gomega) {
		node := &corev1.Node{}
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.UnhealthyNode}, node)).To(Succeed())
		g.Expect(hasTaint(node, corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule)).To(BeTrue(), "taints of %s: %v", node.Name, node.Spec.Taints)
		expectPoolNode(g, ctx, spoke.Client, group, in.UnhealthyNode, *unhealthy, imperatorv1alpha1.NodePoolNotReady)
		expectPoolCondition(g, ctx, spoke.Client, in.MachineName, in.UnhealthyNode, imperatorv1alpha1.NodeConditionNotReady)
		g.Expect(countsString(hubNodeCounts(g, ctx, in.Env.Ctl, in.Spoke, group, unhealthyType))).
			To(Equal(shiftCounts(unhealthyCountsBefore, "ready", "notReady")), "hub node counts of %s", unhealthyType)
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By(fmt.Sprintf("the units held on %s are not reserved: no guest can take them, the capacity answer drops them", in.UnhealthyNode))
	var freeWhileNotReady int32
	var usageWhileNotReady string
	Eventually(ctx, func(g Gomega) {
		// What a guest can take now: reservations bound to the type's
		// other node-pool=ready nodes.
		onReady := reservedOnReadyNodes(g, ctx, spoke.Client, in.Env.Namespace, group, unhealthyType)
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.MachineName}, m)).To(Succeed())
		u := StatusUsage(m, unhealthyType)
		g.Expect(u).NotTo(BeNil())
		usageWhileNotReady = statusUsageString(u)
		g.Expect(u.Reserved).To(Equal(onReady), "reserved %s units of Machine %s while %s is not-ready (%s)",
			unhealthyType, in.MachineName, in.UnhealthyNode, usageWhileNotReady)
		g.Expect(m.Status.Conditions).To(ContainElement(And(
			HaveField("Type", imperatorv1alpha1.ConditionInsufficientCapacity),
			HaveField("Status", metav1.ConditionTrue),
			HaveField("Message", And(
				ContainSubstring(unhealthyType+": "),
				ContainSubstring("reservation pods on nodes that are not ready"),
				ContainSubstring(in.UnhealthyNode+" ("+string(imperatorv1alpha1.NodePoolNotReady)+")"))))),
			"conditions of Machine %s", in.MachineName)
		answer, _, err := in.Env.Ctl.Capacity(ctx, unhealthyType)
		g.Expect(err).NotTo(HaveOccurred())
		freeWhileNotReady = 0
		if c := CandidateOf(answer, in.Spoke); c != nil {
			freeWhileNotReady = c.GetFree()
		} else if e := ExclusionOf(answer, in.Spoke); e != nil {
			freeWhileNotReady = e.GetFree()
		}
		g.Expect(freeWhileNotReady).To(Equal(max(0, min(onReady, u.Maximum-u.Used-u.Waiting))),
			"free %s units of %s at the hub while %s is not-ready (Machine status %s)", unhealthyType, in.Spoke, in.UnhealthyNode, usageWhileNotReady)
	}).WithTimeout(hubPropagation).WithPolling(poll).Should(Succeed())
	Expect(freeWhileNotReady).To(BeNumerically("<", freeBefore), "free %s units of %s: the units on %s still count", unhealthyType, in.Spoke, in.UnhealthyNode)
	AddReportEntry(fmt.Sprintf("capacity %s while %s is not-ready", unhealthyType, in.UnhealthyNode),
		fmt.Sprintf("free %d (before: %d); Machine status %s", freeWhileNotReady, freeBefore, usageWhileNotReady))

	By(fmt.Sprintf("%s is uncordoned: ready again, and so are the hub's answers", in.UnhealthyNode))
	setUnschedulable(ctx, false)
	Eventually(ctx, func(g Gomega) {
		expectPoolNode(g, ctx, spoke.Client, group, in.UnhealthyNode, *unhealthy, imperatorv1alpha1.NodePoolReady)
		expectPoolCondition(g, ctx, spoke.Client, in.MachineName, in.UnhealthyNode, imperatorv1alpha1.NodeConditionReady)
		g.Expect(countsString(hubNodeCounts(g, ctx, in.Env.Ctl, in.Spoke, group, unhealthyType))).To(Equal(unhealthyCountsBefore))
		answer, code, err := in.Env.Ctl.Capacity(ctx, unhealthyType)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(BeZero())
		g.Expect(CandidateOf(answer, in.Spoke).GetFree()).To(Equal(freeBefore))
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.MachineName}, m)).To(Succeed())
		g.Expect(StatusUsage(m, unhealthyType)).To(HaveField("Reserved", reservedBefore), "reserved %s units of Machine %s", unhealthyType, in.MachineName)
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
}

// reservedOnReadyNodes counts the reservation pods of group/typ bound to a
// node labelled node-pool=ready for the type: the units a guest, whose
// injected affinity asks for such a node, can take.
func reservedOnReadyNodes(g Gomega, ctx context.Context, c client.Client, namespace, group, typ string) int32 {
	nodes := &corev1.NodeList{}
	g.Expect(c.List(ctx, nodes, client.MatchingLabels{
		imperatorv1alpha1.NodePoolKey:            string(imperatorv1alpha1.NodePoolReady),
		imperatorv1alpha1.MachineTypeKeyFor(typ): group,
	})).To(Succeed())
	ready := map[string]bool{}
	for _, n := range nodes.Items {
		ready[n.Name] = true
	}
	var n int32
	for _, p := range boundPods(reservationPods(g, ctx, c, namespace, group, typ)) {
		if ready[p.Spec.NodeName] {
			n++
		}
	}
	return n
}

// shiftCounts moves one node from bucket from to bucket to in a countsString.
func shiftCounts(counts, from, to string) string {
	fields := strings.Fields(counts)
	for i, f := range fields {
		key, value, _ := strings.Cut(f, "=")
		n, _ := strconv.Atoi(value)
		switch key {
		case from:
			n--
		case to:
			n++
		}
		fields[i] = key + "=" + strconv.Itoa(n)
	}
	return strings.Join(fields, " ")
}

// CapacityInput configures CapacitySpec.
type CapacityInput struct {
	Env *Env
	// Type is the machine type asked for, Count the units, all in one cluster.
	Type  string
	Count int32
	// WantCluster is the only cluster with Count free units.
	WantCluster string
	// WantExcluded are clusters the answer must leave out, with the reason.
	WantExcluded map[string]queryv1.ExclusionReason
	// TooMany is a count no cluster can take.
	TooMany int32
}

// CapacitySpec is journey 5: `imperatorctl capacity TYPE --count N
// --same-cluster` picks the cluster that has room, says why it left the
// others out, and exits 1 when nothing fits.
func CapacitySpec(ctx context.Context, in CapacityInput) {
	ctl := in.Env.Ctl
	args := []string{in.Type, "--count", strconv.Itoa(int(in.Count)), "--same-cluster"}

	By(fmt.Sprintf("imperatorctl capacity %s", strings.Join(args, " ")))
	Eventually(ctx, func(g Gomega) {
		answer, code, err := ctl.Capacity(ctx, args...)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(BeZero(), "exit code of capacity %v: %v", args, answer)
		g.Expect(answer.GetSatisfiable()).To(BeTrue())
		g.Expect(CandidateNames(answer)).To(HaveExactElements(in.WantCluster), "candidates")
		best := answer.GetCandidates()[0]
		g.Expect(best.GetTake()).To(Equal(in.Count), "units placed in %s", best.GetCluster())
		g.Expect(best.GetFree()).To(BeNumerically(">=", in.Count))
		g.Expect(answer.GetPlaced()).To(Equal(in.Count))
		for cluster, reason := range in.WantExcluded {
			e := ExclusionOf(answer, cluster)
			g.Expect(e).NotTo(BeNil(), "%s is excluded", cluster)
			g.Expect(e.GetReason()).To(Equal(reason), "why %s is excluded: %s", cluster, e.GetMessage())
		}
	}).WithTimeout(joinTimeout).WithPolling(poll).Should(Succeed())

	By(fmt.Sprintf("%d units fit nowhere: capacity exits 1", in.TooMany))
	answer, code, err := ctl.Capacity(ctx, in.Type, "--count", strconv.Itoa(int(in.TooMany)), "--same-cluster")
	Expect(err).NotTo(HaveOccurred())
	Expect(code).To(Equal(1), "exit code when %d × %s fit nowhere", in.TooMany, in.Type)
	Expect(answer.GetSatisfiable()).To(BeFalse())
	Expect(CandidateNames(answer)).To(BeEmpty())
	Expect(ExclusionOf(answer, in.WantCluster).GetReason()).To(Equal(queryv1.ExclusionReason_EXCLUSION_REASON_NOT_ENOUGH))
}

// OfflineInput configures OfflineSpec.
type OfflineInput struct {
	Env   *Env
	Spoke string
	// MachineName is a Machine of the spoke whose figures the hub shows.
	MachineName string
	// Type and Count: a capacity question the spoke answers while online.
	Type  string
	Count int32
	// Node is a node of the Machine's pool that is cordoned while the agent
	// is down: the hub must show it not-ready once the agent is back.
	Node string
}

// OfflineSpec is journey 6: a spoke's agent stops; the hub marks the spoke
// offline within its grace period and leaves it out of capacity answers;
// when the agent is back the spoke is Available again with current figures.
func OfflineSpec(ctx context.Context, in OfflineInput) {
	if in.Env.Fleet == nil {
		Skip("the fleet's processes are not under the suite's control (E2E_FLEET)")
	}
	ctl := in.Env.Ctl
	spoke := in.Env.Spoke(in.Spoke)
	m := &imperatorv1alpha1.Machine{}
	Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.MachineName}, m)).To(Succeed())
	group := Group(m)
	entry := poolEntry(ctx, spoke.Client, m, in.Node)
	Expect(entry).NotTo(BeNil(), "%s is in the pool of %s", in.Node, m.Name)
	typ := entry.MachineType[0].Name
	capacityArgs := []string{in.Type, "--count", strconv.Itoa(int(in.Count)), "--same-cluster"}
	var countsBefore string
	Eventually(ctx, func(g Gomega) { countsBefore = countsString(hubNodeCounts(g, ctx, ctl, in.Spoke, group, typ)) }).
		WithTimeout(hubPropagation).WithPolling(poll).Should(Succeed())

	By(fmt.Sprintf("stopping the agent of %s", in.Spoke))
	Expect(in.Env.Fleet.StopAgent(in.Spoke)).To(Succeed())
	stopped := time.Now()
	DeferCleanup(func(ctx context.Context) { Expect(in.Env.Fleet.StartAgent(ctx, in.Spoke)).To(Succeed()) })

	By(fmt.Sprintf("the hub marks %s offline within its grace period (%s)", in.Spoke, in.Env.GracePeriod))
	Eventually(ctx, func(g Gomega) {
		resp, err := ctl.Clusters(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		c := ClusterNamed(resp, in.Spoke)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.GetState()).To(Equal(queryv1.ClusterState_CLUSTER_STATE_OFFLINE), "state of %s", in.Spoke)
		g.Expect(c.GetConnected()).To(BeFalse())
	}).WithTimeout(in.Env.GracePeriod + offlineSlack).WithPolling(poll).Should(Succeed())
	AddReportEntry("offline detection", fmt.Sprintf("%s offline %s after its agent stopped (grace period %s)",
		in.Spoke, time.Since(stopped).Round(time.Millisecond), in.Env.GracePeriod))

	By("its ManagedCluster is no longer available and the other spokes are unaffected")
	Eventually(ctx, func(g Gomega) {
		expectManagedCluster(g, ctx, in.Env.Hub.Client, in.Spoke, metav1.ConditionUnknown)
		resp, err := ctl.Clusters(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		for name := range in.Env.Spokes {
			if name != in.Spoke {
				g.Expect(ClusterNamed(resp, name).GetState()).To(Equal(queryv1.ClusterState_CLUSTER_STATE_AVAILABLE), "state of %s", name)
			}
		}
	}).WithTimeout(hubPropagation).WithPolling(poll).Should(Succeed())

	By("capacity answers leave it out as offline")
	answer, code, err := ctl.Capacity(ctx, capacityArgs...)
	Expect(err).NotTo(HaveOccurred())
	Expect(CandidateNames(answer)).NotTo(ContainElement(in.Spoke), "an offline spoke is no candidate")
	Expect(ExclusionOf(answer, in.Spoke).GetReason()).To(Equal(queryv1.ExclusionReason_EXCLUSION_REASON_OFFLINE))
	Expect(code == 0).To(Equal(answer.GetSatisfiable()), "exit code %d and satisfiable %t agree", code, answer.GetSatisfiable())

	By(fmt.Sprintf("%s changes while its agent is down: %s is cordoned", in.Spoke, in.Node))
	Expect(UpdateNode(ctx, spoke.Client, in.Node, func(n *corev1.Node) { n.Spec.Unschedulable = true })).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		Expect(UpdateNode(ctx, spoke.Client, in.Node, func(n *corev1.Node) { n.Spec.Unschedulable = false })).To(Succeed())
	})

	By(fmt.Sprintf("starting the agent of %s again", in.Spoke))
	restarted := time.Now()
	Expect(in.Env.Fleet.StartAgent(ctx, in.Spoke)).To(Succeed())
	Eventually(ctx, func(g Gomega) {
		resp, err := ctl.Clusters(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		c := ClusterNamed(resp, in.Spoke)
		g.Expect(c.GetState()).To(Equal(queryv1.ClusterState_CLUSTER_STATE_AVAILABLE), "state of %s", in.Spoke)
		g.Expect(c.GetConnected()).To(BeTrue())
		// The figures read before the stop are older than the restart by
		// the grace period at least. observedAt is the agent's instant on
		// the replica holding the spoke's stream; a replica that follows
		// the spoke through the hub cluster's API (the spoke streams to
		// another replica) reads it from its ClusterInventory's
		// status.observedAt, a metav1.Time kept in whole seconds, so the
		// figures of the new run may show the restart's second itself.
		g.Expect(c.GetObservedAt().AsTime()).To(BeTemporally(">=", restarted.Truncate(time.Second)), "figures observed after the restart (in whole seconds)")
		expectManagedCluster(g, ctx, in.Env.Hub.Client, in.Spoke, metav1.ConditionTrue)
	}).WithTimeout(joinTimeout).WithPolling(poll).Should(Succeed())

	By("the hub's figures are current: the node cordoned meanwhile is not-ready, usage matches the Machine")
	Eventually(ctx, func(g Gomega) {
		g.Expect(countsString(hubNodeCounts(g, ctx, ctl, in.Spoke, group, typ))).
			To(Equal(shiftCounts(countsBefore, "ready", "notReady")), "hub node counts of %s", typ)
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.MachineName}, m)).To(Succeed())
		expectHubMatchesMachine(g, ctx, ctl, in.Spoke, m)
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By(fmt.Sprintf("%s is uncordoned and %s takes capacity again", in.Node, in.Spoke))
	Expect(UpdateNode(ctx, spoke.Client, in.Node, func(n *corev1.Node) { n.Spec.Unschedulable = false })).To(Succeed())
	Eventually(ctx, func(g Gomega) {
		g.Expect(countsString(hubNodeCounts(g, ctx, ctl, in.Spoke, group, typ))).To(Equal(countsBefore), "hub node counts of %s", typ)
		answer, code, err := ctl.Capacity(ctx, capacityArgs...)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(BeZero())
		g.Expect(CandidateNames(answer)).To(ContainElement(in.Spoke), "%s is a candidate again", in.Spoke)
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
}

// HubRestartInput configures HubRestartSpec.
type HubRestartInput struct {
	Env    *Env
	Spokes []string
	// Type and Count: a capacity question whose answer must survive.
	Type        string
	Count       int32
	WantCluster string
}

// HubRestartSpec is journey 7: the hub restarts; the spokes reconnect by
// themselves, and the clusters, their usage and capacity answers are what
// they were before.
func HubRestartSpec(ctx context.Context, in HubRestartInput) {
	if in.Env.Fleet == nil {
		Skip("the fleet's processes are not under the suite's control (E2E_FLEET)")
	}
	ctl := in.Env.Ctl

	// The figures compared across the restart are taken once the hub shows
	// the spokes' own (their Machines' statuses): on two replicas, the
	// figures of a spoke streaming to the other replica reach this one
	// through the hub cluster's API, up to a persistence interval late, so
	// right after the previous journey (reservations growing back on a
	// node uncordoned) this replica may still show older ones, which the
	// restarted replica, reading the latest persisted inventory, rightly
	// no longer shows.
	By("every spoke is Available before the restart and the hub shows its figures")
	var before *queryv1.GetUsageResponse
	Eventually(ctx, func(g Gomega) {
		resp, err := ctl.Clusters(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		for _, name := range in.Spokes {
			g.Expect(ClusterNamed(resp, name).GetState()).To(Equal(queryv1.ClusterState_CLUSTER_STATE_AVAILABLE), "state of %s", name)
		}
		expectHubMatchesSpokes(g, ctx, in.Env, in.Spokes)
		before, err = ctl.Usage(ctx)
		g.Expect(err).NotTo(HaveOccurred())
	}).WithTimeout(joinTimeout).WithPolling(poll).Should(Succeed())
	Expect(usageTable(before)).NotTo(BeEmpty())
	tokensBefore, err := ctl.Tokens(ctx)
	Expect(err).NotTo(HaveOccurred())
	Expect(tokensBefore.GetTokens()).NotTo(BeEmpty())

	By("stopping the hub: imperatorctl says the hub is unreachable")
	Expect(in.Env.Fleet.StopHub()).To(Succeed())
	DeferCleanup(func(ctx context.Context) { Expect(in.Env.Fleet.StartHub(ctx)).To(Succeed()) })
	res, err := ctl.Run(ctx, "clusters")
	Expect(err).NotTo(HaveOccurred())
	Expect(res.ExitCode).To(Equal(3), "%s", res)

	By("starting the hub again: the spokes reconnect by themselves")
	restarted := time.Now()
	Expect(in.Env.Fleet.StartHub(ctx)).To(Succeed())
	Eventually(ctx, func(g Gomega) {
		resp, err := ctl.Clusters(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		for _, name := range in.Spokes {
			c := ClusterNamed(resp, name)
			g.Expect(c.GetState()).To(Equal(queryv1.ClusterState_CLUSTER_STATE_AVAILABLE), "state of %s", name)
			g.Expect(c.GetConnected()).To(BeTrue(), "%s connected", name)
		}
	}).WithTimeout(reconnectTimeout).WithPolling(poll).Should(Succeed())
	AddReportEntry("hub restart", fmt.Sprintf("every spoke Available again %s after the hub started", time.Since(restarted).Round(time.Millisecond)))

	By("nothing is lost: usage (the spokes' figures), ManagedClusters, tokens and capacity answers are as before")
	Eventually(ctx, func(g Gomega) {
		after, err := ctl.Usage(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(usageTable(after)).To(Equal(usageTable(before)))
		expectHubMatchesSpokes(g, ctx, in.Env, in.Spokes)
		for _, name := range in.Spokes {
			expectManagedCluster(g, ctx, in.Env.Hub.Client, name, metav1.ConditionTrue)
		}
		tokens, err := ctl.Tokens(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(tokenTable(tokens)).To(Equal(tokenTable(tokensBefore)), "the hub's bootstrap tokens")
		answer, code, err := ctl.Capacity(ctx, in.Type, "--count", strconv.Itoa(int(in.Count)), "--same-cluster")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(BeZero())
		g.Expect(CandidateNames(answer)).To(HaveExactElements(in.WantCluster), "candidates")
	}).WithTimeout(hubPropagation).WithPolling(poll).Should(Succeed())
}
