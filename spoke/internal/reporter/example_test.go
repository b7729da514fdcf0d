package reporter_test

import (
	"fmt"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/spoke/internal/config"
	"github.com/imperator-federation/imperator/spoke/internal/reporter"
)

// Example shows how the agent's main wires the reporter: the manager's cache
// for Machines and MachineNodePools, an uncached client for the credentials
// Secret, and the agent's typed configuration.
func Example() {
	cfg := config.Default()
	cfg.Hub.Address, cfg.Hub.ClusterName, cfg.Hub.CAFile = "hub.example.com:9443", "cluster-a", "/etc/imperator/hub-ca.crt"
	var restConfig *rest.Config // from ctrl.GetConfig()
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{})
	if err != nil {
		return
	}
	direct, err := client.New(restConfig, client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return
	}
	if cfg.Hub.Address == "" {
		return // stand-alone agent
	}
	hubReporter, err := reporter.New(reporter.Options{
		Cache:        mgr.GetCache(),
		Client:       direct,
		Namespace:    cfg.Namespace,
		Hub:          cfg.Hub,
		Token:        cfg.JoinToken,
		AgentVersion: "v0.1.0",
		Log:          ctrl.Log.WithName("reporter"),
	})
	if err != nil {
		fmt.Println("setting up the hub reporter:", err)
		return
	}
	if err := mgr.Add(hubReporter); err != nil {
		fmt.Println("adding the hub reporter:", err)
	}
}
