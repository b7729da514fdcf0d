// Package schemes builds the runtime schemes of the two binaries, which their
// tests use too: the spoke's (the Kubernetes kinds of client-go and the
// Imperator API) and the hub's (the spoke's and the OCM cluster kinds it
// writes: ManagedCluster, AddOnPlacementScore).
package schemes

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// Spoke returns the spoke agent's scheme: client-go's kinds and the
// Imperator API.
func Spoke() (*runtime.Scheme, error) {
	return build(clientgoscheme.AddToScheme, imperatorv1alpha1.AddToScheme)
}

// Hub returns the hub's scheme: the spoke's kinds and the OCM cluster kinds
// (ManagedCluster, AddOnPlacementScore).
func Hub() (*runtime.Scheme, error) {
	return build(clientgoscheme.AddToScheme, imperatorv1alpha1.AddToScheme, clusterv1.Install, clusterv1alpha1.Install)
}

func build(adds ...func(*runtime.Scheme) error) (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	errs := make([]error, 0, len(adds))
	for _, add := range adds {
		errs = append(errs, add(scheme))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("building the scheme: %w", err)
	}
	return scheme, nil
}
