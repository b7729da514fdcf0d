package nodepool

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/controller"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
)

// SetupWithManager registers the indexes, the pool-sync reconciler and the
// node-pool reconciler with mgr. They run against every cluster of mgr: the
// agent's own cluster when mgr has no provider.
func SetupWithManager(mgr mcmanager.Manager) error {
	// Before the manager starts, registering an index only adds it to the
	// informers to come; the context is not waited on.
	if err := SetupIndexer(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := NewPoolSyncReconciler(mgr).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the MachineNodePool sync controller: %w", err)
	}
	if err := NewReconciler(mgr).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the node-pool controller: %w", err)
	}
	return nil
}

// controllerOptions are the manager's controller settings. The multicluster
// builder takes only some of them (not SkipNameValidation, nor the default
// concurrency and recover-panic settings); this takes all of them.
func controllerOptions(mgr mcmanager.Manager) controller.TypedOptions[mcreconcile.Request] {
	opts := controller.TypedOptions[mcreconcile.Request]{}
	opts.DefaultFromConfig(mgr.GetControllerOptions())
	return opts
}
