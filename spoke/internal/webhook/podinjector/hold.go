package podinjector

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

// heldName is the CapacityHold a guest being created in namespace asks
// for: its imperator.tenzen-y.io/hold label; else, for a consumer of a
// ProvisioningRequest of the class capacity-hold.imperator.tenzen-y.io,
// the hold the agent made for that request (of the guest's namespace) and
// the guest's machine type; else, for a consumer of the legacy class
// imperator.tenzen-y.io/capacity-hold, the hold its annotation names. ""
// when it asks for none. The source names the field for messages.
// forRequest is the request of the class whose hold it is ("" otherwise).
func heldName(pod *corev1.Pod, namespace string) (name, source, forRequest string) {
	if name := pod.Labels[imperatorv1alpha1.HoldKey]; name != "" {
		return name, "label " + imperatorv1alpha1.HoldKey, ""
	}
	request := pod.Annotations[imperatorv1alpha1.ConsumeProvisioningRequestAnnotation]
	if request == "" {
		return "", "", ""
	}
	source = "annotation " + imperatorv1alpha1.ConsumeProvisioningRequestAnnotation
	switch pod.Annotations[imperatorv1alpha1.ProvisioningClassNameAnnotation] {
	case imperatorv1alpha1.CapacityHoldProvisioningClass:
		group, typeName := pod.Labels[imperatorv1alpha1.MachineGroupKey], pod.Labels[imperatorv1alpha1.MachineTypeKey]
		return provisioningrequest.HoldName(namespace, request, group, typeName), source + ": ProvisioningRequest " + namespace + "/" + request, request
	case imperatorv1alpha1.LegacyCapacityHoldProvisioningClass:
		return request, source, ""
	}
	return "", "", ""
}

// holdClaim resolves the hold a guest of namespace asks for into the UID
// the guest is stamped with (imperatorv1alpha1.HoldUIDAnnotation): a hold's
// name alone claims nothing, since names are no secret and a guest created
// before the hold must not count as its claim. It returns "" and no warning
// when the guest asks for no hold. A hold that does not exist is not an
// error (a Deployment whose hold ended keeps making pods): the guest waits
// in the ordinary line, and the warning tells the user who created it. A
// hold of another machine group or type, or whose namespaces do not allow
// the guest's, denies the guest. A hold the cache does not show is read
// through live, when given (nil: the cache alone decides).
func holdClaim(ctx context.Context, cache, live client.Reader, pod *corev1.Pod, namespace string) (uid, warning string, err error) {
	name, source, forRequest := heldName(pod, namespace)
	if name == "" {
		return "", "", nil
	}
	hold := &imperatorv1alpha1.CapacityHold{}
	err = cache.Get(ctx, client.ObjectKey{Name: name}, hold)
	if apierrors.IsNotFound(err) && live != nil {
		err = live.Get(ctx, client.ObjectKey{Name: name}, hold)
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Sprintf("CapacityHold %q (%s) does not exist: this guest claims no hold and waits in the ordinary line", name, source), nil
		}
		return "", "", fmt.Errorf("getting CapacityHold %s: %w", name, err)
	}
	if forRequest != "" && !provisioningrequest.MadeFor(hold, namespace, forRequest) {
		// A hold someone else named as the agent names the request's: it
		// neither serves nor denies the request's pods.
		return "", fmt.Sprintf("CapacityHold %q (%s) was not made for that request: this guest claims no hold and waits in the ordinary line", name, source), nil
	}
	group, typeName := pod.Labels[imperatorv1alpha1.MachineGroupKey], pod.Labels[imperatorv1alpha1.MachineTypeKey]
	if hold.Spec.MachineGroup != group || hold.Spec.MachineType != typeName {
		return "", "", denied("%s: CapacityHold %q holds %s of machine group %q, not %s of %q: label the guest with the hold's machine group and type, "+
			"or claim a hold of its own", source, name, hold.Spec.MachineType, hold.Spec.MachineGroup, typeName, group)
	}
	if !capacityhold.Allows(hold, namespace) {
		return "", "", denied("%s: CapacityHold %q does not allow guests of namespace %q (spec.namespaces: %v)",
			source, name, namespace, hold.Spec.Namespaces)
	}
	return string(hold.UID), "", nil
}
