package cli

import (
	"bufio"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// clusterCommand administers the fleet's clusters at the hub: today,
// deregistering one.
func (p *program) clusterCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster deregister NAME",
		Short: "Administer the fleet's clusters at the hub (deregister)",
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fail(ExitUsage, "unknown cluster command %q: want deregister", args[0])
			}
			return fail(ExitUsage, "usage: imperatorctl cluster deregister NAME [--yes] [--release-holds]")
		},
	}
	cmd.AddCommand(p.deregisterCommand())
	return cmd
}

// deregisterOptions are the flags of cluster deregister.
type deregisterOptions struct {
	yes          bool
	releaseHolds bool
}

func (p *program) deregisterCommand() *cobra.Command {
	var opts deregisterOptions
	cmd := &cobra.Command{
		Use:   "deregister NAME",
		Short: "Remove a cluster from the fleet: the hub forgets it and refuses its spoke until it joins again",
		Long: `Deregister a cluster at the hub (admins only). The hub deletes the cluster's
ManagedCluster: every hub replica ends the spoke's stream, drops the cluster's
figures, and refuses the certificates of that registration from then on, so the
spoke cannot report again until it joins with a new bootstrap token. The
cluster's ClusterInventory and heartbeat Lease are garbage-collected with it.
Nothing on the spoke cluster itself changes (docs/uninstall.md).

The hub refuses while fleet holds still place units on the cluster;
--release-holds releases them first, on every cluster they hold units on (a
fleet hold is all or nothing). Give --timeout enough for those releases.

Without --yes, the command asks you to type the cluster's name.`,
		Example: `  imperatorctl cluster deregister spoke-a
  imperatorctl cluster deregister spoke-a --yes --release-holds --timeout 1m`,
		ValidArgsFunction: p.completeOneCluster,
	}
	cmd.Flags().BoolVarP(&opts.yes, "yes", "y", false, "Deregister without asking to type the cluster's name.")
	cmd.Flags().BoolVar(&opts.releaseHolds, "release-holds", false, "Release the fleet holds that place units on the cluster first, instead of refusing.")
	return p.leaf(cmd, subcommand{
		validate: func(c *command) error {
			if len(c.args) != 1 {
				return fail(ExitUsage, "usage: imperatorctl cluster deregister NAME [--yes] [--release-holds]")
			}
			if err := clusterNames(c); err != nil {
				return err
			}
			if !opts.yes {
				return confirmByName(c, c.args[0])
			}
			return nil
		},
		run: func(c *command) error { return c.deregister(c.args[0], opts) },
	})
}

// confirmByName asks the user to type name on stdin, before anything is
// asked of the hub; anything else, or no terminal to ask on, aborts.
func confirmByName(c *command, name string) error {
	if c.env.Stdin == nil {
		return fail(ExitUsage, "deregistering cluster %q needs a confirmation: pass --yes, or run it where it can ask (no standard input)", name)
	}
	_, _ = fmt.Fprintf(c.env.Stderr, "Deregistering cluster %q removes it from the fleet: the hub forgets its figures and refuses its spoke until it joins again with a new token.\nType the cluster's name to confirm: ", name)
	line, err := bufio.NewReader(c.env.Stdin).ReadString('\n')
	typed := strings.TrimSpace(line)
	if typed == name {
		return nil
	}
	if err != nil && typed == "" {
		return fail(ExitFailure, "not deregistered: no confirmation was typed (pass --yes to skip it)")
	}
	return fail(ExitFailure, "not deregistered: %q typed, not the cluster's name %q", typed, name)
}

// deregister asks the hub to deregister name and says what it did.
func (c *command) deregister(name string, opts deregisterOptions) error {
	ctx, cancel := c.unary()
	defer cancel()
	resp, err := c.client.DeregisterCluster(ctx, &queryv1.DeregisterClusterRequest{Name: name, ReleaseHolds: opts.releaseHolds})
	if err != nil {
		st := status.Convert(err)
		switch st.Code() {
		case codes.NotFound:
			return fail(ExitFailure, "%s", st.Message())
		case codes.FailedPrecondition:
			return fail(ExitFailure, "cluster %q not deregistered: %s", name, st.Message())
		}
		return c.callError(err)
	}
	if c.printer.structured() {
		return c.printer.message(resp)
	}
	for _, h := range resp.GetReleasedHolds() {
		c.printer.printf("fleethold/%s released\n", h)
	}
	c.printer.printf("cluster/%s deregistered\n", name)
	return nil
}
