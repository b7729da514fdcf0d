package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/repo"
)

// ReservationPriorityClassFile is where deploy/spoke ships the PriorityClass
// of reservation pods, relative to the repository root. The agent only reads
// that class, so every environment that runs the agent or its Machine
// controller without `kubectl apply -k deploy/spoke` creates it from this
// file, never from a copy of its own.
var ReservationPriorityClassFile = filepath.Join("deploy", "spoke", "agent", "priorityclass.yaml")

// ReservationPriorityClass reads the reservation PriorityClass deploy/spoke
// ships. Unknown fields and anything but one scheduling.k8s.io/v1
// PriorityClass with a name are refused, so that a manifest the API server
// would read differently does not pass unnoticed.
func ReservationPriorityClass() (*schedulingv1.PriorityClass, error) {
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(root, ReservationPriorityClassFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the reservation PriorityClass: %w", err)
	}
	return decodePriorityClass(path, data)
}

// decodePriorityClass decodes the one PriorityClass of the manifest data,
// read from path (named in errors).
func decodePriorityClass(path string, data []byte) (*schedulingv1.PriorityClass, error) {
	docs, err := repo.SplitDocuments(data)
	if err != nil {
		return nil, fmt.Errorf("decoding the PriorityClass of %s: %w", path, err)
	}
	if len(docs) != 1 {
		return nil, fmt.Errorf("decoding the PriorityClass of %s: %d YAML documents, want 1", path, len(docs))
	}
	pc := &schedulingv1.PriorityClass{}
	if err := yaml.UnmarshalStrict(docs[0], pc); err != nil {
		return nil, fmt.Errorf("decoding the PriorityClass of %s: %w", path, err)
	}
	if gvk := pc.GroupVersionKind(); gvk != schedulingv1.SchemeGroupVersion.WithKind("PriorityClass") {
		return nil, fmt.Errorf("decoding the PriorityClass of %s: apiVersion %q and kind %q, want scheduling.k8s.io/v1 PriorityClass",
			path, pc.APIVersion, pc.Kind)
	}
	if pc.Name == "" {
		return nil, fmt.Errorf("decoding the PriorityClass of %s: metadata.name is empty", path)
	}
	return pc, nil
}

// InstallReservationPriorityClass creates the reservation PriorityClass of
// deploy/spoke in c, as `kubectl apply -k deploy/spoke` would. A class of
// that name already there is left as it is.
func InstallReservationPriorityClass(ctx context.Context, c *harness.Cluster) error {
	pc, err := ReservationPriorityClass()
	if err != nil {
		return err
	}
	_, err = c.Kubernetes().SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating PriorityClass %s in %s: %w", pc.Name, c.Name, err)
	}
	return nil
}
