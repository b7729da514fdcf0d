package provisioningrequest

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/controller/capacityhold"
)

// The CapacityHolds the Controller makes for requests: finding a request's
// (by its UID label), creating them, ending a consumed booking and
// releasing them (a delete with a UID precondition). Reconcile, in
// controller.go, decides which.

// createHold creates the hold name for booking b of pr: for pr's namespace
// only, labelled with pr's namespace, name and UID. It returns nil when a
// hold of that name made for a request of pr's name exists already, and a
// refusal when a hold of that name was not made for one (HoldNameTaken).
func (r *Controller) createHold(ctx context.Context, c client.Client, pr *ProvisioningRequest, name string, b Booking) (*imperatorv1alpha1.CapacityHold, *Refusal, error) {
	hold := &imperatorv1alpha1.CapacityHold{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels:      map[string]string{RequestNamespaceLabel: pr.Namespace, RequestUIDLabel: string(pr.UID)},
			Annotations: map[string]string{RequestNameAnnotation: pr.Name}},
		Spec: imperatorv1alpha1.CapacityHoldSpec{
			MachineGroup: b.MachineGroup,
			MachineType:  b.MachineType,
			Count:        b.Count,
			ValidUntil:   metav1.NewTime(r.now().Add(BookingDuration)),
			Namespaces:   []string{pr.Namespace},
		},
	}
	if err := c.Create(ctx, hold); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, nil, fmt.Errorf("creating CapacityHold %s for ProvisioningRequest %s: %w", name, klog.KObj(pr), err)
		}
		// Made by an earlier reconcile the cache does not show yet (its
		// event comes back here), or left by an earlier request of the
		// same name, which releaseStale deletes; or someone else's, whose
		// end no event of ours would tell (a fleet hold of that name).
		existing := &imperatorv1alpha1.CapacityHold{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, existing); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil, nil
			}
			return nil, nil, fmt.Errorf("getting CapacityHold %s for ProvisioningRequest %s: %w", name, klog.KObj(pr), err)
		}
		if !MadeFor(existing, pr.Namespace, pr.Name) {
			return nil, &Refusal{Reason: ReasonHoldNameTaken, Message: fmt.Sprintf(
				"CapacityHold %s, the name of this request's hold of %s/%s, is taken by a hold not made for it (fleet hold %q): recreate the request under another name",
				name, b.MachineGroup, b.MachineType, existing.Spec.FleetHold)}, nil
		}
		return nil, nil, nil
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Created a CapacityHold for a ProvisioningRequest", "provisioningRequest", klog.KObj(pr),
		"capacityHold", name, "machineGroup", b.MachineGroup, "machineType", b.MachineType, "count", b.Count)
	return hold, nil, nil
}

// holdsOf returns the holds made for pr (by its UID), by name.
func (r *Controller) holdsOf(ctx context.Context, c client.Client, pr *ProvisioningRequest) (map[string]*imperatorv1alpha1.CapacityHold, error) {
	list := &imperatorv1alpha1.CapacityHoldList{}
	if err := c.List(ctx, list, client.MatchingLabels{RequestUIDLabel: string(pr.UID)}); err != nil {
		return nil, fmt.Errorf("listing the CapacityHolds of ProvisioningRequest %s: %w", klog.KObj(pr), err)
	}
	holds := make(map[string]*imperatorv1alpha1.CapacityHold, len(list.Items))
	for i := range list.Items {
		holds[list.Items[i].Name] = &list.Items[i]
	}
	return holds, nil
}

// releaseStale deletes the holds made for a request of key that is not
// keep (the request's UID; "": every one, the request is gone).
func (r *Controller) releaseStale(ctx context.Context, c client.Client, key types.NamespacedName, keep types.UID) error {
	list := &imperatorv1alpha1.CapacityHoldList{}
	if err := c.List(ctx, list, client.MatchingLabels{RequestNamespaceLabel: key.Namespace}); err != nil {
		return fmt.Errorf("listing the CapacityHolds of ProvisioningRequest %s: %w", key, err)
	}
	var errs []error
	for i := range list.Items {
		hold := &list.Items[i]
		if hold.Annotations[RequestNameAnnotation] == key.Name && (keep == "" || hold.Labels[RequestUIDLabel] != string(keep)) {
			errs = append(errs, r.deleteHold(ctx, c, hold, "its ProvisioningRequest is gone"))
		}
	}
	return errors.Join(errs...)
}

// endConsumedBooking ends the booking of a hold every unit of which its
// guests claimed (validUntil moved to now), as Cluster Autoscaler's booking
// ends once the pods are scheduled: the claimed units stay with the pods
// until they finish and then go back to everyone, instead of being held
// again for the rest of the booking for pods that will not come (Kueue
// makes the Job's pods once).
func (r *Controller) endConsumedBooking(ctx context.Context, c client.Client, hold *imperatorv1alpha1.CapacityHold) error {
	now := r.now()
	if !hold.Spec.ValidUntil.After(now) || !hold.DeletionTimestamp.IsZero() {
		return nil
	}
	if hold.Status.Claimed < hold.Spec.Count {
		// Pods that finished before the Machine controller counted them
		// claimed the hold too: they carry its UID.
		claimants, err := r.claimants(ctx, c, hold)
		if err != nil || claimants < hold.Spec.Count {
			return err
		}
	}
	before := hold.DeepCopy()
	hold.Spec.ValidUntil = metav1.NewTime(now)
	if err := c.Patch(ctx, hold, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("ending the booking of CapacityHold %s: %w", hold.Name, err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Ended the booking of a CapacityHold whose units are all claimed", "capacityHold", klog.KObj(hold))
	return nil
}

// claimants counts the pods, in any phase, that claim hold
// (capacityhold.Claims): the guests of its group and type in the
// namespaces it allows, stamped with its UID, created no earlier than it.
func (r *Controller) claimants(ctx context.Context, c client.Client, hold *imperatorv1alpha1.CapacityHold) (int32, error) {
	var n int32
	for _, namespace := range hold.Spec.Namespaces {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{imperatorv1alpha1.MachineGroupKey: hold.Spec.MachineGroup,
			imperatorv1alpha1.MachineTypeKey: hold.Spec.MachineType}); err != nil {
			return 0, fmt.Errorf("listing the guests of CapacityHold %s: %w", hold.Name, err)
		}
		for i := range pods.Items {
			// As the Machine controller counts claims: a pod created
			// before the hold wrote its UID itself, past the injector,
			// and claims nothing.
			if capacityhold.Claims(hold, &pods.Items[i]) {
				n++
			}
		}
	}
	return n, nil
}

// deleteHold deletes this very hold (UID precondition), which returns its
// held units at once.
func (r *Controller) deleteHold(ctx context.Context, c client.Client, hold *imperatorv1alpha1.CapacityHold, why string) error {
	if !hold.DeletionTimestamp.IsZero() {
		return nil
	}
	if err := c.Delete(ctx, hold, client.Preconditions{UID: &hold.UID}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return fmt.Errorf("deleting CapacityHold %s: %w", hold.Name, err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Released a CapacityHold", "capacityHold", klog.KObj(hold), "why", why)
	return nil
}
