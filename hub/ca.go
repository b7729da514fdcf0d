package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/hub/internal/config"
	"github.com/imperator-federation/imperator/hub/internal/hubca"
	"github.com/imperator-federation/imperator/hub/internal/join"
	"github.com/imperator-federation/imperator/hub/internal/query"
	"github.com/imperator-federation/imperator/internal/cli"
	"github.com/imperator-federation/imperator/internal/pki"
	"github.com/imperator-federation/imperator/internal/schemes"
)

// adminTimeout bounds what an admin subcommand does against the hub cluster.
const adminTimeout = 30 * time.Second

// caCommand is `hub ca`: bare or with print, it prints the CA bundle; init
// creates the CA. Only init ever creates one, so that a command run against
// the wrong cluster leaves no stray CA there.
func caCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Print (bare or 'print') or create ('init') the hub CA",
		Long: `The hub CA lives in a Secret of the hub namespace (--ca-secret). It signs the
hub's serving certificate and every client certificate; its certificate is the
bundle spokes verify the hub with (--hub-ca-file). The hub creates it at its
first start; 'hub ca init' creates it beforehand. No other command creates it.`,
		Args: cobra.NoArgs,
	}
	printCA := func(cfg *config.Config) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), adminTimeout)
			defer cancel()
			ca, err := loadCA(ctx, cfg)
			if err != nil {
				return failed(err)
			}
			_, err = cmd.OutOrStdout().Write(ca.CertPEM)
			return failed(err)
		}
	}
	cmd.RunE = printCA(adminFlags(cmd.Flags()))

	printCmd := &cobra.Command{
		Use:   "print",
		Short: "Print the hub CA bundle (PEM); fails when the hub cluster has no CA",
		Args:  cobra.NoArgs,
	}
	printCmd.RunE = printCA(adminFlags(printCmd.Flags()))

	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Create the hub CA and print its bundle; fails when one exists",
		Args:  cobra.NoArgs,
	}
	initCfg := adminFlags(initCmd.Flags())
	initCmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx, cancel := context.WithTimeout(cmd.Context(), adminTimeout)
		defer cancel()
		c, err := adminClient(initCfg)
		if err != nil {
			return failed(err)
		}
		ca, err := hubca.Create(ctx, c, initCfg.Namespace, initCfg.CASecret)
		if err != nil {
			return failed(err)
		}
		_, err = cmd.OutOrStdout().Write(ca.CertPEM)
		return failed(err)
	}
	cmd.AddCommand(printCmd, initCmd)
	return cmd
}

// loadCA reads the hub CA from the hub cluster; it never creates one.
func loadCA(ctx context.Context, cfg *config.Config) (*pki.CA, error) {
	c, err := adminClient(cfg)
	if err != nil {
		return nil, err
	}
	return hubca.Load(ctx, c, cfg.Namespace, cfg.CASecret)
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

// tokenCommand is `hub token`: imperatorctl's token command (internal/cli)
// run against the hub cluster's API with the caller's kubeconfig: the same
// flags, output formats and exit codes as `imperatorctl token`, for the
// first token of a hub that has no admin certificate yet. Its command line
// is parsed by that command.
func tokenCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "token create|list|revoke",
		Short:              "Create, list and revoke spokes' bootstrap tokens (as imperatorctl token)",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := runToken(cmd, args); code != exitOK {
				return &failure{code: code}
			}
			return nil
		},
	}
}

func runToken(cmd *cobra.Command, args []string) int {
	cfg := config.Default()
	env := cli.Env{Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr(), Getenv: os.Getenv}
	tokens := cli.NewHubTokenCommand(env, cli.HubTokens{
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
	ctx, cancel := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	return cli.Execute(ctx, tokens, append([]string{"token"}, args...), env)
}
