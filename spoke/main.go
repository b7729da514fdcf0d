// Command spoke is the Imperator agent of one member cluster. It embeds every
// controller of the spoke — Machine (reservations, usage), node pool (node
// labels, annotation, taints), the Pod Resource Injector and the Machine
// validator — and, given a hub address, reports to the hub. It keeps working
// when the hub is unreachable.
//
// With --clusters-from=kubeconfig-secrets (hosted mode) the agent runs in a
// management cluster instead and serves every member cluster whose kubeconfig
// Secret it finds there (package hosted): the same controllers, a reporter
// and webhooks per member.
//
// main parses and checks the flags; package app assembles and runs the agent.
package main

import (
	"flag"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/imperator-federation/imperator/internal/version"
	"github.com/imperator-federation/imperator/spoke/internal/app"
	"github.com/imperator-federation/imperator/spoke/internal/config"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "spoke:", err)
		os.Exit(1)
	}
}

func run() error {
	// flag.CommandLine: controller-runtime's --kubeconfig is registered
	// there, and ctrl.GetConfig reads it.
	cfg, zapOpts, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	return app.Run(ctrl.SetupSignalHandler(), cfg, restConfig, app.Options{Version: version.Get().Version})
}

// parseFlags binds the agent's and the logger's flags to fs, parses args,
// completes the configuration's defaults and validates it: an error names
// every invalid flag.
func parseFlags(fs *flag.FlagSet, args []string) (config.Config, zap.Options, error) {
	cfg := config.Default()
	cfg.BindFlags(fs)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return config.Config{}, zapOpts, err
	}
	cfg.Complete()
	if err := cfg.Validate(); err != nil {
		return config.Config{}, zapOpts, fmt.Errorf("invalid configuration:\n%w", err)
	}
	return cfg, zapOpts, nil
}
