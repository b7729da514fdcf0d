// Command hub is the Imperator hub: it accepts spoke agents' Report streams
// over mutually authenticated gRPC, keeps every cluster's Machines and usage
// in memory and in the hub cluster's Kubernetes API (OCM ManagedCluster plus a
// ClusterInventory per cluster), and tracks cluster liveness.
//
//	hub [flags]                                   serve (default)
//	hub token create [--ttl 24h] [--cluster NAME] [--description TEXT]   the same command as imperatorctl token,
//	hub token list [-o table|wide|json|yaml]                            run with the hub cluster's kubeconfig
//	hub token revoke ID
//	hub ca                                        print the hub CA bundle (PEM) for spokes' --hub-ca-file
//	hub client-cert --name N --role viewer|admin --hub-address H
//	                                              print an imperatorctl configuration with a new client certificate
//	hub client-cert revoke SERIAL                 revoke a client certificate on every hub replica
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/imperator-federation/imperator/hub/internal/app"
	"github.com/imperator-federation/imperator/hub/internal/config"
	"github.com/imperator-federation/imperator/hub/internal/hubca"
	"github.com/imperator-federation/imperator/hub/internal/join"
	"github.com/imperator-federation/imperator/hub/internal/query"
	"github.com/imperator-federation/imperator/internal/cli"
	"github.com/imperator-federation/imperator/internal/pki"
	"github.com/imperator-federation/imperator/internal/schemes"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "hub:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "token":
			os.Exit(runToken(args[1:]))
		case "ca":
			return runCA(args[1:])
		case "client-cert":
			return runClientCert(args[1:])
		}
	}
	return serve(args)
}

func serve(args []string) error {
	cfg := config.Default()
	fs := flag.NewFlagSet("hub", flag.ContinueOnError)
	cfg.BindFlags(fs)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil // -help printed the usage: not a failure
		}
		return err
	}
	cfg.Complete()
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	restConfig, err := restConfigFor(cfg.Kubeconfig)
	if err != nil {
		return err
	}
	return app.Run(ctrl.SetupSignalHandler(), cfg, restConfig, app.Options{})
}

// adminFlags are the flags of the token and ca subcommands.
func adminFlags(name string) (*flag.FlagSet, *config.Config) {
	cfg := config.Default()
	fs := flag.NewFlagSet("hub "+name, flag.ContinueOnError)
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", cfg.Kubeconfig, "Kubeconfig of the hub cluster.")
	fs.StringVar(&cfg.Namespace, "namespace", cfg.Namespace, "Namespace of the hub CA and bootstrap tokens.")
	fs.StringVar(&cfg.CASecret, "ca-secret", cfg.CASecret, "Secret in --namespace holding the hub CA.")
	return fs, &cfg
}

func adminClient(cfg *config.Config) (client.Client, error) {
	restConfig, err := restConfigFor(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	scheme, err := schemes.Hub()
	if err != nil {
		return nil, err
	}
	return client.New(restConfig, client.Options{Scheme: scheme})
}

// runToken runs imperatorctl's token command (internal/cli) against the
// hub cluster's API with the caller's kubeconfig: the same flags, output
// formats and exit codes as `imperatorctl token`, for the first token of a
// hub that has no admin certificate yet.
func runToken(args []string) int {
	cfg := config.Default()
	env := cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	cmd := cli.NewHubTokenCommand(env, cli.HubTokens{
		BindFlags: func(fs *pflag.FlagSet) {
			fs.StringVar(&cfg.Kubeconfig, "kubeconfig", cfg.Kubeconfig, "Kubeconfig of the hub cluster (default: in-cluster or $KUBECONFIG).")
			fs.StringVar(&cfg.Namespace, "namespace", cfg.Namespace, "Namespace of the bootstrap tokens.")
		},
		Open: func(context.Context) (cli.TokenAPI, string, error) {
			c, err := adminClient(&cfg)
			if err != nil {
				return nil, "", err
			}
			return query.NewTokens(join.NewTokens(c, cfg.Namespace, nil)), "the hub cluster's API server", nil
		},
	})
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	return cli.Execute(ctx, cmd, append([]string{"token"}, args...), env)
}

func runCA(args []string) error {
	fs, cfg := adminFlags("ca")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ca, err := loadCA(cfg)
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(ca.CertPEM)
	return err
}

// loadCA reads the hub CA from the hub cluster, creating it on first use.
func loadCA(cfg *config.Config) (*pki.CA, error) {
	c, err := adminClient(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return hubca.LoadOrCreate(ctx, c, cfg.Namespace, cfg.CASecret)
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
