package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/imperator-federation/imperator/hub/internal/app"
	"github.com/imperator-federation/imperator/hub/internal/config"
	"github.com/imperator-federation/imperator/internal/version"
)

// Exit codes scripts can rely on (imperatorctl's).
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// failure is an error a command returned after its command line was
// accepted: it exits 1 (or code, when set). Any other error comes from cobra
// refusing the command line and exits 2.
type failure struct {
	code int
	err  error
}

func (f *failure) Error() string {
	if f.err == nil {
		return ""
	}
	return f.err.Error()
}
func (f *failure) Unwrap() error { return f.err }

// failed marks err as the command's own failure (exit 1).
func failed(err error) error {
	if err == nil {
		return nil
	}
	return &failure{code: exitFailure, err: err}
}

// usageError is a command line a command refused itself (exit 2).
func usageError(format string, args ...any) error {
	return &failure{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// run executes the hub's command line and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	root := newRootCommand(stdout, stderr)
	root.SetArgs(goStyleFlags(root, args))
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	code := exitUsage
	var f *failure
	if errors.As(err, &f) {
		code = f.code
	} else {
		err = fmt.Errorf("%w (see `hub --help`)", err)
	}
	if msg := err.Error(); msg != "" {
		_, _ = fmt.Fprintln(stderr, "hub:", msg)
	}
	return code
}

// goStyleFlags rewrites -name and -name=value into --name and --name=value
// for the long flags of root's commands: the hub read its command line with
// Go's flag package, which takes one dash as well as two, and the
// deployments and scripts written for it (extraArgs: -zap-log-level=debug)
// must keep starting it. One-letter flags are pflag shorthands (-h, -v) and
// stay; nothing after "--" is touched, nor the command line of hub token,
// which is imperatorctl's.
func goStyleFlags(root *cobra.Command, args []string) []string {
	long := map[string]bool{"help": true}
	var collect func(*cobra.Command)
	collect = func(c *cobra.Command) {
		if c.DisableFlagParsing {
			return
		}
		add := func(f *pflag.Flag) { long[f.Name] = true }
		c.Flags().VisitAll(add)
		c.PersistentFlags().VisitAll(add)
		for _, sub := range c.Commands() {
			collect(sub)
		}
	}
	collect(root)
	out := make([]string, len(args))
	copy(out, args)
	for i, arg := range out {
		if arg == "--" || (arg == "token" && (i == 0 || !strings.HasPrefix(out[i-1], "-"))) {
			break
		}
		if !strings.HasPrefix(arg, "-") || strings.HasPrefix(arg, "--") {
			continue
		}
		if name, _, _ := strings.Cut(arg[1:], "="); len(name) > 1 && long[name] {
			out[i] = "-" + arg
		}
	}
	return out
}

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	info := version.Get()
	root := &cobra.Command{
		Use:   "hub",
		Short: "The Imperator hub: aggregates spoke agents and answers fleet queries",
		Long: `The Imperator hub accepts spoke agents' Report streams over mutually
authenticated gRPC, keeps every cluster's Machines and usage in memory and in
the hub cluster's Kubernetes API, tracks cluster liveness and answers queries.

Run without a subcommand, with the flags of 'hub serve', it serves: that is
how the shipped manifests start it.`,
		Version:           info.Version,
		Args:              cobra.NoArgs,
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetVersionTemplate(versionLine(info) + "\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return err })
	bindServe(root)
	root.AddCommand(serveCommand(), caCommand(), tokenCommand(), clientCertCommand(), versionCommand())
	return root
}

func versionLine(info version.Info) string {
	line := "hub " + info.Version
	if info.GitCommit != "" {
		line += " commit " + info.GitCommit
	}
	return line + " " + info.GoVersion + " " + info.Platform
}

func versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the hub's build: version, commit, Go toolchain, platform",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionLine(version.Get()))
			return failed(err)
		},
	}
}

func serveCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the hub (the default when no subcommand is given)",
		Args:  cobra.NoArgs,
	}
	bindServe(cmd)
	return cmd
}

// bindServe gives cmd the server's flags (the hub configuration's and the
// logger's, Go flags shown as pflags) and makes it serve.
func bindServe(cmd *cobra.Command) {
	cfg := config.Default()
	goFlags := flag.NewFlagSet("hub", flag.ContinueOnError)
	cfg.BindFlags(goFlags)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(goFlags)
	cmd.Flags().AddGoFlagSet(goFlags)
	cmd.RunE = func(*cobra.Command, []string) error {
		cfg.Complete()
		if err := cfg.Validate(); err != nil {
			return usageError("invalid configuration:\n%w", err)
		}
		ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
		restConfig, err := restConfigFor(cfg.Kubeconfig)
		if err != nil {
			return failed(err)
		}
		return failed(app.Run(ctrl.SetupSignalHandler(), cfg, restConfig, app.Options{}))
	}
}

// adminFlags binds the flags every admin subcommand (ca, client-cert) shares
// to fs and returns the configuration they fill.
func adminFlags(fs *pflag.FlagSet) *config.Config {
	cfg := config.Default()
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", cfg.Kubeconfig, "Kubeconfig of the hub cluster (default: in-cluster or $KUBECONFIG).")
	fs.StringVar(&cfg.Namespace, "namespace", cfg.Namespace, "Namespace of the hub CA and bootstrap tokens.")
	fs.StringVar(&cfg.CASecret, "ca-secret", cfg.CASecret, "Secret in --namespace holding the hub CA.")
	return &cfg
}

func restConfigFor(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := ctrl.GetConfig()
		if err != nil {
			return nil, fmt.Errorf("loading kubeconfig: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading --kubeconfig %s: %w", kubeconfig, err)
	}
	if cfg.QPS == 0 {
		// As ctrl.GetConfig does in-cluster: no client-side rate limit,
		// the API server's priority and fairness decides. client-go's
		// default (5 requests/s per resource, bursts of 10) would let a
		// replica take in at most about 2.5 new clusters a second (each is
		// an inventory create and a status write), 10,000 in over half an
		// hour on two replicas, whatever the persister's workers. At
		// steady state the hub writes only on change (about 1 write/s at
		// 10,000 idle spokes), so the limit bought nothing there.
		cfg.QPS = -1
	}
	return cfg, nil
}
