package provisioningrequest

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// Reasons of a request's Failed condition that say who may book.
const (
	// ReasonNamespaceNotInjected: the request's namespace is not opted in
	// to guest injection, so its pods could never use a held unit.
	ReasonNamespaceNotInjected = "NamespaceNotInjected"
	// ReasonNamespaceCapReached: the request would take the units its
	// namespace's requests hold above --provisioning-max-units-per-namespace.
	ReasonNamespaceCapReached = "NamespaceCapReached"
)

// MaxUnitsFlag is the agent's flag that caps the units the
// ProvisioningRequests of one namespace hold at once.
const MaxUnitsFlag = "--provisioning-max-units-per-namespace"

// OptedIn refuses a request of namespace ns unless ns is opted in to guest
// injection as the pod injector's registration selects it: labelled
// imperator.tenzen-y.io/inject-resource=enabled (or the legacy
// imperator.tenzen.io/inject-resource=enabled), and neither kube-system nor
// the agent's namespace. Elsewhere the injector never stamps a pod with a
// hold's UID, so the units would be held for nobody.
func OptedIn(ns *corev1.Namespace, agentNamespace string) *Refusal {
	switch {
	case ns.Name == metav1.NamespaceSystem || (agentNamespace != "" && ns.Name == agentNamespace):
		return &Refusal{Reason: ReasonNamespaceNotInjected, Message: fmt.Sprintf(
			"namespace %s never gets guests injected (the pod injector leaves %s and the agent's namespace alone): its pods could not use held units",
			ns.Name, metav1.NamespaceSystem)}
	case ns.Labels[imperatorv1alpha1.InjectResourceKey] == imperatorv1alpha1.InjectResourceEnabled,
		ns.Labels[imperatorv1alpha1.LegacyInjectResourceKey] == imperatorv1alpha1.InjectResourceEnabled:
		return nil
	}
	return &Refusal{Reason: ReasonNamespaceNotInjected, Message: fmt.Sprintf(
		"namespace %s is not opted in to guest injection (label %s=%s): its pods could not use held units; label the namespace and create the request again",
		ns.Name, imperatorv1alpha1.InjectResourceKey, imperatorv1alpha1.InjectResourceEnabled)}
}

// WithinCap refuses bookings of the request uid of namespace when, with
// the units the namespace's other requests hold now, they would exceed
// maxUnits (0: no cap). holds are the CapacityHolds the Controller made for
// the namespace's requests; one counts while its booking is live: not
// deleted, not Failed, validUntil after now (a consumed booking ended: its
// units are with running pods, which Kueue's quota counts).
func WithinCap(namespace string, uid types.UID, bookings []Booking, holds []imperatorv1alpha1.CapacityHold, maxUnits int32, now time.Time) *Refusal {
	if maxUnits <= 0 {
		return nil
	}
	var asked, held int64
	for _, b := range bookings {
		asked += int64(b.Count)
	}
	var by []string
	for i := range holds {
		h := &holds[i]
		if h.Labels[RequestNamespaceLabel] != namespace || h.Labels[RequestUIDLabel] == string(uid) || !h.DeletionTimestamp.IsZero() ||
			!h.Spec.ValidUntil.After(now) || meta.IsStatusConditionTrue(h.Status.Conditions, imperatorv1alpha1.HoldConditionFailed) {
			continue
		}
		held += int64(h.Spec.Count)
		by = append(by, h.Annotations[RequestNameAnnotation])
	}
	if held+asked <= int64(maxUnits) {
		return nil
	}
	slices.Sort(by)
	by = slices.Compact(by)
	holders := "none"
	if len(by) > 0 {
		holders = strings.Join(by, ", ")
	}
	return &Refusal{Reason: ReasonNamespaceCapReached, Message: fmt.Sprintf(
		"namespace %s's ProvisioningRequests hold %d units (requests: %s) and this one asks %d more: above the cap of %d units per namespace (%s)",
		namespace, held, holders, asked, maxUnits, MaxUnitsFlag)}
}
