package controller

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// HubClusterLabel is the label of a MultiKueueCluster that names its cluster
// in the hub when that is not the MultiKueueCluster's own name.
const HubClusterLabel = "imperator.tenzen-y.io/hub-cluster"

// multiKueueCheck returns the name of the first of checks that is a
// MultiKueue AdmissionCheck (as Kueue's GetMultiKueueAdmissionCheck picks
// it) and the workers of its MultiKueueConfig; "" when none is.
func multiKueueCheck(ctx context.Context, c client.Reader, checks []string) (string, []Worker, error) {
	for _, name := range checks {
		ac := &unstructured.Unstructured{}
		ac.SetGroupVersionKind(AdmissionCheckGVK)
		if err := c.Get(ctx, client.ObjectKey{Name: name}, ac); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return "", nil, fmt.Errorf("reading AdmissionCheck %s: %w", name, err)
		}
		if ctl, _, _ := unstructured.NestedString(ac.Object, "spec", "controllerName"); ctl != MultiKueueControllerName {
			continue
		}
		config, _, _ := unstructured.NestedString(ac.Object, "spec", "parameters", "name")
		if kind, _, _ := unstructured.NestedString(ac.Object, "spec", "parameters", "kind"); config == "" || kind != "MultiKueueConfig" {
			return name, nil, fmt.Errorf("AdmissionCheck %s: spec.parameters must name a MultiKueueConfig", name)
		}
		workers, err := configWorkers(ctx, c, config)
		return name, workers, err
	}
	return "", nil, nil
}

// configWorkers are the MultiKueueClusters of MultiKueueConfig name, each
// with its hub cluster name. A cluster the config names but that does not
// exist is left out (Kueue makes no copy there either).
func configWorkers(ctx context.Context, c client.Reader, name string) ([]Worker, error) {
	cfg := &unstructured.Unstructured{}
	cfg.SetGroupVersionKind(MultiKueueConfigGVK)
	if err := c.Get(ctx, client.ObjectKey{Name: name}, cfg); err != nil {
		return nil, fmt.Errorf("reading MultiKueueConfig %s: %w", name, err)
	}
	names, _, err := unstructured.NestedStringSlice(cfg.Object, "spec", "clusters")
	if err != nil {
		return nil, fmt.Errorf("MultiKueueConfig %s: spec.clusters: %w", name, err)
	}
	slices.Sort(names)
	var workers []Worker
	for _, n := range slices.Compact(names) {
		mk := &unstructured.Unstructured{}
		mk.SetGroupVersionKind(MultiKueueClusterGVK)
		if err := c.Get(ctx, client.ObjectKey{Name: n}, mk); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("reading MultiKueueCluster %s: %w", n, err)
		}
		hub := mk.GetLabels()[HubClusterLabel]
		if hub == "" {
			hub = n
		}
		workers = append(workers, Worker{Name: n, HubCluster: hub})
	}
	return workers, nil
}
