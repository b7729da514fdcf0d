package machine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	schedulingv1alpha2ac "k8s.io/client-go/applyconfigurations/scheduling/v1alpha2"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// PodGroupAdmittedCondition is the condition the agent keeps on a native
// PodGroup (scheduling.k8s.io/v1alpha2) whose members are guests: True
// (reason LetThrough) once the gang was let through the slot gate whole,
// False while it waits at the gate, with the reason its members' notes give
// (NotEnoughResources, NotEnoughTasks, Unschedulable, InvalidGang,
// MixedGang) and the note as message. The PodGroup's own PodGroupScheduled
// condition is the scheduler's, which only sees the members once they pass
// the gate; the agent never writes it. The condition list is a map keyed
// by type, so the agent applies its entry alone, as its own field manager.
const PodGroupAdmittedCondition = imperatorv1alpha1.Prefix + "Admitted"

// ReasonLetThrough is the reason of a True PodGroupAdmittedCondition.
const ReasonLetThrough = "LetThrough"

// gangVerdict is what a reconcile decided for a gang of a native PodGroup.
type gangVerdict struct {
	admitted        bool
	reason, message string
}

// podGroupVerdicts collects, per gang of a native PodGroup, what plan
// decided for the type: let through (any member granted now), waiting
// whole, or parked. Members beyond a gang's size say nothing: the gang holds
// its units already.
func podGroupVerdicts(u *typeUsage, plan slotPlan, machineType, machine string) map[gangID]gangVerdict {
	verdicts := map[gangID]gangVerdict{}
	for _, pod := range plan.grant {
		if g := u.gangs[pod.UID]; g != nil && g.id.source == "podgroup" {
			verdicts[g.id] = gangVerdict{admitted: true, reason: ReasonLetThrough,
				message: fmt.Sprintf("gang %s: %d of %d let through the slot gate together to %s of Machine %s", g.id, g.need, g.size, machineType, machine)}
		}
	}
	for _, q := range plan.queued {
		var id gangID
		var reason string
		switch {
		case q.gang != nil && !q.extra:
			id, reason = q.gang.id, reasonNotEnoughResources
			if q.gangPlan.unplaceable != nil {
				reason = reasonUnschedulable
			}
		case q.parkedReason != "":
			id, _, _, _ = gangMembership(q.pod)
			reason = q.parkedReason
		default:
			continue
		}
		if _, decided := verdicts[id]; decided || id.source != "podgroup" {
			continue
		}
		verdicts[id] = gangVerdict{reason: reason, message: q.note}
	}
	return verdicts
}

// tellPodGroups sets PodGroupAdmittedCondition on the native PodGroups of
// verdicts that the cache holds, when it differs from what they show.
func tellPodGroups(ctx context.Context, c client.Client, podGroups *groupSizes, verdicts map[gangID]gangVerdict, now time.Time) error {
	ids := make([]gangID, 0, len(verdicts))
	for id := range verdicts {
		ids = append(ids, id)
	}
	// One order, for the logs and the tests.
	slices.SortFunc(ids, func(a, b gangID) int { return strings.Compare(a.String(), b.String()) })
	var errs []error
	for _, id := range ids {
		pg := podGroups.cachedPodGroup(ctx, id)
		if pg == nil {
			continue
		}
		apply, ok := admittedCondition(pg, verdicts[id], now)
		if !ok {
			continue
		}
		if err := c.Status().Apply(ctx, apply, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			if !replaced(err) {
				errs = append(errs, fmt.Errorf("setting condition %s of PodGroup %s: %w", PodGroupAdmittedCondition, klog.KObj(pg), err))
			}
			continue
		}
		ctrl.LoggerFrom(ctx).V(1).Info("Told a PodGroup where its gang stands", "podGroup", klog.KObj(pg),
			"admitted", verdicts[id].admitted, "reason", verdicts[id].reason)
	}
	return errors.Join(errs...)
}

// admittedCondition is the apply configuration that sets v as pg's
// PodGroupAdmittedCondition, and false when pg shows it already. It carries
// pg's UID: a PodGroup deleted and created again under its name since the
// cache saw it is refused (replaced), and its own gang is told next time.
func admittedCondition(pg *schedulingv1alpha2.PodGroup, v gangVerdict, now time.Time) (*schedulingv1alpha2ac.PodGroupApplyConfiguration, bool) {
	status := metav1.ConditionFalse
	if v.admitted {
		status = metav1.ConditionTrue
	}
	want := metav1.Condition{Type: PodGroupAdmittedCondition, Status: status, Reason: v.reason, Message: v.message,
		ObservedGeneration: pg.Generation, LastTransitionTime: metav1.NewTime(now)}
	existing := meta.FindStatusCondition(pg.Status.Conditions, PodGroupAdmittedCondition)
	if existing != nil {
		if existing.Status == want.Status && existing.Reason == want.Reason && existing.Message == want.Message &&
			existing.ObservedGeneration == want.ObservedGeneration {
			return nil, false
		}
		if existing.Status == want.Status {
			want.LastTransitionTime = existing.LastTransitionTime
		}
	}
	apply := schedulingv1alpha2ac.PodGroup(pg.Name, pg.Namespace).
		WithUID(pg.UID).
		WithStatus(schedulingv1alpha2ac.PodGroupStatus().WithConditions(metav1ac.Condition().
			WithType(want.Type).WithStatus(want.Status).WithReason(want.Reason).WithMessage(want.Message).
			WithObservedGeneration(want.ObservedGeneration).WithLastTransitionTime(want.LastTransitionTime)))
	return apply, true
}
