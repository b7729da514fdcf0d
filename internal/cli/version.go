package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/imperator-federation/imperator/internal/version"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

func (p *program) versionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of imperatorctl and of the hub",
		Long: `Version prints imperatorctl's build and asks the hub for its own (the
GetVersion call, open to viewers). With --client it does not contact the hub.
When the hub cannot be reached (or none is configured), the client's version is
still printed and the exit code says why the hub's is missing.`,
		Args: cobra.NoArgs,
	}
	var clientOnly bool
	cmd.Flags().BoolVar(&clientOnly, "client", false, "Only the client's version; do not contact the hub.")
	return p.leaf(cmd, subcommand{
		offline:          func() bool { return clientOnly },
		mayFailToConnect: true,
		run: func(c *command) error {
			answer := &queryv1.GetVersionResponse{}
			callErr := c.connectErr
			if !clientOnly && callErr == nil {
				ctx, cancel := c.unary()
				defer cancel()
				if answer, callErr = c.client.GetVersion(ctx, &queryv1.GetVersionRequest{}); callErr != nil {
					callErr = c.callError(callErr)
				}
			}
			if err := c.printer.versions(clientVersion(), answer.GetHub()); err != nil {
				return err
			}
			return callErr
		},
	})
}

func clientVersion() *queryv1.Version {
	v := version.Get()
	return &queryv1.Version{Version: v.Version, GitCommit: v.GitCommit, GoVersion: v.GoVersion, Platform: v.Platform}
}

// versions prints the client's and (when known) the hub's version: two
// lines for people, {"client": ..., "hub": ...} for scripts.
func (p *printer) versions(client, hub *queryv1.Version) error {
	if p.structured() {
		doc := map[string]any{}
		for key, v := range map[string]*queryv1.Version{"client": client, "hub": hub} {
			if v == nil {
				continue
			}
			raw, err := protojson.Marshal(v)
			if err != nil {
				return fmt.Errorf("encoding the answer: %w", err)
			}
			doc[key] = rawJSON(raw)
		}
		return p.value(doc)
	}
	line := func(who string, v *queryv1.Version) {
		p.printf("%s Version: %s", who, v.GetVersion())
		if p.format == formatWide {
			p.printf(" (commit %s, %s, %s)", orDash(v.GetGitCommit()), v.GetGoVersion(), v.GetPlatform())
		}
		p.printf("\n")
	}
	line("Client", client)
	if hub != nil {
		line("Hub", hub)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// completionCommand prints shell completion scripts generated from the
// command tree (and completes flags' values through the hidden __complete
// command cobra adds).
func completionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print the shell completion script for bash, zsh or fish",
		Long: `Completion prints a script that makes your shell complete imperatorctl's
commands, flags and -o formats, and the names of clusters, holds and machine
types, which it asks the hub for (with the connection flags on the command
line, within 3 s). Load it in the current shell, or install it:

  bash:  source <(imperatorctl completion bash)
         imperatorctl completion bash > /etc/bash_completion.d/imperatorctl
  zsh:   imperatorctl completion zsh > "${fpath[1]}/_imperatorctl"
  fish:  imperatorctl completion fish > ~/.config/fish/completions/imperatorctl.fish`,
		ValidArgs:             []string{"bash", "zsh", "fish"},
		Args:                  cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			root, out := cmd.Root(), cmd.OutOrStdout()
			var err error
			switch args[0] {
			case "bash":
				err = root.GenBashCompletionV2(out, true)
			case "zsh":
				err = root.GenZshCompletion(out)
			case "fish":
				err = root.GenFishCompletion(out, true)
			}
			return asExit(err)
		},
	}
}
