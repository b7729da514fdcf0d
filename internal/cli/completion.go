package cli

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// completionTimeout bounds the hub call behind a completion: the shell
// waits for it.
const completionTimeout = 3 * time.Second

// completeFromHub completes an argument with the names list returns, asking
// the hub with the command line's connection flags; nothing (and no file
// names) when the hub cannot be asked.
func (p *program) completeFromHub(cmd *cobra.Command, args []string, toComplete string, list func(context.Context, queryv1.QueryClient) ([]string, error)) ([]string, cobra.ShellCompDirective) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	c := &command{env: p.env, g: &p.g, name: cmd.CommandPath(), ctx: ctx}
	closeFn, err := p.connect(c)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(ctx, min(p.g.timeout, completionTimeout))
	defer cancel()
	names, err := list(ctx, c.client)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, toComplete) && !slices.Contains(args, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), cobra.ShellCompDirectiveNoFileComp
}

// completeClusters completes cluster names from the hub.
func (p *program) completeClusters(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	return p.completeFromHub(cmd, args, toComplete, func(ctx context.Context, q queryv1.QueryClient) ([]string, error) {
		resp, err := q.ListClusters(ctx, &queryv1.ListClustersRequest{})
		var names []string
		for _, cl := range resp.GetClusters() {
			names = append(names, cl.GetName())
		}
		return names, err
	})
}

// completeOneCluster completes the one cluster name a command takes.
func (p *program) completeOneCluster(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return p.completeClusters(cmd, args, toComplete)
}

// completeHolds completes the one hold name a command takes.
func (p *program) completeHolds(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return p.completeFromHub(cmd, args, toComplete, func(ctx context.Context, q queryv1.QueryClient) ([]string, error) {
		resp, err := q.ListHolds(ctx, &queryv1.ListHoldsRequest{})
		var names []string
		for _, h := range resp.GetHolds() {
			names = append(names, h.GetName())
		}
		return names, err
	})
}

// completeTypes completes the one machine type a command takes (TYPE and
// GROUP/TYPE).
func (p *program) completeTypes(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return p.completeFromHub(cmd, args, toComplete, func(ctx context.Context, q queryv1.QueryClient) ([]string, error) {
		resp, err := q.ListMachines(ctx, &queryv1.ListMachinesRequest{})
		var names []string
		for _, m := range resp.GetMachineTypes() {
			names = append(names, m.GetType(), m.GetGroup()+"/"+m.GetType())
		}
		return names, err
	})
}
