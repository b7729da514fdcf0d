package migrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/reservation"
)

// AdoptAnnotation is the annotation that, set to "true" on a Machine, asks
// the agent to hand the Machine's units over from the original's
// reservation StatefulSets and to remove the original's MachineNodePools of
// its group (Adopter).
const AdoptAnnotation = imperatorv1alpha1.Prefix + "adopt-original"

// AdoptionAnnotation is the annotation where the agent writes how far the adoption of a
// Machine has gone ("done" at the end).
const AdoptionAnnotation = imperatorv1alpha1.Prefix + "adoption"

// Finding is one thing of the original's in the cluster.
type Finding struct {
	// Kind, Namespace and Name identify the object.
	Kind, Namespace, Name string
	// Problem says what is wrong with it for the agent.
	Problem string
	// Action is what to do, with the exact command where there is one.
	Action string
	// Blocking findings keep the agent from starting: the original still
	// mutates pods, or the agent cannot read an object.
	Blocking bool
}

func (f Finding) object() string {
	if f.Namespace == "" {
		return f.Kind + " " + f.Name
	}
	return f.Kind + " " + f.Namespace + "/" + f.Name
}

// Report is what Preflight found.
type Report struct {
	Findings []Finding
}

// Blocking are the findings that keep the agent from starting.
func (r Report) Blocking() []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Blocking {
			out = append(out, f)
		}
	}
	return out
}

// Print writes the report for a person: one paragraph per finding, the
// blocking ones first.
func (r Report) Print(w io.Writer) error {
	if len(r.Findings) == 0 {
		_, err := fmt.Fprintln(w, "Nothing of the original Imperator found: the agent can be installed.")
		return err
	}
	findings := slices.Clone(r.Findings)
	slices.SortStableFunc(findings, func(a, b Finding) int {
		switch {
		case a.Blocking == b.Blocking:
			return 0
		case a.Blocking:
			return -1
		}
		return 1
	})
	var b strings.Builder
	for _, f := range findings {
		level := "TODO"
		if f.Blocking {
			level = "BLOCKING"
		}
		fmt.Fprintf(&b, "%s %s: %s\n", level, f.object(), f.Problem)
		for _, line := range strings.Split(f.Action, "\n") {
			fmt.Fprintf(&b, "    %s\n", line)
		}
	}
	fmt.Fprintf(&b, "%d finding(s), %d blocking (docs/migration.md)\n", len(findings), len(r.Blocking()))
	_, err := io.WriteString(w, b.String())
	return err
}

// Preflight lists what the original leaves in the cluster c reaches.
// agentNamespace is where the agent keeps its reservations (the only
// namespace Adopter works in). A check that cannot read its objects
// (forbidden, say) adds its error; the others still run.
func Preflight(ctx context.Context, c client.Reader, agentNamespace string) (Report, error) {
	var r Report
	var errs []error
	for _, check := range []func(context.Context, client.Reader, string) ([]Finding, error){
		deploymentFindings, webhookFindings, machineFindings, nodePoolFindings, reservationFindings,
	} {
		found, err := check(ctx, c, agentNamespace)
		r.Findings = append(r.Findings, found...)
		errs = append(errs, err)
	}
	return r, errors.Join(errs...)
}

// deploymentFindings finds the original's controller. Only one in the
// agent's or the original's namespace blocks the start: anyone who may
// create a Deployment in a namespace of their own could otherwise keep the
// agent from starting with a look-alike (the webhook configurations, which
// only cluster administrators write, are what keeps two pod mutators from
// running at once).
func deploymentFindings(ctx context.Context, c client.Reader, agentNamespace string) ([]Finding, error) {
	list := &appsv1.DeploymentList{}
	if err := c.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing Deployments: %w", err)
	}
	var out []Finding
	for i := range list.Items {
		d := &list.Items[i]
		if !isOriginalDeployment(d) {
			continue
		}
		replicas := int32(1)
		if d.Spec.Replicas != nil {
			replicas = *d.Spec.Replicas
		}
		if replicas == 0 && d.Status.Replicas == 0 {
			out = append(out, Finding{Kind: "Deployment", Namespace: d.Namespace, Name: d.Name,
				Problem: "the original's controller, scaled to 0",
				Action:  fmt.Sprintf("uninstall it when the migration is done: kubectl -n %s delete deployment %s", d.Namespace, d.Name)})
			continue
		}
		if d.Namespace != agentNamespace && d.Namespace != originalNamespace {
			out = append(out, Finding{Kind: "Deployment", Namespace: d.Namespace, Name: d.Name,
				Problem: fmt.Sprintf("looks like the original's controller (%d replica(s)), outside %s and %s: not blocking, since any namespace's editors can create one", max(replicas, d.Status.Replicas), agentNamespace, originalNamespace),
				Action:  fmt.Sprintf("if it is the original's controller: kubectl -n %s scale deployment %s --replicas=0", d.Namespace, d.Name)})
			continue
		}
		out = append(out, Finding{Kind: "Deployment", Namespace: d.Namespace, Name: d.Name, Blocking: true,
			Problem: fmt.Sprintf("the original's controller runs (%d replica(s)): it injects pods and recreates its reservations", max(replicas, d.Status.Replicas)),
			Action:  fmt.Sprintf("kubectl -n %s scale deployment %s --replicas=0", d.Namespace, d.Name)})
	}
	return out, nil
}

func webhookFindings(ctx context.Context, c client.Reader, _ string) ([]Finding, error) {
	var out []Finding
	mutating := &admissionregistrationv1.MutatingWebhookConfigurationList{}
	errMutating := c.List(ctx, mutating)
	if errMutating != nil {
		errMutating = fmt.Errorf("listing MutatingWebhookConfigurations: %w", errMutating)
	}
	for _, cfg := range mutating.Items {
		names := make([]string, 0, len(cfg.Webhooks))
		for _, w := range cfg.Webhooks {
			names = append(names, w.Name)
		}
		if !slices.Contains(names, originalPodMutator) && !slices.Contains(names, originalMachineDefaulter) {
			continue
		}
		out = append(out, Finding{Kind: "MutatingWebhookConfiguration", Name: cfg.Name, Blocking: true,
			Problem: fmt.Sprintf("the original's webhooks %s: two pod mutators must never run together", strings.Join(names, ", ")),
			Action:  "kubectl delete mutatingwebhookconfiguration " + cfg.Name})
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	errValidating := c.List(ctx, validating)
	if errValidating != nil {
		errValidating = fmt.Errorf("listing ValidatingWebhookConfigurations: %w", errValidating)
	}
	for _, cfg := range validating.Items {
		if !slices.ContainsFunc(cfg.Webhooks, func(w admissionregistrationv1.ValidatingWebhook) bool { return w.Name == originalMachineValidator }) {
			continue
		}
		out = append(out, Finding{Kind: "ValidatingWebhookConfiguration", Name: cfg.Name, Blocking: true,
			Problem: "the original's Machine validator: with its controller gone it refuses every Machine write",
			Action:  "kubectl delete validatingwebhookconfiguration " + cfg.Name})
	}
	return out, errors.Join(errMutating, errValidating)
}

// machines lists the Machines as stored: the typed client cannot decode one
// whose gpu.num the original stored as a string. No CRD, no Machines.
func machines(ctx context.Context, c client.Reader) ([]unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(imperatorv1alpha1.GroupVersion.WithKind("MachineList"))
	if err := c.List(ctx, list); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing Machines: %w", err)
	}
	return list.Items, nil
}

func machineFindings(ctx context.Context, c client.Reader, _ string) ([]Finding, error) {
	items, err := machines(ctx, c)
	if err != nil {
		return nil, err
	}
	var out []Finding
	for i := range items {
		m := &items[i]
		types, _, _ := unstructured.NestedSlice(m.Object, "spec", "machineTypes")
		for idx, t := range types {
			tm, ok := t.(map[string]any)
			if !ok {
				continue
			}
			num, found, _ := unstructured.NestedFieldNoCopy(tm, "spec", "gpu", "num")
			s, isString := num.(string)
			if !found || !isString {
				continue
			}
			name, _ := tm["name"].(string)
			path := fmt.Sprintf("/spec/machineTypes/%d/spec/gpu/num", idx)
			f := Finding{Kind: "Machine", Name: m.GetName(), Blocking: true}
			if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32); err == nil && n >= 1 {
				f.Problem = fmt.Sprintf("machine type %q stores gpu.num as the string %q: the agent reads a number only", name, s)
				f.Action = fmt.Sprintf(`kubectl patch machine %s --type=json -p '[{"op":"test","path":"%s","value":%q},{"op":"replace","path":"%s","value":%d}]'`,
					m.GetName(), path, s, path, n)
			} else {
				f.Problem = fmt.Sprintf("machine type %q stores gpu.num as %q, not a whole number of GPUs of at least 1", name, s)
				f.Action = fmt.Sprintf(`choose the GPU count N of the type, then: kubectl patch machine %s --type=json -p '[{"op":"replace","path":"%s","value":N}]'`,
					m.GetName(), path)
			}
			out = append(out, f)
		}
	}
	return out, nil
}

func nodePoolFindings(ctx context.Context, c client.Reader, _ string) ([]Finding, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(imperatorv1alpha1.GroupVersion.WithKind("MachineNodePoolList"))
	if err := c.List(ctx, list); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing MachineNodePools: %w", err)
	}
	var out []Finding
	for _, pool := range list.Items {
		if !slices.Contains(pool.GetFinalizers(), OriginalNodePoolFinalizer) {
			continue
		}
		group := originalPoolGroup(&pool)
		out = append(out, Finding{Kind: "MachineNodePool", Name: pool.GetName(),
			Problem: fmt.Sprintf("the original's pool of machine group %q, with its finalizer %s that nobody removes any more", group, OriginalNodePoolFinalizer),
			Action: fmt.Sprintf("annotate the group's Machine (the agent removes the finalizer, then the pool once the units are handed over):\n"+
				"kubectl annotate machine -l %s=%s %s=true", imperatorv1alpha1.MachineGroupKey, group, AdoptAnnotation)})
	}
	return out, nil
}

// originalPoolGroup is the machine group of one of the original's pools:
// spec.machineGroupName (the original's field), else its group label.
func originalPoolGroup(pool *unstructured.Unstructured) string {
	if group, _, _ := unstructured.NestedString(pool.Object, "spec", "machineGroupName"); group != "" {
		return group
	}
	return pool.GetLabels()[imperatorv1alpha1.MachineGroupKey]
}

// isOriginalReservation tells the original's reservation StatefulSets and
// Services: the reservation labels (pkg/controllers/util/label.go
// GenerateReservationResourceLabel) under the original's name, which is not
// the agent's.
func isOriginalReservation(obj client.Object) bool {
	labels := obj.GetLabels()
	group, machineType := labels[imperatorv1alpha1.MachineGroupKey], labels[imperatorv1alpha1.MachineTypeKey]
	if group == "" || machineType == "" || labels[imperatorv1alpha1.PodRoleKey] != string(imperatorv1alpha1.PodRoleReservation) {
		return false
	}
	name := obj.GetName()
	return name == OriginalReservationName(group, machineType) && name != imperatorv1alpha1.ReservationName(machineType, group)
}

func reservationFindings(ctx context.Context, c client.Reader, agentNamespace string) ([]Finding, error) {
	list := &appsv1.StatefulSetList{}
	if err := c.List(ctx, list, reservation.Selector()); err != nil {
		return nil, fmt.Errorf("listing reservation StatefulSets: %w", err)
	}
	var out []Finding
	for i := range list.Items {
		sts := &list.Items[i]
		if !isOriginalReservation(sts) {
			continue
		}
		group, machineType := sts.Labels[imperatorv1alpha1.MachineGroupKey], sts.Labels[imperatorv1alpha1.MachineTypeKey]
		replicas := int32(1)
		if sts.Spec.Replicas != nil {
			replicas = *sts.Spec.Replicas
		}
		f := Finding{Kind: "StatefulSet", Namespace: sts.Namespace, Name: sts.Name,
			Problem: fmt.Sprintf("the original's reservation of %s in group %q, %d replica(s)", machineType, group, replicas)}
		if sts.Namespace == agentNamespace {
			f.Action = fmt.Sprintf("annotate the group's Machine (the agent hands its units over one by one, then deletes it):\n"+
				"kubectl annotate machine -l %s=%s %s=true", imperatorv1alpha1.MachineGroupKey, group, AdoptAnnotation)
		} else {
			f.Action = fmt.Sprintf("outside the agent's namespace %s: once the agent's %s/%s holds the units, by hand:\n"+
				"kubectl -n %s scale statefulset %s --replicas=0 && kubectl -n %s delete statefulset,service %s",
				agentNamespace, agentNamespace, imperatorv1alpha1.ReservationName(machineType, group),
				sts.Namespace, sts.Name, sts.Namespace, sts.Name)
		}
		out = append(out, f)
	}
	return out, nil
}
