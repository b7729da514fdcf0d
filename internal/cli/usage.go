package cli

import (
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

var usageColumns = []column{
	{name: "CLUSTER"}, {name: "STATE"}, {name: "GROUP"}, {name: "TYPE"},
	{name: "MAXIMUM"}, {name: "RESERVED"}, {name: "USED"}, {name: "WAITING"}, {name: "QUEUED"}, {name: "HELD"}, {name: "FREE"},
	{name: "OBSERVED", wide: true},
}

func (p *printer) usageRows(t *table, cu *queryv1.ClusterUsage) {
	for _, u := range cu.GetTypes() {
		t.add(cu.GetCluster(), enumName(cu.GetState().String(), statePrefix), u.GetGroup(), u.GetType(),
			itoa(u.GetMaximum()), itoa(u.GetReserved()), itoa(u.GetUsed()), itoa(u.GetWaiting()), itoa(u.GetQueued()), itoa(u.GetHeld()), itoa(u.GetFree()), p.age(cu.GetObservedAt()))
	}
}

func (p *program) usageCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Maximum, reserved, used, waiting, queued, held and free units per type, with fleet totals",
		Long: `Usage shows, per cluster and machine type, the units the Machine offers
(MAXIMUM), held by reservation pods (RESERVED), taken by running guests (USED),
guests not yet running (WAITING), those of them held in line at the agent's
slot gate (QUEUED), the units booked by capacity holds that no guest of the
hold took yet (HELD), and the units a new guest can get now (FREE). FREE never
counts a slot that a waiting or queued guest is about to take, nor a held one. The fleet rows
sum the clusters that are neither offline nor stale.`,
		Example: `  imperatorctl usage
  imperatorctl usage --cluster spoke-a --watch`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	p.g.bindWatch(fs)
	var req queryv1.GetUsageRequest
	var only typeFilter
	fs.StringVar(&req.Cluster, "cluster", "", "Only this cluster.")
	fs.StringVar(&only.typ, "type", "", "Only this machine type (TYPE or GROUP/TYPE); the fleet rows too.")
	fs.StringVar(&only.group, "group", "", "Only this machine group; the fleet rows too.")
	_ = cmd.RegisterFlagCompletionFunc("cluster", p.completeOneCluster)
	return p.leaf(cmd, subcommand{
		objects:  true,
		validate: func(*command) error { return only.validate() },
		run: func(c *command) error {
			if c.g.watch {
				return c.watch(func(t *table, ev *queryv1.ClusterEvent) error {
					c.printer.usageRows(t, only.usage(ev.GetUsage()))
					return nil
				}, usageColumns, req.Cluster)
			}
			ctx, cancel := c.unary()
			defer cancel()
			resp, err := c.client.GetUsage(ctx, &req)
			if err != nil {
				return c.callError(err)
			}
			resp = only.response(resp)
			if c.printer.structured() {
				return c.printer.message(resp)
			}
			if c.printer.objectFormat() {
				return c.printer.objects(resp, asMessages(resp.GetClusters()), namesOf("usage", resp.GetClusters(), (*queryv1.ClusterUsage).GetCluster), true)
			}
			t := &table{columns: usageColumns}
			for _, cu := range resp.GetClusters() {
				c.printer.usageRows(t, cu)
			}
			if req.Cluster == "" {
				for _, u := range resp.GetFleet() {
					t.add("(fleet)", "", u.GetGroup(), u.GetType(), itoa(u.GetMaximum()), itoa(u.GetReserved()), itoa(u.GetUsed()), itoa(u.GetWaiting()), itoa(u.GetQueued()), itoa(u.GetHeld()), itoa(u.GetFree()))
				}
			}
			return c.printer.table(t, true)
		},
	})
}

// typeFilter keeps the usage rows of one machine type and/or group.
type typeFilter struct{ group, typ string }

func (f *typeFilter) validate() error {
	if g, t, ok := strings.Cut(f.typ, "/"); ok {
		if f.group != "" && f.group != g {
			return fail(ExitUsage, "--type %s and --group %s name different groups", f.typ, f.group)
		}
		f.group, f.typ = g, t
	}
	if f.typ != "" {
		if msgs := validation.IsDNS1123Label(f.typ); len(msgs) > 0 {
			return fail(ExitUsage, "--type %q: %s", f.typ, strings.Join(msgs, "; "))
		}
	}
	if f.group != "" {
		if msgs := validation.IsDNS1123Label(f.group); len(msgs) > 0 {
			return fail(ExitUsage, "--group %q: %s", f.group, strings.Join(msgs, "; "))
		}
	}
	return nil
}

func (f typeFilter) keeps(u *queryv1.TypeUsage) bool {
	return (f.typ == "" || u.GetType() == f.typ) && (f.group == "" || u.GetGroup() == f.group)
}

func (f typeFilter) types(in []*queryv1.TypeUsage) []*queryv1.TypeUsage {
	if f.typ == "" && f.group == "" {
		return in
	}
	var out []*queryv1.TypeUsage
	for _, u := range in {
		if f.keeps(u) {
			out = append(out, u)
		}
	}
	return out
}

// usage is cu with only the kept types (a copy; cu is left alone).
func (f typeFilter) usage(cu *queryv1.ClusterUsage) *queryv1.ClusterUsage {
	if f.typ == "" && f.group == "" || cu == nil {
		return cu
	}
	out := proto.Clone(cu).(*queryv1.ClusterUsage)
	out.Types = f.types(out.GetTypes())
	return out
}

// response is resp with only the kept types; a cluster without any is left out.
func (f typeFilter) response(resp *queryv1.GetUsageResponse) *queryv1.GetUsageResponse {
	if f.typ == "" && f.group == "" {
		return resp
	}
	out := &queryv1.GetUsageResponse{Fleet: f.types(resp.GetFleet())}
	for _, cu := range resp.GetClusters() {
		if kept := f.usage(cu); len(kept.GetTypes()) > 0 {
			out.Clusters = append(out.Clusters, kept)
		}
	}
	return out
}
