package migrate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/controller/nodepool"
	"github.com/imperator-federation/imperator/spoke/internal/reservation"
)

// Startup runs the preflight before the agent's controllers start: it logs
// every finding with what to do, and refuses to start (an error naming each)
// while a finding is blocking — the original still mutating pods, or a
// Machine the agent cannot read. A check it has no right to make is logged
// and skipped. Then it detaches the original's reservations in the agent's
// namespace from their Machine (Detach), so that the agent's Machine
// controller, which deletes the reservation objects its Machine controls
// under other names, leaves them to the Adopter's handover; and it retires
// the original's MachineNodePools (RetirePools), so that the agent's
// node-pool controller does not let them own the pool nodes.
func Startup(ctx context.Context, c client.Client, agentNamespace string, log logr.Logger) error {
	ctx = logr.NewContext(ctx, log)
	report, err := Preflight(ctx, c, agentNamespace)
	if err != nil {
		log.Info("Migration preflight could not check everything", "error", err.Error())
	}
	for _, f := range report.Findings {
		log.Info("Found an object of the original Imperator", "object", f.object(), "blocking", f.Blocking,
			"problem", f.Problem, "action", f.Action)
	}
	if blocking := report.Blocking(); len(blocking) > 0 {
		lines := make([]string, 0, len(blocking))
		for _, f := range blocking {
			lines = append(lines, fmt.Sprintf("%s: %s; do: %s", f.object(), f.Problem, strings.ReplaceAll(f.Action, "\n", " ")))
		}
		return fmt.Errorf("the original Imperator is still in the way (see `spoke migrate preflight` and docs/migration.md):\n%s",
			strings.Join(lines, "\n"))
	}
	if err := Detach(ctx, c, agentNamespace); err != nil {
		return fmt.Errorf("detaching the original's reservations from their Machines: %w", err)
	}
	if err := RetirePools(ctx, c); err != nil {
		return fmt.Errorf("retiring the original's MachineNodePools: %w", err)
	}
	return nil
}

// RetirePools takes the original's MachineNodePools (those with its
// finalizer) out of the node-pool controller's way. That controller serves
// every MachineNodePool, and the older of two pools listing a node owns it:
// the original's pool would own its nodes and, reading under the agent's CRD
// with its spec.machineGroupName pruned, label them for no group. So, for
// each such pool, RetirePools first creates the agent's pool of every
// Machine of the group (as the pool-sync controller makes it, controlled by
// the Machine), then rewrites the original's to list no node, with its
// group in spec.machineGroup (required by the agent's schema): it owns no
// node, and releases none that the agent's pool lists. The pool itself stays
// until the Adopter removes it; the nodes keep their labels and taints.
func RetirePools(ctx context.Context, c client.Client) error {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(imperatorv1alpha1.GroupVersion.WithKind("MachineNodePoolList"))
	if err := c.List(ctx, list); err != nil {
		if meta.IsNoMatchError(err) {
			return nil
		}
		return fmt.Errorf("listing MachineNodePools: %w", err)
	}
	var errs []error
	for i := range list.Items {
		pool := &list.Items[i]
		nodes, _, _ := unstructured.NestedSlice(pool.Object, "spec", "nodePool")
		if !slices.Contains(pool.GetFinalizers(), OriginalNodePoolFinalizer) || len(nodes) == 0 {
			continue
		}
		group := originalPoolGroup(pool)
		if group == "" {
			errs = append(errs, fmt.Errorf("MachineNodePool %s has neither spec.machineGroupName nor the %s label: label it with its group",
				pool.GetName(), imperatorv1alpha1.MachineGroupKey))
			continue
		}
		if err := createAgentPools(ctx, c, group); err != nil {
			errs = append(errs, err)
			continue
		}
		before := pool.DeepCopy()
		unstructured.RemoveNestedField(pool.Object, "spec", "nodePool")
		if err := unstructured.SetNestedField(pool.Object, group, "spec", "machineGroup"); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := c.Patch(ctx, pool, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			errs = append(errs, fmt.Errorf("emptying the node list of MachineNodePool %s: %w", pool.GetName(), err))
			continue
		}
		logr.FromContextOrDiscard(ctx).Info("Emptied the node list of the original's MachineNodePool", "machineNodePool", pool.GetName(),
			"nodes", len(nodes))
	}
	return errors.Join(errs...)
}

// createAgentPools creates the agent's MachineNodePool of each Machine of
// group that has none yet.
func createAgentPools(ctx context.Context, c client.Client, group string) error {
	machines := &imperatorv1alpha1.MachineList{}
	if err := c.List(ctx, machines, client.MatchingLabels{imperatorv1alpha1.MachineGroupKey: group}); err != nil {
		return fmt.Errorf("listing the Machines of group %s: %w", group, err)
	}
	for i := range machines.Items {
		machine := &machines.Items[i]
		if !machine.DeletionTimestamp.IsZero() {
			continue
		}
		pool := nodepool.DesiredNodePool(machine)
		if err := controllerutil.SetControllerReference(machine, pool, c.Scheme()); err != nil {
			return fmt.Errorf("setting the owner of MachineNodePool %s: %w", pool.Name, err)
		}
		controllerutil.AddFinalizer(pool, imperatorv1alpha1.NodePoolFinalizer)
		if err := c.Create(ctx, pool); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating MachineNodePool %s: %w", pool.Name, err)
		}
	}
	return nil
}

// Detach turns the Machine controller reference of the original's
// reservation StatefulSets and Services in namespace into a plain owner
// reference: the Machine still owns them (the garbage collector deletes them
// with it) but no longer controls them, and the agent's Machine controller
// leaves objects it does not control alone.
func Detach(ctx context.Context, c client.Client, namespace string) error {
	objects, err := reservation.Objects(ctx, c, namespace)
	if err != nil {
		return err
	}
	var errs []error
	for _, obj := range objects {
		if !isOriginalReservation(obj) {
			continue
		}
		if err := releaseControl(ctx, c, obj); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// releaseControl clears the controller flag of obj's Machine owner
// reference, if it has one.
func releaseControl(ctx context.Context, c client.Client, obj client.Object) error {
	before := obj.DeepCopyObject().(client.Object)
	refs := obj.GetOwnerReferences()
	changed := false
	for i := range refs {
		if refs[i].Kind == "Machine" && refs[i].Controller != nil && *refs[i].Controller {
			refs[i].Controller = nil
			changed = true
		}
	}
	if !changed {
		return nil
	}
	obj.SetOwnerReferences(refs)
	if err := c.Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("patching the owner of %T %s: %w", obj, klog.KObj(obj), err)
	}
	logr.FromContextOrDiscard(ctx).Info("Detached the original's reservation object from its Machine", "object", klog.KObj(obj),
		"kind", fmt.Sprintf("%T", obj))
	return nil
}

// controlledBy is whether owner is obj's controller, by UID.
func controlledBy(obj metav1.Object, owner metav1.Object) bool {
	ref := metav1.GetControllerOfNoCopy(obj)
	return ref != nil && ref.UID == owner.GetUID()
}
