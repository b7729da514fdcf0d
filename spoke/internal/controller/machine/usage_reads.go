package machine

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// countUsage reads the pods of the Machine's group from the cache, through
// the machine-group index, and counts them per machine type of the spec. The
// nodes that reservation pods are bound to are read from the cache too, for
// their node-pool label, and so are the ready nodes of each type with guests
// at the gate, to tell which of them a node can take. typeGone are the
// guests at the slot gate whose machine type the Machine no longer offers
// (pods the injector did not admit are not told anything: they are no
// guests, and a write to each would let anyone make the agent write).
func (r *Reconciler) countUsage(ctx context.Context, c client.Client, machine *imperatorv1alpha1.Machine, group string) (_ map[string]*typeUsage, typeGone []*corev1.Pod, _ error) {
	pods := &corev1.PodList{}
	// The pods are only read: no need to copy every one out of the cache.
	if err := c.List(ctx, pods, client.MatchingFields{PodMachineGroupIndex: group}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, fmt.Errorf("listing pods of machine group %s: %w", group, err)
	}
	enabledByNamespace := map[string]bool{}
	var lookupErr error
	enabled := func(name string) bool {
		if v, ok := enabledByNamespace[name]; ok {
			return v
		}
		ns := &corev1.Namespace{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
			if !apierrors.IsNotFound(err) {
				lookupErr = errors.Join(lookupErr, fmt.Errorf("getting namespace %s: %w", name, err))
			}
			enabledByNamespace[name] = false
			return false
		}
		enabledByNamespace[name] = injectionEnabled(ns.Labels) && name != r.opts.Namespace
		return enabledByNamespace[name]
	}
	stateByNode := map[string]string{}
	nodeState := func(name string) string {
		if v, ok := stateByNode[name]; ok {
			return v
		}
		node := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			if !apierrors.IsNotFound(err) {
				lookupErr = errors.Join(lookupErr, fmt.Errorf("getting node %s: %w", name, err))
			}
			stateByNode[name] = nodeStateMissing
			return nodeStateMissing
		}
		stateByNode[name] = node.Labels[imperatorv1alpha1.NodePoolKey]
		return stateByNode[name]
	}
	// The ready nodes of a type are read once per reconcile, and only for a
	// type with guests at the gate.
	readyByType := map[string][]*corev1.Node{}
	readyNodes := func(name string) []*corev1.Node {
		nodes, ok := readyByType[name]
		if !ok {
			var err error
			if nodes, err = readyNodesOf(ctx, c, group, machine.MachineType(name)); err != nil {
				lookupErr = errors.Join(lookupErr, err)
			}
			readyByType[name] = nodes
		}
		return nodes
	}
	reservationSets, err := controlledReservationSets(ctx, c, r.opts.Namespace, group, machine)
	if err != nil {
		return nil, nil, err
	}
	available := make(map[string]int32, len(machine.Spec.MachineTypes))
	for _, t := range machine.Spec.MachineTypes {
		available[t.Name] = t.Available
	}
	usage := podCounts(pods.Items, group, r.opts.Namespace,
		lookups{enabled: enabled, nodeState: nodeState, readyNodes: readyNodes, reservationSets: reservationSets},
		available, time.Now().Add(-stuckReservationAfter))
	if lookupErr != nil {
		return nil, nil, lookupErr
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if _, offered := available[pod.Labels[imperatorv1alpha1.MachineTypeKey]]; !offered &&
			pod.Labels[imperatorv1alpha1.PodRoleKey] == string(imperatorv1alpha1.PodRoleGuest) &&
			pod.Labels[imperatorv1alpha1.MachineGroupKey] == group && active(pod) && gated(pod) && admittedGuest(pod) {
			typeGone = append(typeGone, pod)
		}
	}
	return usage, typeGone, nil
}
