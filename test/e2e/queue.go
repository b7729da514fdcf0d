package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

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

// QueueSpec is journey 3b: `available` is a hard cap. The guest Deployment
// of journey 3 is scaled past its type's available units: the extra guests
// stay Pending at the agent's slot scheduling gate, in line, each told its
// place; nothing else runs. The Machine and the hub count them as waiting and
// queued, `imperatorctl usage` shows them in its QUEUED column, and no unit
// is FREE while they wait. Scaled back, the line empties and the figures
// return to journey 3's.
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
	Expect(replicas).To(Equal(mt.Available), "journey 3's guests take every %s unit", typ)
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
		// Later journeys expect journey 3's guests, whatever happened here.
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

	By("scaled back, the line empties and the figures are journey 3's again")
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
