package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// why explains a guest from its spoke cluster's API: the hub sees machine
// types and counts, never pods (a spoke reports no pod, by design: the hub
// stays small and a pod's namespace is its team's business), so the truth
// of one pod (its gate, its place in line, its gang, its hold) is on the
// pod and on the Machine and CapacityHold it names, which the agent keeps
// up to date. The command reads them with the user's own kubeconfig of that
// cluster, so it shows what RBAC lets the user read there and nothing more.
// With --cluster it adds the hub's figures for the type in that cluster.

// guestExplanation is what why found.
type guestExplanation struct {
	pod     *corev1.Pod
	machine *imperatorv1alpha1.Machine
	// machineErr says why the Machine could not be read.
	machineErr error
	hold       *imperatorv1alpha1.CapacityHold
	holdErr    error
	hub        *queryv1.ClusterUsage
	hubErr     error
}

func (p *program) whyCommand() *cobra.Command {
	var spokeKubeconfig, spokeContext, namespace, cluster string
	cmd := &cobra.Command{
		Use:   "why POD [-n NAMESPACE] [--spoke-kubeconfig FILE] [--spoke-context CONTEXT] [--cluster NAME]",
		Short: "Explain why a guest pod waits (its place at the gate, its gang, its hold) or how it was let through",
		Long: `Why reads a guest pod from its spoke cluster, with your kubeconfig of that
cluster (--spoke-kubeconfig, default $KUBECONFIG or ~/.kube/config, and
--spoke-context), and explains in plain words what the agent wrote on it: its
machine type, whether it waits at the slot gate and its place in line, when
it was admitted, its gang and its size, the capacity hold it claims (name
and state), and the type's units on the cluster. The hub sees no pods: with
--cluster NAME the hub's figures for the type in that cluster are added
(then the hub connection flags apply).`,
		Example: `  imperatorctl why trainer-0 -n ml-research --spoke-context spoke-a
  imperatorctl why trainer-0 -n ml-research --spoke-context spoke-a --cluster spoke-a`,
	}
	fs := cmd.Flags()
	fs.StringVarP(&namespace, "namespace", "n", "", "Namespace of the pod (default: the spoke context's namespace, else default).")
	fs.StringVar(&spokeKubeconfig, "spoke-kubeconfig", "", "Kubeconfig of the spoke cluster the pod runs in (default: $KUBECONFIG, ~/.kube/config).")
	fs.StringVar(&spokeContext, "spoke-context", "", "Context of --spoke-kubeconfig (default: its current-context).")
	fs.StringVar(&cluster, "cluster", "", "Also show the hub's figures for the pod's type in this cluster (the spoke's name at the hub).")
	_ = cmd.RegisterFlagCompletionFunc("cluster", p.completeOneCluster)
	return p.leaf(cmd, subcommand{
		offline:          func() bool { return cluster == "" },
		mayFailToConnect: true,
		validate: func(c *command) error {
			if len(c.args) != 1 {
				return fail(ExitUsage, "usage: imperatorctl why POD [-n NAMESPACE]")
			}
			if msgs := validation.IsDNS1123Subdomain(c.args[0]); len(msgs) > 0 {
				return fail(ExitUsage, "pod name %q: %s", c.args[0], strings.Join(msgs, "; "))
			}
			if namespace != "" {
				if msgs := validation.IsDNS1123Label(namespace); len(msgs) > 0 {
					return fail(ExitUsage, "--namespace %q: %s", namespace, strings.Join(msgs, "; "))
				}
			}
			if c.printer.structured() {
				return fail(ExitUsage, "why prints an explanation for people: --output %s is not offered (kubectl get pod -o %s shows the pod)", c.g.output, c.g.output)
			}
			return nil
		},
		run: func(c *command) error {
			loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
				&clientcmd.ClientConfigLoadingRules{ExplicitPath: spokeKubeconfig, Precedence: clientcmd.NewDefaultClientConfigLoadingRules().Precedence},
				&clientcmd.ConfigOverrides{CurrentContext: spokeContext})
			cfg, err := loader.ClientConfig()
			if err != nil {
				return fail(ExitUsage, "spoke kubeconfig: %v", err)
			}
			ns := namespace
			if ns == "" {
				if ns, _, err = loader.Namespace(); err != nil || ns == "" {
					ns = metav1.NamespaceDefault
				}
			}
			ctx, cancel := c.unary()
			defer cancel()
			e, err := explainGuest(ctx, cfg, ns, c.args[0])
			if err != nil {
				return err
			}
			if cluster != "" && c.client != nil {
				e.hub, e.hubErr = hubUsage(ctx, c.client, cluster)
			} else if cluster != "" {
				e.hubErr = c.connectErr
			}
			c.printer.explain(e, cluster)
			return nil
		},
	})
}

// explainGuest reads the pod, and the Machine and CapacityHold it names,
// through cfg.
func explainGuest(ctx context.Context, cfg *rest.Config, namespace, name string) (*guestExplanation, error) {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fail(ExitUsage, "spoke kubeconfig: %v", err)
	}
	pod, err := kube.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, fail(ExitFailure, "pod %s/%s not found on the spoke cluster %s", namespace, name, cfg.Host)
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return nil, fail(ExitDenied, "the spoke cluster %s refused to show pod %s/%s: %v", cfg.Host, namespace, name, apierrors.ReasonForError(err))
	case err != nil:
		return nil, fail(ExitUnreachable, "reading pod %s/%s from the spoke cluster %s: %v", namespace, name, cfg.Host, err)
	}
	e := &guestExplanation{pod: pod}
	if pod.Labels[imperatorv1alpha1.PodRoleKey] != string(imperatorv1alpha1.PodRoleGuest) {
		return e, nil
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fail(ExitUsage, "spoke kubeconfig: %v", err)
	}
	if group := pod.Labels[imperatorv1alpha1.MachineGroupKey]; group != "" {
		e.machine = &imperatorv1alpha1.Machine{}
		e.machineErr = getInto(ctx, dyn, "machines", "", group, e.machine)
	}
	if uid := pod.Annotations[imperatorv1alpha1.HoldUIDAnnotation]; uid != "" {
		e.hold, e.holdErr = holdByUID(ctx, dyn, uid, pod.Labels[imperatorv1alpha1.HoldKey])
	}
	return e, nil
}

// getInto reads the cluster-scoped object name of resource into out.
func getInto(ctx context.Context, dyn dynamic.Interface, resource, namespace, name string, out runtime.Object) error {
	u, err := dyn.Resource(imperatorv1alpha1.GroupVersion.WithResource(resource)).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out)
}

// holdByUID finds the CapacityHold of uid: by its name first (the guest's
// hold label), else among all.
func holdByUID(ctx context.Context, dyn dynamic.Interface, uid, name string) (*imperatorv1alpha1.CapacityHold, error) {
	if name != "" {
		h := &imperatorv1alpha1.CapacityHold{}
		if err := getInto(ctx, dyn, "capacityholds", "", name, h); err == nil && string(h.UID) == uid {
			return h, nil
		}
	}
	list, err := dyn.Resource(imperatorv1alpha1.GroupVersion.WithResource("capacityholds")).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, u := range list.Items {
		if string(u.GetUID()) != uid {
			continue
		}
		h := &imperatorv1alpha1.CapacityHold{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, h); err != nil {
			return nil, err
		}
		return h, nil
	}
	return nil, nil
}

// hubUsage is the hub's usage of cluster.
func hubUsage(ctx context.Context, q queryv1.QueryClient, cluster string) (*queryv1.ClusterUsage, error) {
	resp, err := q.GetUsage(ctx, &queryv1.GetUsageRequest{Cluster: cluster})
	if err != nil {
		return nil, err
	}
	for _, cu := range resp.GetClusters() {
		if cu.GetCluster() == cluster {
			return cu, nil
		}
	}
	return nil, fmt.Errorf("the hub knows no cluster %s", cluster)
}

// explain writes e in plain words. It is long on purpose: one report read
// top to bottom, a few lines for each thing that can hold a guest back (the
// gate, the queue, the gang, the hold, the type's figures, the hub), in the
// order a user asks about them.
func (p *printer) explain(e *guestExplanation, cluster string) {
	pod := e.pod
	line := func(format string, args ...any) {
		t := &table{}
		t.add(fmt.Sprintf(format, args...))
		p.printf("%s\n", t.rows[0][0])
	}
	line("Pod %s/%s", pod.Namespace, pod.Name)
	if pod.Labels[imperatorv1alpha1.PodRoleKey] != string(imperatorv1alpha1.PodRoleGuest) {
		line("  is not a guest of Imperator (no label %s=%s): the agent does not queue it; kubectl describe pod says why it waits.",
			imperatorv1alpha1.PodRoleKey, imperatorv1alpha1.PodRoleGuest)
		return
	}
	group, typ := pod.Labels[imperatorv1alpha1.MachineGroupKey], pod.Labels[imperatorv1alpha1.MachineTypeKey]
	line("  Machine type: %s/%s", or(group, "<no group label>"), or(typ, "<no type label>"))
	if at := pod.Annotations[imperatorv1alpha1.AdmittedAtAnnotation]; at != "" {
		if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
			line("  Admitted:     %s (%s ago); the queue goes by this time, oldest first", at, p.age(timestamppb.New(t)))
		} else {
			line("  Admitted:     %q (not an RFC 3339 time: the queue cannot order it)", at)
		}
	} else {
		line("  Admitted:     no %s annotation: the injector did not admit it (is injection on in its namespace?)", imperatorv1alpha1.AdmittedAtAnnotation)
	}
	gated := slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == imperatorv1alpha1.SlotSchedulingGate })
	switch {
	case gated:
		line("  Gate:         waits at the slot gate %s: the agent lets guests through oldest first when a unit of the type is free", imperatorv1alpha1.SlotSchedulingGate)
		if note := pod.Annotations[imperatorv1alpha1.QueueAnnotation]; note != "" {
			line("  In line:      %s", note)
		} else {
			line("  In line:      the agent has not written its place yet (annotation %s)", imperatorv1alpha1.QueueAnnotation)
		}
	case pod.Spec.NodeName != "":
		line("  Gate:         let through; runs on node %s (%s)", pod.Spec.NodeName, pod.Status.Phase)
	default:
		line("  Gate:         let through; waits for the scheduler%s", unschedulable(pod))
	}
	gang, size := gangOf(pod)
	if gang != "" {
		line("  Gang:         %s; passes the gate whole, once %s members fit in the type's free units at once", gang, or(size, "<size unknown: the gang cannot pass>"))
	}
	if name := pod.Labels[imperatorv1alpha1.HoldKey]; name != "" || pod.Annotations[imperatorv1alpha1.HoldUIDAnnotation] != "" {
		uid := pod.Annotations[imperatorv1alpha1.HoldUIDAnnotation]
		switch {
		case uid == "":
			line("  Hold:         asks for hold %s, but claims none: no %s annotation (the hold did not exist, was of another type or namespace when the pod was created)", name, imperatorv1alpha1.HoldUIDAnnotation)
		case e.holdErr != nil:
			line("  Hold:         claims the hold of UID %s; it could not be read: %v", uid, e.holdErr)
		case e.hold == nil:
			line("  Hold:         claims the hold of UID %s, which no longer exists: the guest waits in the ordinary line", uid)
		default:
			line("  Hold:         claims hold %s (%s): %s", e.hold.Name, holdState(e.hold), fmt.Sprintf("%d held, %d claimed of %d, until %s",
				e.hold.Status.Held, e.hold.Status.Claimed, e.hold.Spec.Count, e.hold.Spec.ValidUntil.UTC().Format(time.RFC3339)))
		}
	}
	switch {
	case e.machine == nil:
	case e.machineErr != nil:
		line("  Units:        Machine %s could not be read: %v", group, e.machineErr)
	default:
		found := false
		for _, am := range e.machine.Status.AvailableMachines {
			if am.Name != typ {
				continue
			}
			found = true
			u := am.Usage
			line("  Units:        %d of %d in use on this cluster (reserved %d, waiting %d, queued %d, held %d)", u.Used, u.Maximum, u.Reserved, u.Waiting, u.Queued, u.Held)
		}
		if !found {
			line("  Units:        Machine %s offers no type %s: the guest cannot pass", group, typ)
		}
	}
	if cluster == "" {
		return
	}
	if e.hubErr != nil {
		line("  Hub:          could not ask the hub about cluster %s: %v", cluster, e.hubErr)
		return
	}
	for _, u := range e.hub.GetTypes() {
		if u.GetType() == typ && (group == "" || u.GetGroup() == group) {
			line("  Hub:          cluster %s is %s; the hub counts %d free of %d for %s/%s (observed %s ago)", cluster,
				enumName(e.hub.GetState().String(), statePrefix), u.GetFree(), u.GetMaximum(), u.GetGroup(), u.GetType(), p.age(e.hub.GetObservedAt()))
			return
		}
	}
	line("  Hub:          the hub knows no type %s/%s in cluster %s", group, typ, cluster)
}

func or(s, dflt string) string {
	if s == "" {
		return dflt
	}
	return s
}

// gangOf names the pod's gang (by the first key that makes one) and its
// size as written on the pod.
func gangOf(pod *corev1.Pod) (string, string) {
	size := pod.Annotations[imperatorv1alpha1.GangSizeAnnotation]
	switch {
	case pod.Labels[imperatorv1alpha1.GangKey] != "":
		return "gang " + pod.Labels[imperatorv1alpha1.GangKey], size
	case pod.Labels[imperatorv1alpha1.CoschedulingPodGroupKey] != "":
		return "coscheduling PodGroup " + pod.Labels[imperatorv1alpha1.CoschedulingPodGroupKey], size
	case pod.Labels[imperatorv1alpha1.KueuePodGroupNameKey] != "":
		return "Kueue pod group " + pod.Labels[imperatorv1alpha1.KueuePodGroupNameKey], or(size, pod.Annotations[imperatorv1alpha1.KueuePodGroupTotalCountAnnotation])
	}
	return "", ""
}

// holdState is a CapacityHold's state in words, from its conditions.
func holdState(h *imperatorv1alpha1.CapacityHold) string {
	for _, t := range []string{imperatorv1alpha1.HoldConditionFailed, imperatorv1alpha1.HoldConditionBookingExpired, imperatorv1alpha1.HoldConditionCapacityRevoked} {
		if meta.IsStatusConditionTrue(h.Status.Conditions, t) {
			return t
		}
	}
	if meta.IsStatusConditionTrue(h.Status.Conditions, imperatorv1alpha1.HoldConditionProvisioned) {
		return "Provisioned"
	}
	if meta.IsStatusConditionTrue(h.Status.Conditions, imperatorv1alpha1.HoldConditionAccepted) {
		return "Accepted"
	}
	return "Pending"
}

// unschedulable is the scheduler's reason, when it gave one.
func unschedulable(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
			return ": " + c.Message
		}
	}
	return ""
}
