package nodepool_test

import (
	"fmt"
	"io"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/imperator-federation/imperator/spoke/internal/app"
	"github.com/imperator-federation/imperator/spoke/internal/controller/nodepool"
	"github.com/imperator-federation/imperator/test/util/framework"
	"github.com/imperator-federation/imperator/test/util/harness"
)

// environment is the node-pool controllers, in a multicluster manager
// without provider as the agent runs them, against a real API server with
// the spoke CRDs: envtest for the suite (no controller-manager, so no
// garbage collector and no node lifecycle controller: the suite deletes the
// MachineNodePool of a deleted Machine itself and sets node taints by hand),
// a harness cluster (name) for what only a controller-manager shows.
func environment(name string, harness bool) framework.Options {
	return framework.Options{
		Name:    name,
		Harness: harness,
		CRDs:    framework.SpokeCRDs,
		// As spoke/internal/app runs them.
		Manager: &framework.ManagerOptions{SetupMulticluster: nodepool.SetupWithManager, MaxConcurrentReconciles: app.ControllerWorkers},
	}
}

// kubectl runs the kubectl of the control-plane binaries against env's
// envtest API server.
func kubectl(env *framework.Environment, args ...string) (string, error) {
	user, err := env.Envtest.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("adding a kubectl user: %w", err)
	}
	k, err := user.Kubectl()
	if err != nil {
		return "", fmt.Errorf("configuring kubectl: %w", err)
	}
	k.Path = filepath.Join(harness.BinDir(), "kubectl")
	stdout, stderr, err := k.Run(args...)
	if err != nil {
		errOut, _ := io.ReadAll(stderr)
		return "", fmt.Errorf("kubectl %v: %w: %s", args, err, errOut)
	}
	out, err := io.ReadAll(stdout)
	return string(out), err
}
