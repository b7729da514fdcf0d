package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

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
	DeferCleanup(func(ctx SpecContext) {
		By(fmt.Sprintf("deleting the guest Deployment %s/%s the journey deployed", w.Deployment.Namespace, w.Deployment.Name))
		Expect(client.IgnoreNotFound(spoke.Client.Delete(ctx, w.Deployment.DeepCopy()))).To(Succeed())
		// Its pods go at once rather than after their 30 s grace period:
		// each round deletes those left, once their ReplicaSet is gone
		// too, with no grace (a shorter grace overrides a longer one).
		selector := client.MatchingLabels(w.Deployment.Spec.Selector.MatchLabels)
		Eventually(ctx, func(g Gomega) {
			sets := &appsv1.ReplicaSetList{}
			g.Expect(spoke.Client.List(ctx, sets, client.InNamespace(w.Deployment.Namespace), selector)).To(Succeed())
			pods := &corev1.PodList{}
			g.Expect(spoke.Client.List(ctx, pods, client.InNamespace(w.Deployment.Namespace), selector)).To(Succeed())
			if len(sets.Items) == 0 {
				for i := range pods.Items {
					g.Expect(client.IgnoreNotFound(spoke.Client.Delete(ctx, &pods.Items[i], client.GracePeriodSeconds(0)))).To(Succeed())
				}
			}
			g.Expect(sets.Items).To(BeEmpty(), "ReplicaSets of the guest Deployment left")
			g.Expect(pods.Items).To(BeEmpty(), "guest pods left: %v", describePods(pods.Items))
		}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
	})

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

// QueueInput configures QueueSpec.
type QueueInput struct {
	Env   *Env
	Spoke string
	// GuestFile is the guest workload of GuestSpec, already running with all
	// of its replicas.
	GuestFile   string
	MachineName string
	// Beyond is how many guests the Deployment is scaled to beyond the type's
	// available units.
	Beyond int32
}

// QueueSpec is the second half of journey 3: `available` is a hard cap. The
// guest Deployment GuestSpec deployed is scaled past its type's available
// units: the extra guests
// stay Pending at the agent's slot scheduling gate, in line, each told its
// place; nothing else runs. The Machine and the hub count them as waiting and
// queued, `imperatorctl usage` shows them in its QUEUED column, and no unit
// is FREE while they wait. Scaled back, the line empties and the figures
// return to GuestSpec's.
func QueueSpec(ctx context.Context, in QueueInput) {
	spoke := in.Env.Spoke(in.Spoke)
	w, err := ReadGuestWorkload(in.GuestFile)
	Expect(err).NotTo(HaveOccurred())
	labels := w.Deployment.Spec.Template.Labels
	group, typ := labels[imperatorv1alpha1.MachineGroupKey], labels[imperatorv1alpha1.MachineTypeKey]
	replicas := ptr.Deref(w.Deployment.Spec.Replicas, 1)

	m := &imperatorv1alpha1.Machine{}
	Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.MachineName}, m)).To(Succeed())
	mt := m.MachineType(typ)
	Expect(mt).NotTo(BeNil(), "Machine %s has machine type %s", m.Name, typ)
	Expect(replicas).To(Equal(mt.Available), "GuestSpec's guests take every %s unit", typ)
	queued := in.Beyond
	scaled := mt.Available + queued

	guests := func(g Gomega) []corev1.Pod {
		pods := &corev1.PodList{}
		g.Expect(spoke.Client.List(ctx, pods, client.InNamespace(w.Deployment.Namespace), client.MatchingLabels(w.Deployment.Spec.Selector.MatchLabels))).To(Succeed())
		return slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
	}
	scale := func(n int32) {
		GinkgoHelper()
		d := &appsv1.Deployment{}
		Expect(spoke.Client.Get(ctx, client.ObjectKeyFromObject(w.Deployment), d)).To(Succeed())
		patch := client.MergeFrom(d.DeepCopy())
		d.Spec.Replicas = ptr.To(n)
		Expect(spoke.Client.Patch(ctx, d, patch)).To(Succeed())
	}

	By(fmt.Sprintf("scaling %s/%s to %d guests for %d %s units", w.Deployment.Namespace, w.Deployment.Name, scaled, mt.Available, typ))
	scale(scaled)
	DeferCleanup(func(ctx SpecContext) {
		// GuestSpec's figures again, whatever happened here, before its own
		// clean-up deletes the guests.
		d := &appsv1.Deployment{}
		if err := spoke.Client.Get(ctx, client.ObjectKeyFromObject(w.Deployment), d); err == nil && ptr.Deref(d.Spec.Replicas, 1) != replicas {
			patch := client.MergeFrom(d.DeepCopy())
			d.Spec.Replicas = ptr.To(replicas)
			Expect(spoke.Client.Patch(ctx, d, patch)).To(Succeed())
		}
	})

	By("the guests beyond available wait at the slot gate, each told its place in line")
	Eventually(ctx, func(g Gomega) {
		pods := guests(g)
		g.Expect(pods).To(HaveLen(int(scaled)), "guest pods: %v", describePods(pods))
		var running, gated []string
		for _, p := range pods {
			switch {
			case p.Spec.NodeName != "":
				running = append(running, p.Name)
			case slices.ContainsFunc(p.Spec.SchedulingGates, func(gate corev1.PodSchedulingGate) bool {
				return gate.Name == imperatorv1alpha1.SlotSchedulingGate
			}):
				gated = append(gated, p.Name)
				g.Expect(p.Status.Conditions).To(ContainElement(And(
					HaveField("Type", corev1.PodScheduled), HaveField("Reason", corev1.PodReasonSchedulingGated))),
					"guest %s is SchedulingGated", p.Name)
			}
		}
		g.Expect(running).To(HaveLen(int(mt.Available)), "running guests (never more than available): %v", describePods(pods))
		g.Expect(gated).To(HaveLen(int(queued)), "guests at the slot gate: %v", describePods(pods))

		events := &corev1.EventList{}
		g.Expect(spoke.Client.List(ctx, events, client.InNamespace(w.Deployment.Namespace))).To(Succeed())
		for _, name := range gated {
			g.Expect(events.Items).To(ContainElement(And(
				HaveField("InvolvedObject.Name", name), HaveField("Reason", "Queued"),
				HaveField("Message", ContainSubstring("waiting for "+typ)), HaveField("Message", ContainSubstring("in line")))),
				"guest %s is told its place in line", name)
		}
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	wantFigures := func(waiting, queued int32) string {
		return fmt.Sprintf("%s waiting=%d queued=%d", usageString(mt.Available, 0, mt.Available, waiting), waiting, queued)
	}
	By("the Machine counts them as waiting and queued")
	Eventually(ctx, func(g Gomega) {
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.MachineName}, m)).To(Succeed())
		u := StatusUsage(m, typ)
		g.Expect(u).NotTo(BeNil())
		g.Expect(fmt.Sprintf("%s waiting=%d queued=%d", statusUsageString(u), u.Waiting, u.Queued)).To(Equal(wantFigures(queued, queued)),
			"status usage of %s in Machine %s", typ, m.Name)
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By("the hub shows them QUEUED, and no unit FREE while they wait")
	Eventually(ctx, func(g Gomega) {
		usage, err := in.Env.Ctl.Usage(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		hub := UsageOf(usage, in.Spoke, group, typ)
		g.Expect(hub).NotTo(BeNil())
		g.Expect(fmt.Sprintf("%s waiting=%d queued=%d", hubUsageString(hub), hub.GetWaiting(), hub.GetQueued())).To(Equal(wantFigures(queued, queued)),
			"hub usage of %s %s/%s", in.Spoke, group, typ)
		g.Expect(hub.GetFree()).To(BeZero(), "hub free units of %s/%s", group, typ)
	}).WithTimeout(hubPropagation).WithPolling(poll).Should(Succeed())
	res, err := in.Env.Ctl.Run(ctx, "usage", "--cluster", in.Spoke)
	Expect(err).NotTo(HaveOccurred())
	Expect(res.ExitCode).To(BeZero(), res.String())
	Expect(tableCell(res.Stdout, []string{in.Spoke, "", group, typ}, "QUEUED")).To(Equal(fmt.Sprint(queued)), res.String())
	Expect(tableCell(res.Stdout, []string{in.Spoke, "", group, typ}, "FREE")).To(Equal("0"), res.String())
	AddReportEntry("imperatorctl usage while guests wait", res.Stdout)

	By("scaled back, the line empties and the figures are as before")
	scale(replicas)
	Eventually(ctx, func(g Gomega) {
		pods := guests(g)
		g.Expect(pods).To(HaveLen(int(replicas)), "guest pods: %v", describePods(pods))
		for _, p := range pods {
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "the guest that held the unit keeps running: %v", describePods(pods))
		}
		usage, err := in.Env.Ctl.Usage(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		hub := UsageOf(usage, in.Spoke, group, typ)
		g.Expect(fmt.Sprintf("%s waiting=%d queued=%d", hubUsageString(hub), hub.GetWaiting(), hub.GetQueued())).To(Equal(wantFigures(0, 0)),
			"hub usage of %s %s/%s", in.Spoke, group, typ)
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
}

// tableCell is the cell under column of the first row of an imperatorctl
// table whose leading cells match key ("" matches any cell).
func tableCell(table string, key []string, column string) string {
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) < 2 {
		return ""
	}
	idx := slices.Index(strings.Fields(lines[0]), column)
	if idx < 0 {
		return ""
	}
	for _, line := range lines[1:] {
		cells := strings.Fields(line)
		if len(cells) <= idx || len(cells) < len(key) {
			continue
		}
		match := true
		for i, k := range key {
			if k != "" && cells[i] != k {
				match = false
			}
		}
		if match {
			return cells[idx]
		}
	}
	return ""
}
