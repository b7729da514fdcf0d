package uninstall

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/reservation"
)

// AgentNameLabel and AgentName select the agent's pods (the Deployment
// imperator-spoke of the chart and of deploy/spoke).
const (
	AgentNameLabel = "app.kubernetes.io/name"
	AgentName      = "imperator-spoke"
)

// WaitingGuestMessage is the queue annotation a waiting guest is left with.
const WaitingGuestMessage = "Imperator was uninstalled from this cluster: nobody will remove the scheduling gate " +
	imperatorv1alpha1.SlotSchedulingGate + " and the node pool this guest was placed on is gone; " +
	"delete this pod (its Job or Deployment creates it again as an ordinary pod)"

// EventReason is the reason of the Warning event a waiting guest gets.
const EventReason = "ImperatorUninstalled"

// Options say where the agent ran.
type Options struct {
	// Namespace is the agent's namespace, holding its pods and the
	// reservation StatefulSets and Services.
	Namespace string
	// PollInterval is how often the agent's pods are looked for while
	// waiting for them to go; 0 is one second.
	PollInterval time.Duration
}

// Result counts what Run changed; a second run counts zeros.
type Result struct {
	Nodes                []string
	Finalizers           []string
	Reservations         []string
	WaitingGuests        []string
	MachineNodePoolsGone bool
}

// String is the summary the command prints.
func (r Result) String() string {
	var b strings.Builder
	line := func(what string, names []string) {
		if len(names) == 0 {
			_, _ = fmt.Fprintf(&b, "%s: none\n", what)
			return
		}
		_, _ = fmt.Fprintf(&b, "%s (%d): %s\n", what, len(names), strings.Join(names, ", "))
	}
	line("nodes released (labels, taints, annotation of imperator.tenzen-y.io/ removed)", r.Nodes)
	if r.MachineNodePoolsGone {
		b.WriteString("MachineNodePool finalizers: the MachineNodePool CRD is not served, nothing to do\n")
	} else {
		line("MachineNodePool finalizers removed", r.Finalizers)
	}
	line("reservation StatefulSets and Services deleted", r.Reservations)
	line("waiting guests left gated with a message (delete them; their owners create them again)", r.WaitingGuests)
	return b.String()
}

// Run waits until no pod of the agent is left in opts.Namespace (a running
// agent would put back what Run removes), then releases the nodes, removes
// the MachineNodePools' finalizer, deletes the reservations and marks the
// waiting guests. ctx bounds it all: its deadline is the command's
// --timeout. log receives a line per change.
func Run(ctx context.Context, c client.Client, opts Options, log io.Writer) (Result, error) {
	var res Result
	if opts.Namespace == "" {
		return res, errors.New("namespace: the agent's namespace is required")
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = time.Second
	}
	if err := waitAgentGone(ctx, c, opts, log); err != nil {
		return res, err
	}
	var errs []error
	var err error
	if res.Nodes, err = releaseNodes(ctx, c, log); err != nil {
		errs = append(errs, err)
	}
	if res.Finalizers, res.MachineNodePoolsGone, err = removeFinalizers(ctx, c, log); err != nil {
		errs = append(errs, err)
	}
	if res.Reservations, err = deleteReservations(ctx, c, opts.Namespace, log); err != nil {
		errs = append(errs, err)
	}
	if res.WaitingGuests, err = markWaitingGuests(ctx, c, opts.Namespace, log); err != nil {
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

// waitAgentGone polls the agent's pods until none is left. A failed list is
// retried until ctx ends (an API server under load may be slow to answer);
// then the error names the pods still there, or the last failure.
func waitAgentGone(ctx context.Context, c client.Client, opts Options, log io.Writer) error {
	var left []string
	var lastErr error
	announced := false
	err := wait.PollUntilContextCancel(ctx, opts.PollInterval, true, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(opts.Namespace), client.MatchingLabels{AgentNameLabel: AgentName}); err != nil {
			lastErr = fmt.Errorf("listing the agent's pods in %s: %w", opts.Namespace, err)
			return false, nil
		}
		lastErr = nil
		left = left[:0]
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				left = append(left, p.Name)
			}
		}
		if len(left) > 0 && !announced {
			_, _ = fmt.Fprintf(log, "waiting for the agent's pods to go: %s\n", strings.Join(left, ", "))
			announced = true
		}
		return len(left) == 0, nil
	})
	switch {
	case err == nil:
		return nil
	case len(left) > 0:
		return fmt.Errorf("the agent still runs in %s (pods %s): remove it first (helm uninstall, or kubectl delete -k of what you applied), or it puts back what this step removes",
			opts.Namespace, strings.Join(left, ", "))
	case lastErr != nil:
		return lastErr
	}
	return fmt.Errorf("waiting for the agent's pods in %s to go: %w", opts.Namespace, err)
}

// ours says whether a label, annotation or taint key is the agent's.
func ours(key string) bool { return strings.HasPrefix(key, imperatorv1alpha1.Prefix) }

// releaseNodes removes every label, annotation and taint of the prefix
// imperator.tenzen-y.io/ from every node: the node-pool controller writes
// only those keys (docs/contract.md) and nothing else writes them.
func releaseNodes(ctx context.Context, c client.Client, log io.Writer) ([]string, error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	var released []string
	var errs []error
	for i := range nodes.Items {
		name := nodes.Items[i].Name
		changed := false
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var node corev1.Node
			if err := c.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
				return client.IgnoreNotFound(err)
			}
			original := node.DeepCopy()
			changed = stripNode(&node)
			if !changed {
				return nil
			}
			return c.Patch(ctx, &node, client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{}))
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("releasing node %s: %w", name, err))
			continue
		}
		if changed {
			released = append(released, name)
			_, _ = fmt.Fprintf(log, "node %s: labels, taints and annotation of %s removed\n", name, imperatorv1alpha1.Prefix)
		}
	}
	return released, errors.Join(errs...)
}

// stripNode removes the agent's keys from node and says whether any was there.
func stripNode(node *corev1.Node) bool {
	changed := false
	for _, m := range []map[string]string{node.Labels, node.Annotations} {
		for key := range m {
			if ours(key) {
				delete(m, key)
				changed = true
			}
		}
	}
	taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool { return ours(t.Key) })
	if len(taints) != len(node.Spec.Taints) {
		node.Spec.Taints = taints
		changed = true
	}
	return changed
}

// removeFinalizers removes the node-pool controller's finalizer from every
// MachineNodePool. gone is true when the CRD is not served (deleted with
// crds.keep=false after its objects, or never installed).
func removeFinalizers(ctx context.Context, c client.Client, log io.Writer) (removed []string, gone bool, err error) {
	var pools imperatorv1alpha1.MachineNodePoolList
	if err := c.List(ctx, &pools); err != nil {
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return nil, true, nil
		}
		return nil, false, fmt.Errorf("listing MachineNodePools: %w", err)
	}
	var errs []error
	for i := range pools.Items {
		pool := &pools.Items[i]
		if !slices.Contains(pool.Finalizers, imperatorv1alpha1.NodePoolFinalizer) {
			continue
		}
		original := pool.DeepCopy()
		pool.Finalizers = slices.DeleteFunc(pool.Finalizers, func(f string) bool { return f == imperatorv1alpha1.NodePoolFinalizer })
		if err := c.Patch(ctx, pool, client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})); err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("removing the finalizer %s of MachineNodePool %s: %w", imperatorv1alpha1.NodePoolFinalizer, pool.Name, err))
			}
			continue
		}
		removed = append(removed, pool.Name)
		_, _ = fmt.Fprintf(log, "MachineNodePool %s: finalizer %s removed\n", pool.Name, imperatorv1alpha1.NodePoolFinalizer)
	}
	return removed, false, errors.Join(errs...)
}

// deleteReservations deletes the reservation StatefulSets and Services of
// namespace: their Machines (kept with the CRDs) own them, so without this
// their pods would keep holding the GPUs for nobody. The garbage collector
// deletes the StatefulSets' pods.
func deleteReservations(ctx context.Context, c client.Client, namespace string, log io.Writer) ([]string, error) {
	objs, err := reservation.Objects(ctx, c, namespace)
	if err != nil {
		return nil, err
	}
	var deleted []string
	var errs []error
	for _, obj := range objs {
		if obj.GetDeletionTimestamp() != nil {
			continue
		}
		kind := "StatefulSet"
		if _, ok := obj.(*corev1.Service); ok {
			kind = "Service"
		}
		if err := c.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting reservation %s %s/%s: %w", kind, namespace, obj.GetName(), err))
			continue
		}
		deleted = append(deleted, kind+" "+obj.GetName())
		_, _ = fmt.Fprintf(log, "reservation %s %s/%s deleted\n", kind, namespace, obj.GetName())
	}
	return deleted, errors.Join(errs...)
}

// markWaitingGuests leaves every guest held at the slot gate gated, with
// WaitingGuestMessage in its queue annotation and a Warning event, once:
// a guest already carrying the message is not touched again.
func markWaitingGuests(ctx context.Context, c client.Client, namespace string, log io.Writer) ([]string, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.MatchingLabels{imperatorv1alpha1.PodRoleKey: string(imperatorv1alpha1.PodRoleGuest)}); err != nil {
		return nil, fmt.Errorf("listing guest pods: %w", err)
	}
	var marked []string
	var errs []error
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.DeletionTimestamp != nil || !gated(pod) || pod.Annotations[imperatorv1alpha1.QueueAnnotation] == WaitingGuestMessage {
			continue
		}
		original := pod.DeepCopy()
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[imperatorv1alpha1.QueueAnnotation] = WaitingGuestMessage
		if err := c.Patch(ctx, pod, client.MergeFrom(original)); err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("annotating waiting guest %s/%s: %w", pod.Namespace, pod.Name, err))
			}
			continue
		}
		if err := c.Create(ctx, guestEvent(pod, namespace)); err != nil {
			errs = append(errs, fmt.Errorf("recording an event on waiting guest %s/%s: %w", pod.Namespace, pod.Name, err))
		}
		marked = append(marked, pod.Namespace+"/"+pod.Name)
		_, _ = fmt.Fprintf(log, "waiting guest %s/%s: left gated, told why\n", pod.Namespace, pod.Name)
	}
	return marked, errors.Join(errs...)
}

func gated(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool {
		return g.Name == imperatorv1alpha1.SlotSchedulingGate
	})
}

// guestEvent is the Warning event `kubectl describe pod` shows.
func guestEvent(pod *corev1.Pod, agentNamespace string) *corev1.Event {
	now := metav1.NewTime(time.Now())
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: pod.Name + ".", Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: "v1", Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			ResourceVersion: pod.ResourceVersion,
		},
		Reason:              EventReason,
		Message:             WaitingGuestMessage,
		Type:                corev1.EventTypeWarning,
		Source:              corev1.EventSource{Component: "imperator-spoke-uninstall"},
		ReportingController: "imperator.tenzen-y.io/spoke-uninstall",
		ReportingInstance:   agentNamespace,
		Action:              "Uninstall",
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
	}
}
