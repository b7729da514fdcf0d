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
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/imperator-federation/imperator/internal/version"
	"github.com/imperator-federation/imperator/spoke/internal/app"
	"github.com/imperator-federation/imperator/spoke/internal/config"
	"github.com/imperator-federation/imperator/spoke/internal/migrate"
	"github.com/imperator-federation/imperator/spoke/internal/uninstall"
)

func main() {
	if code, done := runCommand(os.Args[1:], os.Stdout, os.Stderr); done {
		os.Exit(code)
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "spoke:", err)
		os.Exit(1)
	}
}

// runCommand answers the command lines that do not start the agent:
// `spoke version` and `--version` print the build, `spoke uninstall` cleans
// up after the agent (package uninstall), `spoke migrate preflight` reports
// what the original Imperator left (package migrate), and any other word is a usage
// error (exit 2) rather than an agent started with it ignored. done is false
// when the agent is to start.
func runCommand(args []string, stdout, stderr io.Writer) (code int, done bool) {
	if len(args) > 0 && args[0] == "uninstall" {
		return uninstall.Main(args[1:], stdout, stderr), true
	}
	if len(args) > 0 && args[0] == "version" {
		if len(args) > 1 {
			_, _ = fmt.Fprintf(stderr, "spoke: version takes no arguments, got %q\n", args[1:])
			return 2, true
		}
		_, _ = fmt.Fprintln(stdout, versionLine())
		return 0, true
	}
	if len(args) > 0 && args[0] == "migrate" {
		// `spoke migrate preflight`: what the original Imperator left (docs/migration.md).
		return migrate.Command(context.Background(), args[1:], stdout, stderr), true
	}
	for _, arg := range args {
		if arg == "--" {
			break
		}
		if arg == "--version" || arg == "-version" {
			_, _ = fmt.Fprintln(stdout, versionLine())
			return 0, true
		}
	}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		_, _ = fmt.Fprintf(stderr, "spoke: unknown command %q: the agent takes only flags (see `spoke --help`), `spoke version`, `spoke uninstall` or `spoke migrate preflight`\n", args[0])
		return 2, true
	}
	return 0, false
}

func versionLine() string {
	info := version.Get()
	line := "spoke " + info.Version
	if info.GitCommit != "" {
		line += " commit " + info.GitCommit
	}
	return line + " " + info.GoVersion + " " + info.Platform
}

func run() error {
	// flag.CommandLine: controller-runtime's --kubeconfig is registered
	// there, and ctrl.GetConfig reads it.
	cfg, zapOpts, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		return err
	}
	if flag.CommandLine.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q after the flags: the agent takes only flags", flag.CommandLine.Arg(0))
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
