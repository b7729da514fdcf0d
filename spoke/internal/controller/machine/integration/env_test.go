package machine_test

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/app"
	"github.com/imperator-federation/imperator/spoke/internal/controller/capacityhold"
	"github.com/imperator-federation/imperator/spoke/internal/controller/machine"
	"github.com/imperator-federation/imperator/test/util/fleet"
	"github.com/imperator-federation/imperator/test/util/framework"
	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

const (
	// agentNamespace holds the reservations, as the agent's namespace would.
	agentNamespace = "imperator-system"
	group          = "general-machine"
)

// environment is a harness cluster (API server, controller-manager with its
// garbage collector, scheduler, kwok; the alpha Workload API on) with the sample's nodes as the node-pool
// controller would leave them, and the Machine and CapacityHold controllers
// running against it in a multi-cluster manager, as the agent runs them.
type environment struct {
	*framework.Environment
}

// poolNodes are wrappers.SeedNodes labelled and tainted for GeneralMachine
// (michiru: compute-xlarge, tainted; utaha: compute-medium in maintenance,
// untainted; eriri: compute-medium, tainted), plus kasumi, a CPU node with
// room for four compute-small units of 2 CPUs and 8Gi, for the specs that
// add that type.
func poolNodes() []*corev1.Node {
	pool := map[string]struct {
		machineType string
		state       imperatorv1alpha1.NodePoolState
		taint       bool
	}{
		"michiru": {"compute-xlarge", imperatorv1alpha1.NodePoolReady, true},
		"utaha":   {"compute-medium", imperatorv1alpha1.NodePoolMaintenance, false},
		"eriri":   {"compute-medium", imperatorv1alpha1.NodePoolReady, true},
		"kasumi":  {"compute-small", imperatorv1alpha1.NodePoolReady, false},
	}
	nodes := append(wrappers.SeedNodes(), wrappers.MakeNode("kasumi").Obj())
	for _, n := range nodes {
		p := pool[n.Name]
		n.Labels[imperatorv1alpha1.MachineTypeKeyFor(p.machineType)] = group
		n.Labels[imperatorv1alpha1.MachineTypeKey] = p.machineType
		n.Labels[imperatorv1alpha1.NodePoolKey] = string(p.state)
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[imperatorv1alpha1.MachineGroupKey] = group
		if p.taint {
			n.Spec.Taints = append(n.Spec.Taints,
				corev1.Taint{Key: imperatorv1alpha1.MachineTypeKeyFor(p.machineType), Value: group, Effect: corev1.TaintEffectNoSchedule},
				corev1.Taint{Key: imperatorv1alpha1.NodePoolKey, Value: string(p.state), Effect: corev1.TaintEffectNoSchedule})
		}
	}
	return nodes
}

// poolNode is the node of poolNodes named name.
func poolNode(name string) *corev1.Node {
	for _, n := range poolNodes() {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// controllers are the agent's Machine and CapacityHold controllers, without
// a provider (the local cluster only), as spoke/internal/app runs them, with
// the cache restricted by machine.CacheOptions and app.ControllerWorkers
// reconciles at once.
var controllers = framework.ManagerOptions{
	Cache:                   cache.Options{ByObject: machine.CacheOptions(agentNamespace)},
	MaxConcurrentReconciles: app.ControllerWorkers,
	SetupMulticluster: func(mgr mcmanager.Manager) error {
		return errors.Join(machine.SetupWithManager(mgr, machine.Options{Namespace: agentNamespace}), capacityhold.SetupWithManager(mgr))
	},
}

// startEnvironment starts the cluster with the spoke CRDs, adds the pool
// nodes, the agent's namespace and the reservation PriorityClass of
// deploy/spoke, then starts the controllers. Stop undoes everything, also
// after a failure half-way.
func startEnvironment(ctx context.Context, name string) (_ *environment, err error) {
	// The alpha Workload API is on, as on a cluster that serves native
	// PodGroups, for the gangs named in spec.schedulingGroup.
	env, err := framework.Start(ctx, framework.Options{Name: name, Harness: true, CRDs: framework.SpokeCRDs, Namespaces: []string{agentNamespace},
		FeatureGates: harness.WorkloadAPIFeatureGates, APIServerFlags: []string{harness.WorkloadAPIRuntimeConfig}})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, env.Stop())
		}
	}()
	for _, node := range poolNodes() {
		if err := env.Cluster.AddNode(ctx, node); err != nil {
			return nil, err
		}
	}
	// deploy/spoke ships it; the controller only reads it.
	if err := fleet.InstallReservationPriorityClass(ctx, env.Cluster); err != nil {
		return nil, err
	}
	if env.Manager, err = env.StartManager(ctx, controllers); err != nil {
		return nil, err
	}
	return &environment{env}, nil
}

// restartController stops the controllers, as an agent that exits, and
// starts new ones with fresh caches and no memory, as the agent that
// replaces it.
func (e *environment) restartController(ctx context.Context) (err error) {
	if err := e.Manager.Stop(); err != nil {
		return err
	}
	e.Manager, err = e.StartManager(ctx, controllers)
	return err
}
