package reporter_test

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/spoke/internal/config"
	"github.com/imperator-federation/imperator/spoke/internal/reporter"
)

// Example shows how the agent's main wires the reporter: the manager's cache
// for Machines and MachineNodePools, an uncached client for the credentials
// Secret, and the agent's typed configuration. Nothing is contacted until
// the manager starts.
func Example() {
	dir, err := os.MkdirTemp("", "reporter-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = os.RemoveAll(dir) }()
	// --hub-ca-file: the hub CA bundle the agent trusts.
	caFile := filepath.Join(dir, "hub-ca.crt")
	if err := os.WriteFile(caFile, []byte("-----BEGIN CERTIFICATE-----\n...\n"), 0o600); err != nil {
		fmt.Println(err)
		return
	}

	cfg := config.Default()
	cfg.Hub.Address, cfg.Hub.ClusterName, cfg.Hub.CAFile = "hub.example.com:9443", "cluster-a", caFile
	restConfig := &rest.Config{Host: "https://127.0.0.1:6443"} // from ctrl.GetConfig()
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{})
	if err != nil {
		fmt.Println("creating the manager:", err)
		return
	}
	direct, err := client.New(restConfig, client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		fmt.Println("creating the client:", err)
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
		return
	}
	fmt.Println("cluster-a reports to", cfg.Hub.Address, "once the manager starts; runs on every replica:", !hubReporter.NeedLeaderElection())
	// Output: cluster-a reports to hub.example.com:9443 once the manager starts; runs on every replica: true
}
