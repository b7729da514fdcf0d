package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// clusterDescription is everything the hub knows of one cluster, as
// describe cluster prints it.
type clusterDescription struct {
	cluster  *queryv1.Cluster
	machines []*queryv1.MachineTypeInfo
	usage    *queryv1.ClusterUsage
	// holds are the fleet holds with a part in the cluster.
	holds []*queryv1.FleetHold
}

func (p *program) describeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "describe cluster NAME",
		Short: "Show everything the hub knows of a cluster: state, agent, heartbeat, machine types, usage, holds",
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fail(ExitUsage, "unknown describe kind %q: want cluster", args[0])
			}
			return fail(ExitUsage, "usage: imperatorctl describe cluster NAME")
		},
	}
	cluster := &cobra.Command{
		Use:               "cluster NAME",
		Aliases:           []string{"clusters"},
		Short:             "Show everything the hub knows of a cluster",
		ValidArgsFunction: p.completeOneCluster,
		Example: `  imperatorctl describe cluster spoke-a
  imperatorctl describe cluster spoke-a -o yaml`,
	}
	cmd.AddCommand(p.leaf(cluster, subcommand{
		validate: func(c *command) error {
			if len(c.args) != 1 {
				return fail(ExitUsage, "usage: imperatorctl describe cluster NAME")
			}
			return clusterNames(c)
		},
		run: func(c *command) error {
			d, err := c.describeCluster(c.args[0])
			if err != nil {
				return err
			}
			if c.printer.structured() {
				return c.printer.value(d.document())
			}
			return c.printer.description(d)
		},
	}))
	return cmd
}

// describeCluster asks the hub for what it knows of name: four calls, each
// within --timeout.
func (c *command) describeCluster(name string) (*clusterDescription, error) {
	ctx, cancel := c.unary()
	defer cancel()
	clusters, err := c.client.ListClusters(ctx, &queryv1.ListClustersRequest{})
	if err != nil {
		return nil, c.callError(err)
	}
	named, err := namedClusters(clusters.GetClusters(), []string{name})
	if err != nil {
		return nil, err
	}
	d := &clusterDescription{cluster: named[0]}
	machines, err := c.client.ListMachines(ctx, &queryv1.ListMachinesRequest{Cluster: name})
	if err != nil {
		return nil, c.callError(err)
	}
	d.machines = machines.GetMachineTypes()
	usage, err := c.client.GetUsage(ctx, &queryv1.GetUsageRequest{Cluster: name})
	if err != nil {
		return nil, c.callError(err)
	}
	for _, cu := range usage.GetClusters() {
		if cu.GetCluster() == name {
			d.usage = cu
		}
	}
	holds, err := c.client.ListHolds(ctx, &queryv1.ListHoldsRequest{})
	if err != nil {
		return nil, c.callError(err)
	}
	for _, h := range holds.GetHolds() {
		for _, part := range h.GetClusters() {
			if part.GetCluster() == name {
				d.holds = append(d.holds, h)
				break
			}
		}
	}
	return d, nil
}

// document is d for -o json|yaml: the API's own objects under four keys.
func (d *clusterDescription) document() map[string]any {
	enc := func(m proto.Message) rawJSON {
		raw, err := protojson.Marshal(m)
		if err != nil {
			// protojson fails only on invalid UTF-8, which the hub never sends.
			return rawJSON(`null`)
		}
		return rawJSON(raw)
	}
	machines := make([]rawJSON, 0, len(d.machines))
	for _, m := range d.machines {
		machines = append(machines, enc(m))
	}
	holds := make([]rawJSON, 0, len(d.holds))
	for _, h := range d.holds {
		holds = append(holds, enc(h))
	}
	out := map[string]any{"cluster": enc(d.cluster), "machineTypes": machines, "holds": holds}
	if d.usage != nil {
		out["usage"] = enc(d.usage)
	}
	return out
}

// description prints d as kubectl describe does: fields, then tables.
func (p *printer) description(d *clusterDescription) error {
	cl := d.cluster
	field := func(label, value string) {
		if value == "" {
			value = "-"
		}
		// The same cleaning as table cells: a spoke writes some of these.
		t := &table{}
		t.add(value)
		p.printf("%-16s%s\n", label+":", t.rows[0][0])
	}
	field("Name", cl.GetName())
	field("State", enumName(cl.GetState().String(), statePrefix))
	if m := cl.GetStateMessage(); m != "" {
		field("State message", m)
	}
	field("Agent version", cl.GetAgentVersion())
	if m := cl.GetVersionSkew(); m != "" {
		field("Version skew", "unsupported: "+m)
	}
	field("Agent mode", cl.GetAgentMode())
	field("Connected", fmt.Sprint(cl.GetConnected()))
	if hb := cl.GetLastHeartbeat(); hb != nil {
		field("Last heartbeat", hb.AsTime().UTC().Format(time.RFC3339)+" ("+p.age(hb)+" ago)")
	} else {
		field("Last heartbeat", "never")
	}
	if ob := cl.GetObservedAt(); ob != nil {
		field("Observed", ob.AsTime().UTC().Format(time.RFC3339)+" ("+p.age(ob)+" ago)")
	}
	field("Generation", fmt.Sprint(cl.GetGeneration()))
	if m := cl.GetInjectionUnavailable(); m != "" {
		field("Injection", "unavailable: "+m)
	}
	p.printf("\nMachine types:\n")
	if len(d.machines) == 0 {
		p.printf("  <none>\n")
	} else {
		t := &table{columns: []column{{name: "  MACHINE"}, {name: "GROUP"}, {name: "TYPE"}, {name: "CPU"}, {name: "MEMORY"}, {name: "GPU"}, {name: "FREE"}, {name: "NODES(R/NR/M)"}}}
		for _, m := range d.machines {
			n := m.GetNodes()
			t.add("  "+m.GetMachine(), m.GetGroup(), m.GetType(), m.GetCpu(), m.GetMemory(), gpuCell(m.GetGpu()), itoa(m.GetFree()),
				fmt.Sprintf("%d/%d/%d", n.GetReady(), n.GetNotReady(), n.GetMaintenance()))
		}
		if err := p.table(t, true); err != nil {
			return err
		}
	}
	p.printf("\nUsage:\n")
	if len(d.usage.GetTypes()) == 0 {
		p.printf("  <none>\n")
	} else {
		t := &table{columns: []column{{name: "  GROUP"}, {name: "TYPE"}, {name: "MAXIMUM"}, {name: "RESERVED"}, {name: "USED"}, {name: "WAITING"}, {name: "QUEUED"}, {name: "HELD"}, {name: "FREE"}}}
		for _, u := range d.usage.GetTypes() {
			t.add("  "+u.GetGroup(), u.GetType(), itoa(u.GetMaximum()), itoa(u.GetReserved()), itoa(u.GetUsed()), itoa(u.GetWaiting()), itoa(u.GetQueued()), itoa(u.GetHeld()), itoa(u.GetFree()))
		}
		if err := p.table(t, true); err != nil {
			return err
		}
	}
	p.printf("\nFleet holds:\n")
	if len(d.holds) == 0 {
		p.printf("  <none>\n")
		return nil
	}
	t := &table{columns: []column{{name: "  NAME"}, {name: "PHASE"}, {name: "TYPE"}, {name: "UNITS"}, {name: "HELD"}, {name: "RESULT"}, {name: "VALID-UNTIL"}}}
	for _, h := range d.holds {
		for _, part := range h.GetClusters() {
			if part.GetCluster() != cl.GetName() {
				continue
			}
			typ := part.GetType()
			if part.GetGroup() != "" {
				typ = part.GetGroup() + "/" + typ
			}
			t.add("  "+h.GetName(), enumName(h.GetPhase().String(), phasePrefix), typ, itoa(part.GetCount()), itoa(part.GetHeld()),
				enumName(part.GetResult().String(), resultPrefix), h.GetValidUntil().AsTime().UTC().Format(time.RFC3339))
		}
	}
	return p.table(t, true)
}

// getCommand is kubectl's spelling of the listing commands: get clusters
// [NAME...], get machines [TYPE], get holds [NAME]; the same commands as
// clusters, machines and hold list, built again under get.
func (p *program) getCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get clusters|machines|holds [NAME...]",
		Short: "kubectl's spelling of clusters, machines and hold list",
		Example: `  imperatorctl get clusters spoke-a -o yaml
  imperatorctl get holds -o name`,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fail(ExitUsage, "unknown kind %q: want clusters, machines or holds", args[0])
			}
			return fail(ExitUsage, "usage: imperatorctl get clusters|machines|holds [NAME...]")
		},
	}
	clusters, machines, holds := p.clustersCommand(), p.machinesCommand(), p.holdListCommand()
	clusters.Aliases = []string{"cluster"}
	machines.Aliases = []string{"machine", "machinetypes", "machinetype"}
	holds.Use, holds.Aliases = "holds [NAME]", []string{"hold"}
	cmd.AddCommand(clusters, machines, holds)
	return cmd
}
