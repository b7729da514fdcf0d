package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/yaml"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/repo"
)

// fieldOwner names the e2e suite as the writer of what it changes.
const fieldOwner = client.FieldOwner("imperator-e2e")

// ReadDocuments splits a YAML file into its documents, skipping empty ones
// (a file may start with `---` and comments).
func ReadDocuments(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	docs, err := repo.SplitDocuments(data)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return docs, nil
}

// ReadMachine reads the single Machine of a sample file.
func ReadMachine(path string) (*imperatorv1alpha1.Machine, error) {
	docs, err := ReadDocuments(path)
	if err != nil {
		return nil, err
	}
	if len(docs) != 1 {
		return nil, fmt.Errorf("%s: want one Machine, found %d documents", path, len(docs))
	}
	m := &imperatorv1alpha1.Machine{}
	if err := yaml.UnmarshalStrict(docs[0], m); err != nil {
		return nil, fmt.Errorf("decoding the Machine of %s: %w", path, err)
	}
	if m.Kind != "Machine" || m.Name == "" {
		return nil, fmt.Errorf("%s: want a named Machine, found kind %q name %q", path, m.Kind, m.Name)
	}
	return m, nil
}

// GuestWorkload is the Namespace and Deployment of the guest sample.
type GuestWorkload struct {
	Namespace  *corev1.Namespace
	Deployment *appsv1.Deployment
}

// ReadGuestWorkload reads a file holding one Namespace and one Deployment.
func ReadGuestWorkload(path string) (*GuestWorkload, error) {
	docs, err := ReadDocuments(path)
	if err != nil {
		return nil, err
	}
	w := &GuestWorkload{}
	for _, doc := range docs {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", path, err)
		}
		switch tm.Kind {
		case "Namespace":
			w.Namespace = &corev1.Namespace{}
			err = yaml.UnmarshalStrict(doc, w.Namespace)
		case "Deployment":
			w.Deployment = &appsv1.Deployment{}
			err = yaml.UnmarshalStrict(doc, w.Deployment)
		default:
			err = fmt.Errorf("unexpected kind %q", tm.Kind)
		}
		if err != nil {
			return nil, fmt.Errorf("decoding %s: %w", path, err)
		}
	}
	if w.Namespace == nil || w.Deployment == nil {
		return nil, fmt.Errorf("%s: want a Namespace and a Deployment", path)
	}
	return w, nil
}

// ApplyMachine creates the Machine, or brings an existing one's labels and
// spec in line with it (an attached fleet may have it from `make demo`).
func ApplyMachine(ctx context.Context, c client.Client, want *imperatorv1alpha1.Machine) error {
	m := &imperatorv1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: want.Name}}
	_, err := controllerutil.CreateOrPatch(ctx, c, m, func() error {
		m.Labels = mergeLabels(m.Labels, want.Labels)
		m.Spec = *want.Spec.DeepCopy()
		return nil
	})
	if err != nil {
		return fmt.Errorf("applying Machine %s: %w", want.Name, err)
	}
	return nil
}

// ApplyGuestWorkload creates (or updates) the guest Namespace and Deployment.
func ApplyGuestWorkload(ctx context.Context, c client.Client, w *GuestWorkload) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.Namespace.Name}}
	if _, err := controllerutil.CreateOrPatch(ctx, c, ns, func() error {
		ns.Labels = mergeLabels(ns.Labels, w.Namespace.Labels)
		return nil
	}); err != nil {
		return fmt.Errorf("applying Namespace %s: %w", ns.Name, err)
	}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: w.Deployment.Name, Namespace: w.Deployment.Namespace}}
	if _, err := controllerutil.CreateOrPatch(ctx, c, d, func() error {
		d.Labels = mergeLabels(d.Labels, w.Deployment.Labels)
		d.Spec = *w.Deployment.Spec.DeepCopy()
		return nil
	}); err != nil {
		return fmt.Errorf("applying Deployment %s: %w", client.ObjectKeyFromObject(d), err)
	}
	return nil
}

// UpdateMachine changes a Machine's spec with mutate, retrying on conflicts
// (the agent writes the Machine's status and finalizers meanwhile).
func UpdateMachine(ctx context.Context, c client.Client, name string, mutate func(*imperatorv1alpha1.Machine)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m := &imperatorv1alpha1.Machine{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, m); err != nil {
			return fmt.Errorf("getting Machine %s: %w", name, err)
		}
		patch := client.MergeFromWithOptions(m.DeepCopy(), client.MergeFromWithOptimisticLock{})
		mutate(m)
		return c.Patch(ctx, m, patch, fieldOwner)
	})
}

// UpdateNode changes a Node with mutate, retrying on conflicts (kwok and the
// agent write nodes too).
func UpdateNode(ctx context.Context, c client.Client, name string, mutate func(*corev1.Node)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			return fmt.Errorf("getting Node %s: %w", name, err)
		}
		patch := client.MergeFromWithOptions(n.DeepCopy(), client.MergeFromWithOptimisticLock{})
		mutate(n)
		return c.Patch(ctx, n, patch, fieldOwner)
	})
}

// StatusUsage returns the status usage of typ in m, or nil.
func StatusUsage(m *imperatorv1alpha1.Machine, typ string) *imperatorv1alpha1.Usage {
	for i := range m.Status.AvailableMachines {
		if m.Status.AvailableMachines[i].Name == typ {
			return &m.Status.AvailableMachines[i].Usage
		}
	}
	return nil
}

// MachineReady reports whether m's Ready condition is True for its current
// generation.
func MachineReady(m *imperatorv1alpha1.Machine) bool {
	cond := meta.FindStatusCondition(m.Status.Conditions, imperatorv1alpha1.ConditionReady)
	return cond != nil && cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == m.Generation
}

// Group is the machine group of m (its machine-group label).
func Group(m *imperatorv1alpha1.Machine) string { return m.Labels[imperatorv1alpha1.MachineGroupKey] }

func mergeLabels(have, want map[string]string) map[string]string {
	if len(want) == 0 {
		return have
	}
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, want)
	return out
}
