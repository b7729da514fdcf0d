package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/durationpb"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

var tokenColumns = []column{{name: "ID"}, {name: "EXPIRES"}, {name: "CLUSTER"}, {name: "USED-BY"}, {name: "DESCRIPTION"}}

func tokenRow(t *table, tok *queryv1.Token) {
	expires := "-"
	if tok.GetExpiration() != nil {
		expires = tok.GetExpiration().AsTime().UTC().Format(time.RFC3339)
	}
	t.add(tok.GetId(), expires, tok.GetClusterName(), tok.GetUsedBy(), tok.GetDescription())
}

// tokenCommand is the token command group; path is how its help names it.
func (p *program) tokenCommand(path string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Create, list and revoke bootstrap tokens for joining spokes",
		Long: fmt.Sprintf(`Bootstrap tokens let a new spoke agent join the hub once and obtain its
certificate. %[1]s create prints the token (it is shown only once);
%[1]s list shows tokens without their secrets; %[1]s revoke deletes one.`, path),
		// A group: without a subcommand it is a usage error, as before cobra.
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fail(ExitUsage, "unknown token command %q: want create, list or revoke", args[0])
			}
			return fail(ExitUsage, "usage: %s create|list|revoke", path)
		},
	}
	cmd.AddCommand(p.tokenCreateCommand(), p.tokenListCommand(), p.tokenRevokeCommand())
	return cmd
}

func (p *program) tokenCreateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "create",
		Short:   "Create a bootstrap token and print it (once)",
		Example: "  token create --cluster spoke-c --ttl 1h > join-token",
		Args:    cobra.NoArgs,
	}
	req := &queryv1.CreateTokenRequest{}
	var ttl time.Duration
	fs := cmd.Flags()
	fs.DurationVar(&ttl, "ttl", 0, "How long the token can be used (hub default 24h; at most 720h).")
	fs.StringVar(&req.ClusterName, "cluster", "", "Bind the token to this cluster name (default: any).")
	fs.StringVar(&req.Description, "description", "", "Free-form note stored with the token.")
	return p.leaf(cmd, subcommand{
		validate: func(*command) error {
			if ttl < 0 {
				return fail(ExitUsage, "--ttl %s: must be positive", ttl)
			}
			if ttl > 0 {
				req.Ttl = durationpb.New(ttl)
			}
			return nil
		},
		run: func(c *command) error {
			ctx, cancel := c.unary()
			defer cancel()
			resp, err := c.tokens.CreateToken(ctx, req)
			if err != nil {
				return c.callError(err)
			}
			if c.printer.structured() {
				return c.printer.message(resp)
			}
			_, _ = fmt.Fprintf(c.env.Stderr, "Token %s expires %s; it is shown only once:\n", resp.GetInfo().GetId(), resp.GetInfo().GetExpiration().AsTime().UTC().Format(time.RFC3339))
			c.printer.printf("%s\n", resp.GetToken())
			return nil
		},
	})
}

func (p *program) tokenListCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "list", Short: "List bootstrap tokens (without their secrets)", Args: cobra.NoArgs}
	return p.leaf(cmd, subcommand{
		run: func(c *command) error {
			ctx, cancel := c.unary()
			defer cancel()
			resp, err := c.tokens.ListTokens(ctx, &queryv1.ListTokensRequest{})
			if err != nil {
				return c.callError(err)
			}
			if c.printer.structured() {
				return c.printer.message(resp)
			}
			t := &table{columns: tokenColumns}
			for _, tok := range resp.GetTokens() {
				tokenRow(t, tok)
			}
			return c.printer.table(t, true)
		},
	})
}

func (p *program) tokenRevokeCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "revoke ID", Short: "Revoke (delete) a bootstrap token by its ID"}
	return p.leaf(cmd, subcommand{
		validate: func(c *command) error {
			if len(c.args) != 1 {
				return fail(ExitUsage, "usage: %s ID", c.name)
			}
			return nil
		},
		run: func(c *command) error {
			ctx, cancel := c.unary()
			defer cancel()
			if _, err := c.tokens.RevokeToken(ctx, &queryv1.RevokeTokenRequest{Id: c.args[0]}); err != nil {
				return c.callError(err)
			}
			c.printer.printf("revoked %s\n", c.args[0])
			return nil
		},
	})
}

// HubTokens is how the hub binary's token command reaches the tokens.
type HubTokens struct {
	// BindFlags adds the flags that say where the tokens are (kubeconfig,
	// namespace).
	BindFlags func(*pflag.FlagSet)
	// Open returns the token calls, run in this process against the hub
	// cluster's API, and how error messages name that API.
	Open func(ctx context.Context) (TokenAPI, string, error)
}

// NewHubTokenCommand returns the hub binary's `token` command, under a root
// named hub (run it with args starting with "token"): the same subcommands,
// flags, output formats and exit codes as `imperatorctl token`, run with the
// caller's kubeconfig instead of an admin certificate, for the first token
// of a hub that has no admin certificate yet.
func NewHubTokenCommand(env Env, hub HubTokens) *cobra.Command {
	if env.Now == nil {
		env.Now = time.Now
	}
	p := &program{env: env}
	p.connect = func(c *command) (func(), error) {
		tokens, where, err := hub.Open(c.ctx)
		if err != nil {
			return nil, fail(ExitUsage, "%v", err)
		}
		c.tokens, c.hub = tokens, where
		return func() {}, nil
	}
	root := &cobra.Command{
		Use:               "hub",
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	cmd := p.tokenCommand("hub token")
	p.g.bindOutput(cmd.PersistentFlags())
	if hub.BindFlags != nil {
		hub.BindFlags(cmd.PersistentFlags())
	}
	root.AddCommand(cmd)
	registerOutputCompletion(cmd)
	setIO(root, env)
	return root
}
