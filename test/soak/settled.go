package soak

import (
	"context"
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/e2e"
	"github.com/imperator-federation/imperator/test/fault"
	"github.com/imperator-federation/imperator/test/util/fleet"
)

// bookingAnnotation is the spoke's record of the fleet hold's booking a
// CapacityHold was made for (the reporter's).
const bookingAnnotation = "imperator.tenzen-y.io/fleet-hold-booking"

// HoldsProblems returns what breaks invariant 4 now, empty when nothing:
// a live CapacityHold placed by the hub that no Pending or Held fleet hold
// owns; a Held fleet hold's part whose CapacityHold is missing or not
// Provisioned; a type whose live holds set aside more idle units than
// reservation pods are bound to ready nodes, or whose Machine counts more
// units held than its holds set aside.
func HoldsProblems(ctx context.Context, env *e2e.Env) ([]string, error) {
	var fleetHolds imperatorv1alpha1.FleetHoldList
	if err := env.Hub.Client.List(ctx, &fleetHolds, client.InNamespace(fleet.Namespace)); err != nil {
		return nil, err
	}
	owned := map[string]bool{}
	var problems []string
	type part struct{ cluster, name string }
	var heldParts []part
	for _, fh := range fleetHolds.Items {
		if fh.Status.Phase != imperatorv1alpha1.FleetHoldPending && fh.Status.Phase != imperatorv1alpha1.FleetHoldHeld {
			continue
		}
		for _, p := range fh.Status.Clusters {
			if p.Result == "" || p.Result == "Held" {
				owned[p.Cluster+"/"+string(fh.UID)] = true
			}
			if fh.Status.Phase == imperatorv1alpha1.FleetHoldHeld && p.Result == "Held" {
				heldParts = append(heldParts, part{p.Cluster, fh.Name})
			}
		}
	}
	for name, spoke := range env.Spokes {
		var holds imperatorv1alpha1.CapacityHoldList
		if err := spoke.Client.List(ctx, &holds); err != nil {
			return nil, err
		}
		setAside := map[typeKey]int32{}
		live := map[string]bool{}
		for _, h := range holds.Items {
			ended := meta.IsStatusConditionTrue(h.Status.Conditions, imperatorv1alpha1.HoldConditionFailed) ||
				meta.IsStatusConditionTrue(h.Status.Conditions, imperatorv1alpha1.HoldConditionBookingExpired)
			if ended || !h.DeletionTimestamp.IsZero() {
				continue
			}
			if meta.IsStatusConditionTrue(h.Status.Conditions, imperatorv1alpha1.HoldConditionProvisioned) {
				live[h.Name] = true
				setAside[typeKey{h.Spec.MachineGroup, h.Spec.MachineType}] += max(0, h.Status.Held-h.Status.Claimed)
			}
			if h.Spec.FleetHold != "" && !owned[name+"/"+h.Annotations[bookingAnnotation]] {
				problems = append(problems, fmt.Sprintf("%s/CapacityHold %s is held and no fleet hold owns it", name, h.Name))
			}
		}
		for _, p := range heldParts {
			if p.cluster == name && !live[p.name] {
				problems = append(problems, fmt.Sprintf("fleet hold %s is Held on %s, whose CapacityHold %s is not Provisioned", p.name, name, p.name))
			}
		}
		var machines imperatorv1alpha1.MachineList
		if err := spoke.Client.List(ctx, &machines); err != nil {
			return nil, err
		}
		for _, m := range machines.Items {
			if !fault.StatusCurrent(&m) {
				problems = append(problems, fmt.Sprintf("%s/Machine %s: status not caught up with its spec", name, m.Name))
				continue
			}
			for _, am := range m.Status.AvailableMachines {
				k := typeKey{e2e.Group(&m), am.Name}
				// Held units are reservation pods kept in place (docs/contract.md,
				// Holds): the holds' idle units must be among the reservation
				// pods bound to ready nodes. The Machine's own held figure
				// leaves out units a gated claimer is about to take, so it may
				// be lower than the holds', never higher.
				if setAside[k] > am.Usage.Reserved {
					problems = append(problems, fmt.Sprintf("%s/Machine %s type %s: live holds set aside %d units, only %d reservation pods are bound to ready nodes", name, m.Name, am.Name, setAside[k], am.Usage.Reserved))
				}
				if am.Usage.Held > setAside[k] {
					problems = append(problems, fmt.Sprintf("%s/Machine %s type %s counts %d units held, its live holds set aside %d", name, m.Name, am.Name, am.Usage.Held, setAside[k]))
				}
			}
		}
	}
	sort.Strings(problems)
	return problems, nil
}

// HubProblem is invariant 5 now: nil when the hub shows every spoke
// Available with exactly the figures of its Machines' statuses.
func HubProblem(ctx context.Context, env *e2e.Env) error { return fault.HubMatchesSpokes(ctx, env) }
