package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

func gpuCell(g interface {
	GetNum() int32
	GetProduct() string
	GetFamily() string
}) string {
	if g.GetNum() == 0 {
		return "-"
	}
	sel := g.GetProduct()
	if sel == "" {
		sel = g.GetFamily()
	}
	if sel == "" {
		return fmt.Sprint(g.GetNum())
	}
	return fmt.Sprintf("%dx %s", g.GetNum(), sel)
}

var machineColumns = []column{
	{name: "CLUSTER"}, {name: "GROUP"}, {name: "TYPE"}, {name: "CPU"}, {name: "MEMORY"}, {name: "GPU"},
	{name: "FREE"}, {name: "USED"}, {name: "WAITING"}, {name: "MAXIMUM"},
	{name: "MACHINE", wide: true}, {name: "RESERVED", wide: true}, {name: "QUEUED", wide: true}, {name: "STATE", wide: true}, {name: "NODES(R/NR/M)", wide: true}, {name: "OBSERVED", wide: true},
}

func (p *printer) machineRows(t *table, types []*queryv1.MachineTypeInfo) {
	for _, m := range types {
		u, n := m.GetUsage(), m.GetNodes()
		t.add(m.GetCluster(), m.GetGroup(), m.GetType(), m.GetCpu(), m.GetMemory(), gpuCell(m.GetGpu()),
			itoa(m.GetFree()), itoa(u.GetUsed()), itoa(u.GetWaiting()), itoa(u.GetMaximum()),
			m.GetMachine(), itoa(u.GetReserved()), itoa(u.GetQueued()), enumName(m.GetClusterState().String(), statePrefix),
			fmt.Sprintf("%d/%d/%d", n.GetReady(), n.GetNotReady(), n.GetMaintenance()), p.age(m.GetObservedAt()))
	}
}

func (p *program) machinesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "machines [TYPE | GROUP/TYPE]",
		Short: "List the machine types of every cluster (or one type), with their shape and usage",
		Example: `  imperatorctl machines --gpu-family ampere -o wide
  imperatorctl machines compute-xlarge -o name
  imperatorctl machines --cluster spoke-a --group team-a`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: p.completeTypes,
	}
	fs := cmd.Flags()
	p.g.bindWatch(fs)
	var req queryv1.ListMachinesRequest
	fs.StringVar(&req.Cluster, "cluster", "", "Only this cluster.")
	fs.StringVar(&req.Group, "group", "", "Only this machine group.")
	fs.StringVar(&req.Type, "type", "", "Only this machine type.")
	fs.StringVar(&req.GpuProduct, "gpu-product", "", "Only types selecting this GPU product (nvidia.com/gpu.product).")
	fs.StringVar(&req.GpuFamily, "gpu-family", "", "Only types selecting this GPU family (nvidia.com/gpu.family).")
	_ = cmd.RegisterFlagCompletionFunc("cluster", p.completeOneCluster)
	return p.leaf(cmd, subcommand{
		objects: true,
		validate: func(c *command) error {
			if len(c.args) == 0 {
				return nil
			}
			group, typ, hasGroup := strings.Cut(c.args[0], "/")
			if !hasGroup {
				group, typ = "", c.args[0]
			}
			if (req.Type != "" && req.Type != typ) || (hasGroup && req.Group != "" && req.Group != group) {
				return fail(ExitUsage, "machines %s: the argument and --type/--group name different types", c.args[0])
			}
			if msgs := validation.IsDNS1123Label(typ); len(msgs) > 0 {
				return fail(ExitUsage, "machine type %q: %s", typ, strings.Join(msgs, "; "))
			}
			req.Type = typ
			if hasGroup {
				req.Group = group
			}
			return nil
		},
		run: func(c *command) error {
			if c.g.watch {
				// The hub's Watch says which cluster changed; its machine
				// types are asked again then, with the same filters.
				return c.watch(func(t *table, ev *queryv1.ClusterEvent) error {
					one := proto.Clone(&req).(*queryv1.ListMachinesRequest)
					one.Cluster = ev.GetCluster().GetName()
					ctx, cancel := c.unary()
					defer cancel()
					resp, err := c.client.ListMachines(ctx, one)
					if err != nil {
						return c.callError(err)
					}
					c.printer.machineRows(t, resp.GetMachineTypes())
					return nil
				}, machineColumns, req.Cluster)
			}
			ctx, cancel := c.unary()
			defer cancel()
			resp, err := c.client.ListMachines(ctx, &req)
			if err != nil {
				return c.callError(err)
			}
			if len(c.args) > 0 && len(resp.GetMachineTypes()) == 0 {
				return fail(ExitFailure, "machine type %s not found in any cluster the filters select", c.args[0])
			}
			if c.printer.structured() {
				return c.printer.message(resp)
			}
			if c.printer.objectFormat() {
				return c.printer.objects(resp, asMessages(resp.GetMachineTypes()), namesOf("machinetype", resp.GetMachineTypes(), func(m *queryv1.MachineTypeInfo) string {
					return m.GetCluster() + "/" + m.GetGroup() + "/" + m.GetType()
				}), true)
			}
			t := &table{columns: machineColumns}
			c.printer.machineRows(t, resp.GetMachineTypes())
			return c.printer.table(t, true)
		},
	})
}
