// Command hub is the Imperator hub: it accepts spoke agents' Report streams
// over mutually authenticated gRPC, keeps every cluster's Machines and usage
// in memory and in the hub cluster's Kubernetes API (OCM ManagedCluster plus a
// ClusterInventory per cluster), and tracks cluster liveness.
//
//	hub [flags]                                   serve (default)
//	hub token create [--ttl 24h] [--cluster NAME] [--description TEXT]
//	hub token list
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
	"text/tabwriter"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/imperator-federation/imperator/hub/internal/app"
	"github.com/imperator-federation/imperator/hub/internal/config"
	"github.com/imperator-federation/imperator/hub/internal/hubca"
	"github.com/imperator-federation/imperator/hub/internal/join"
	"github.com/imperator-federation/imperator/internal/pki"
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
			return runToken(args[1:])
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
	scheme, err := app.Scheme()
	if err != nil {
		return nil, err
	}
	return client.New(restConfig, client.Options{Scheme: scheme})
}

func runToken(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: hub token create|list|revoke")
	}
	fs, cfg := adminFlags("token " + args[0])
	var opts join.CreateOptions
	if args[0] == "create" {
		fs.DurationVar(&opts.TTL, "ttl", join.DefaultTokenTTL, "How long the token can be used.")
		fs.StringVar(&opts.ClusterName, "cluster", "", "Bind the token to this cluster name (default: any).")
		fs.StringVar(&opts.Description, "description", "", "Free-form note stored with the token.")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	c, err := adminClient(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 30*time.Second)
	defer cancelTimeout()
	tokens := join.NewTokens(c, cfg.Namespace, nil)
	switch args[0] {
	case "create":
		token, info, err := tokens.Create(ctx, opts)
		if err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "Token", info.ID, "expires", info.Expiration.Format(time.RFC3339), "- it is shown only once:")
		fmt.Println(token)
	case "list":
		list, err := tokens.List(ctx)
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tEXPIRES\tCLUSTER\tUSED BY\tDESCRIPTION")
		for _, t := range list {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", t.ID, t.Expiration.Format(time.RFC3339), orDash(t.ClusterName), orDash(t.UsedBy), t.Description)
		}
		return w.Flush()
	case "revoke":
		if fs.NArg() != 1 {
			return fmt.Errorf("usage: hub token revoke ID")
		}
		if err := tokens.Revoke(ctx, fs.Arg(0)); err != nil {
			return err
		}
		fmt.Println("revoked", fs.Arg(0))
	default:
		return fmt.Errorf("unknown token command %q: want create, list or revoke", args[0])
	}
	return nil
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
	return cfg, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
