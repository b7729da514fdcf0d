// Package reservation finds the reservation objects of a namespace: the
// StatefulSets and Services labelled pod-role=reservation, the agent's
// (<machine-type>-<machine-group>, controlled by their Machine) and, during
// a migration, the original Imperator's (<machine-group>-<machine-type>),
// which carry the same labels. The Machine controller (pruning what its
// Machine no longer serves), package migrate (detaching the original's) and
// package uninstall (deleting them all) each list them here; what each does
// with them stays with it. It imports only the API.
package reservation

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// Selector matches the reservation objects of every machine group:
// StatefulSets, Services and pods labelled pod-role=reservation.
func Selector() client.MatchingLabels {
	return client.MatchingLabels{imperatorv1alpha1.PodRoleKey: string(imperatorv1alpha1.PodRoleReservation)}
}

// Objects lists the reservation StatefulSets and Services of namespace, of
// every machine group, StatefulSets first, each pointing into its list. opts
// apply to both lists: client.UnsafeDisableDeepCopy for a caller that only
// reads what a cache returns.
func Objects(ctx context.Context, c client.Reader, namespace string, opts ...client.ListOption) ([]client.Object, error) {
	// Ours last: a caller's options cannot widen the list beyond namespace
	// and the reservation label.
	opts = append(append([]client.ListOption(nil), opts...), client.InNamespace(namespace), Selector())
	statefulSets := &appsv1.StatefulSetList{}
	if err := c.List(ctx, statefulSets, opts...); err != nil {
		return nil, fmt.Errorf("listing reservation StatefulSets in %s: %w", namespace, err)
	}
	services := &corev1.ServiceList{}
	if err := c.List(ctx, services, opts...); err != nil {
		return nil, fmt.Errorf("listing reservation Services in %s: %w", namespace, err)
	}
	objects := make([]client.Object, 0, len(statefulSets.Items)+len(services.Items))
	for i := range statefulSets.Items {
		objects = append(objects, &statefulSets.Items[i])
	}
	for i := range services.Items {
		objects = append(objects, &services.Items[i])
	}
	return objects, nil
}
