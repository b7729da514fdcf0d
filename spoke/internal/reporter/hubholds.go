package reporter

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	"github.com/imperator-federation/imperator/spoke/internal/controller/capacityhold"
)

// hubHoldsCapability is the Hello capability that tells the hub this agent
// reports the CapacityHolds the hub asked for (Snapshot.hub_holds), so
// that the hub can release those no fleet hold owns any more.
const hubHoldsCapability = "hub-holds"

// hubHolds are the live (Pending or Active) CapacityHolds the hub asked
// for, sorted by name: what Snapshot.hub_holds reports.
func hubHolds(ctx context.Context, cache client.Reader, now time.Time) ([]*federationv1.HubHold, error) {
	var all imperatorv1alpha1.CapacityHoldList
	if err := cache.List(ctx, &all); err != nil {
		return nil, fmt.Errorf("listing CapacityHolds: %w", err)
	}
	var out []*federationv1.HubHold
	for i := range all.Items {
		h := &all.Items[i]
		if h.Spec.FleetHold == "" || !h.DeletionTimestamp.IsZero() {
			continue
		}
		if phase := capacityhold.PhaseOf(h, now); phase != capacityhold.PhaseActive && phase != capacityhold.PhasePending {
			continue
		}
		out = append(out, &federationv1.HubHold{
			Name: h.Name, FleetHold: h.Spec.FleetHold, Booking: h.Annotations[BookingAnnotation],
			Group: h.Spec.MachineGroup, Type: h.Spec.MachineType, Count: h.Spec.Count, Held: h.Status.Held + h.Status.Claimed,
		})
	}
	slices.SortFunc(out, func(a, b *federationv1.HubHold) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, nil
}

// sameHubHolds reports whether two reports of hub holds say the same.
func sameHubHolds(a, b []*federationv1.HubHold) bool {
	return slices.EqualFunc(a, b, func(x, y *federationv1.HubHold) bool { return proto.Equal(x, y) })
}

// mayWriteHolds asks the API server whether the agent may create and delete
// CapacityHolds (what answering HoldRequests takes), and why not.
func mayWriteHolds(ctx context.Context, c client.Client) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, verb := range []string{"create", "delete"} {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: imperatorv1alpha1.GroupVersion.Group, Resource: "capacityholds", Verb: verb},
		}}
		if err := c.Create(ctx, review); err != nil {
			return false, fmt.Sprintf("checking whether the agent may %s CapacityHolds: %v", verb, err)
		}
		if !review.Status.Allowed {
			return false, fmt.Sprintf("the agent may not %s CapacityHolds: %s", verb, review.Status.Reason)
		}
	}
	return true, ""
}
