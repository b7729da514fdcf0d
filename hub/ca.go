package main

import (
	"context"
	"fmt"
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
	"github.com/imperator-federation/imperator/internal/schemes"
)

// adminTimeout bounds what an admin subcommand does against the hub cluster.
const adminTimeout = 30 * time.Second

// caCommand is `hub ca`: bare or with print, it prints the CA bundle; init
// creates the CA; rotate replaces it in three steps (rotateCommand). Only
// init ever creates a CA from nothing, so that a command run against the
// wrong cluster leaves no stray CA there.
func caCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Print (bare or 'print'), create ('init') or rotate ('rotate') the hub CA",
		Long: `The hub CA lives in a Secret of the hub namespace (--ca-secret). It signs the
hub's serving certificate and every client certificate; its certificate is the
bundle spokes verify the hub with (--hub-ca-file). The hub creates it at its
first start; 'hub ca init' creates it beforehand. No other command creates it;
'hub ca rotate' replaces it without cutting off a spoke or a person.`,
		Args: cobra.NoArgs,
	}
	printCA := func(cfg *config.Config) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), adminTimeout)
			defer cancel()
			trust, err := loadTrust(ctx, cfg)
			if err != nil {
				return failed(err)
			}
			_, err = cmd.OutOrStdout().Write(trust.Bundle())
			return failed(err)
		}
	}
	cmd.RunE = printCA(adminFlags(cmd.Flags()))

	printCmd := &cobra.Command{
		Use:   "print",
		Short: "Print the hub CA bundle (PEM; both CAs during a rotation); fails when the hub cluster has no CA",
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
	cmd.AddCommand(printCmd, initCmd, rotateCommand())
	return cmd
}

// rotateCommand is `hub ca rotate`: stage a next CA, --promote it, --finish
// by dropping the previous one. Each step is idempotent; a step out of order
// is refused with the step to run first.
func rotateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rotate [--promote | --finish [--force]]",
		Short: "Rotate the hub CA in three steps: stage a next CA, --promote it, --finish",
		Long: `A rotation never cuts off a spoke or a person:

  hub ca rotate            stage a next CA. Both CAs are trusted; spokes that join
                           or renew get the bundle of both, 'hub ca print' prints it.
  hub ca rotate --promote  the next CA becomes current: it signs new certificates
                           and the hub's serving certificate (presented with a copy
                           of the new CA signed by the previous one, so that clients
                           trusting only the previous CA still verify the hub).
  hub ca rotate --finish   drop the previous CA. Refused, naming the clusters, while
                           a spoke still connects with a certificate of the previous
                           CA, unless --force. Only spokes a running replica saw
                           within the last minute are checked: a spoke offline
                           meanwhile with a certificate of the previous CA must
                           join again afterwards.

Every hub replica follows each step within 10s, without a restart. Running a
step twice changes nothing; a step out of order is refused.`,
		Args: cobra.NoArgs,
	}
	cfg := adminFlags(cmd.Flags())
	promote := cmd.Flags().Bool("promote", false, "Make the staged next CA current.")
	finish := cmd.Flags().Bool("finish", false, "Drop the previous CA once every spoke presents a certificate of the current one.")
	force := cmd.Flags().Bool("force", false, "With --finish: drop the previous CA although spokes still present its certificates (they must join again).")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		step := hubca.StepStage
		switch {
		case *promote && *finish:
			return usageError("--promote and --finish: choose one step")
		case *force && !*finish:
			return usageError("--force: only with --finish")
		case *promote:
			step = hubca.StepPromote
		case *finish:
			step = hubca.StepFinish
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), adminTimeout)
		defer cancel()
		c, err := adminClient(cfg)
		if err != nil {
			return failed(err)
		}
		message, err := hubca.Rotate(ctx, c, cfg.Namespace, cfg.CASecret, step, hubca.RotateOptions{Force: *force})
		if err != nil {
			return failed(err)
		}
		out := cmd.OutOrStdout()
		_, _ = fmt.Fprintln(out, message)
		_, err = fmt.Fprint(out, rotateNextSteps[step])
		return failed(err)
	}
	return cmd
}

// rotateNextSteps is what the operator does after each step.
var rotateNextSteps = map[hubca.Step]string{
	hubca.StepStage: `Next:
  - Give spokes the bundle: 'hub ca print > hub-ca.crt' and update every agent's
    --hub-ca-file (agents also get it at their next renewal or join).
  - imperatorctl configurations: replace certificate-authority(-data) with the
    bundle, or re-issue them with 'hub client-cert --name NAME --role ROLE --hub-address HOST:PORT'.
  - Then: 'hub ca rotate --promote'.
`,
	hubca.StepPromote: `Next:
  - Spokes move to the new CA when they renew their certificates (at two thirds of
    their life; 'imperatorctl clusters' lists them). 'hub ca rotate --finish' names
    those still on the previous CA.
  - People: re-issue every certificate-based imperatorctl configuration now, with
    'hub client-cert --name NAME --role ROLE --hub-address HOST:PORT' (it signs with
    the new CA and carries the bundle); revoke the old ones. Configurations that use
    a kubeconfig token only need the bundle ('hub ca print').
  - Then: 'hub ca rotate --finish'.
`,
	hubca.StepFinish: `Spokes and imperatorctl configurations verify the hub with the current CA only from now on;
'hub ca print' prints it.
`,
}

// loadTrust reads the hub CA Secret from the hub cluster; it never creates one.
func loadTrust(ctx context.Context, cfg *config.Config) (*hubca.Trust, error) {
	c, err := adminClient(cfg)
	if err != nil {
		return nil, err
	}
	return hubca.LoadTrust(ctx, c, cfg.Namespace, cfg.CASecret)
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
