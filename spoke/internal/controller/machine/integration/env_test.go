package machine_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/controller/capacityhold"
	"github.com/imperator-federation/imperator/spoke/internal/controller/machine"
	"github.com/imperator-federation/imperator/test/util/fleet"
	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/repo"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

const (
	// agentNamespace holds the reservations, as the agent's namespace would.
	agentNamespace = "imperator-system"
	group          = "general-machine"
)

// environment is a harness cluster (API server, controller-manager with its
// garbage collector, scheduler, kwok) with seed 000's nodes as the node-pool
// controller would leave them, and the Machine controller running against it
// in a multi-cluster manager, as the agent runs it.
type environment struct {
	Cluster *harness.Cluster
	// Client talks to the API server directly.
	Client client.Client

	cancel  context.CancelFunc
	stopped chan error
}

func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), imperatorv1alpha1.AddToScheme(scheme)); err != nil {
		return nil, fmt.Errorf("building the scheme: %w", err)
	}
	return scheme, nil
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

// startEnvironment starts the cluster, installs the CRDs, adds the pool
// nodes, the agent's namespace and the reservation PriorityClass of
// deploy/spoke, and starts the controller. stop undoes
// everything, also after a failure half-way.
func startEnvironment(ctx context.Context, name string) (_ *environment, err error) {
	scheme, err := newScheme()
	if err != nil {
		return nil, err
	}
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	e := &environment{}
	e.Cluster, err = harness.Start(ctx, harness.Options{Name: name})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.stop())
		}
	}()
	if err := e.Cluster.InstallCRDs(ctx, filepath.Join(root, "deploy", "spoke", "crd")); err != nil {
		return nil, err
	}
	if e.Client, err = client.New(e.Cluster.Config, client.Options{Scheme: scheme}); err != nil {
		return nil, fmt.Errorf("creating the client: %w", err)
	}
	for _, node := range poolNodes() {
		if err := e.Cluster.AddNode(ctx, node); err != nil {
			return nil, err
		}
	}
	if err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}}); err != nil {
		return nil, fmt.Errorf("creating namespace %s: %w", agentNamespace, err)
	}
	// deploy/spoke ships it; the controller only reads it.
	if err := fleet.InstallReservationPriorityClass(ctx, e.Cluster); err != nil {
		return nil, err
	}
	if err := e.startController(scheme, e.Cluster.Config); err != nil {
		return nil, err
	}
	return e, nil
}

// startController runs the Machine controller in a multi-cluster manager
// without a provider (the local cluster only), as spoke/main.go does, with
// the cache restricted by machine.CacheOptions.
func (e *environment) startController(scheme *runtime.Scheme, cfg *rest.Config) error {
	mgr, err := mcmanager.New(cfg, nil, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{ByObject: machine.CacheOptions(agentNamespace)},
		// The suite and the benchmarks each start a manager in one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := machine.SetupWithManager(mgr, machine.Options{Namespace: agentNamespace}); err != nil {
		return err
	}
	if err := capacityhold.SetupWithManager(mgr); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.stopped = make(chan error, 1)
	go func() { e.stopped <- mgr.Start(ctx) }()
	return nil
}

// stop stops the controller, then the cluster.
func (e *environment) stop() error {
	var errs []error
	if e.cancel != nil {
		e.cancel()
		select {
		case err := <-e.stopped:
			if err != nil {
				errs = append(errs, fmt.Errorf("manager: %w", err))
			}
		case <-time.After(30 * time.Second):
			errs = append(errs, errors.New("manager did not stop within 30s"))
		}
	}
	if e.Cluster != nil {
		errs = append(errs, e.Cluster.Stop())
	}
	return errors.Join(errs...)
}
