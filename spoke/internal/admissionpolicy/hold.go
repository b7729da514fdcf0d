package admissionpolicy

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/controller/capacityhold"
	"github.com/imperator-federation/imperator/spoke/internal/controller/provisioningrequest"
)

// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=capacityholds,verbs=get;list;watch

// heldName is the CapacityHold a guest asks for, as the injector reads it
// (podinjector's heldName): its imperator.tenzen-y.io/hold label; else,
// for a consumer of a ProvisioningRequest of the class
// capacity-hold.imperator.tenzen-y.io, the hold the agent made for that
// request and the guest's machine type (forRequest names the request); else,
// for the legacy class, the hold its annotation names. "" when none.
func heldName(pod *corev1.Pod) (name, forRequest string) {
	if name := pod.Labels[imperatorv1alpha1.HoldKey]; name != "" {
		return name, ""
	}
	request := pod.Annotations[imperatorv1alpha1.ConsumeProvisioningRequestAnnotation]
	if request == "" {
		return "", ""
	}
	switch pod.Annotations[imperatorv1alpha1.ProvisioningClassNameAnnotation] {
	case imperatorv1alpha1.CapacityHoldProvisioningClass:
		group, typeName := pod.Labels[imperatorv1alpha1.MachineGroupKey], pod.Labels[imperatorv1alpha1.MachineTypeKey]
		return provisioningrequest.HoldName(pod.Namespace, request, group, typeName), request
	case imperatorv1alpha1.LegacyCapacityHoldProvisioningClass:
		return request, ""
	}
	return "", ""
}

// HoldClaim is the UID of the CapacityHold a guest admitted by the
// injection policy claims, which FirstSight stamps as the injector's
// webhook stamps it at admission: the hold its name resolves to (read
// through live when cache does not show it; live may be nil), of the
// guest's machine group and type, allowing its namespace, made for the
// ProvisioningRequest the guest consumes when it names one that way, and
// created before the guest. The webhook sees the hold exist while it
// admits the guest; the agent stamps afterwards and can only compare
// creation timestamps, which have one-second resolution, so a guest of
// the hold's own second claims nothing here: it could have been created
// before the hold (stricter than the webhook, never looser). Where the
// webhook refuses the guest (another group or type, a namespace the hold
// does not allow) the guest, already admitted, claims nothing and waits in
// the ordinary line. "" and no error when the guest claims no hold; an
// error only when the hold could not be read.
func HoldClaim(ctx context.Context, cache, live client.Reader, pod *corev1.Pod) (string, error) {
	name, forRequest := heldName(pod)
	if name == "" {
		return "", nil
	}
	hold := &imperatorv1alpha1.CapacityHold{}
	err := cache.Get(ctx, client.ObjectKey{Name: name}, hold)
	if apierrors.IsNotFound(err) && live != nil {
		err = live.Get(ctx, client.ObjectKey{Name: name}, hold)
	}
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("getting CapacityHold %s: %w", name, err)
	}
	if !ClaimsHold(hold, pod, forRequest) {
		return "", nil
	}
	return string(hold.UID), nil
}

// ClaimsHold is HoldClaim's decision once the hold is read.
func ClaimsHold(hold *imperatorv1alpha1.CapacityHold, pod *corev1.Pod, forRequest string) bool {
	switch {
	case !hold.DeletionTimestamp.IsZero():
		return false
	case forRequest != "" && !provisioningrequest.MadeFor(hold, pod.Namespace, forRequest):
		return false
	case hold.Spec.MachineGroup != pod.Labels[imperatorv1alpha1.MachineGroupKey] ||
		hold.Spec.MachineType != pod.Labels[imperatorv1alpha1.MachineTypeKey]:
		return false
	case !capacityhold.Allows(hold, pod.Namespace):
		return false
	}
	return hold.CreationTimestamp.Before(&pod.CreationTimestamp)
}
