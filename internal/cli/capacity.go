package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

const (
	statePrefix  = "CLUSTER_STATE_"
	reasonPrefix = "EXCLUSION_REASON_"
)

// clusters

var clusterColumns = []column{
	{name: "NAME"}, {name: "STATE"}, {name: "AGENT"}, {name: "HEARTBEAT"}, {name: "MACHINES"}, {name: "TYPES"},
	{name: "OBSERVED", wide: true}, {name: "CONNECTED", wide: true}, {name: "GENERATION", wide: true},
	{name: "MODE", wide: true}, {name: "MESSAGE", wide: true},
}

func (p *printer) clusterRow(t *table, c *queryv1.Cluster) {
	mode := c.GetAgentMode()
	if mode == "" {
		mode = "-" // an agent that predates agent modes
	}
	t.add(c.GetName(), enumName(c.GetState().String(), statePrefix), agentCell(c), p.age(c.GetLastHeartbeat()),
		itoa(c.GetMachineCount()), itoa(c.GetMachineTypeCount()), p.age(c.GetObservedAt()), fmt.Sprint(c.GetConnected()), fmt.Sprint(c.GetGeneration()),
		mode, clusterMessage(c))
}

// agentCell is the agent's version, flagged when it is outside the hub's
// version skew policy (the MESSAGE column and describe cluster say why).
func agentCell(c *queryv1.Cluster) string {
	if c.GetVersionSkew() == "" {
		return c.GetAgentVersion()
	}
	return c.GetAgentVersion() + " " + skewFlag
}

// skewFlag marks an agent version outside the skew policy.
const skewFlag = "(unsupported skew)"

// clusterMessage is why the cluster is not Available, why its agent's
// version is outside the skew policy and, when its API server cannot reach
// the agent's webhooks, that guests cannot be injected.
func clusterMessage(c *queryv1.Cluster) string {
	var parts []string
	if m := c.GetStateMessage(); m != "" {
		parts = append(parts, m)
	}
	if m := c.GetVersionSkew(); m != "" {
		parts = append(parts, "unsupported version skew: "+m)
	}
	if m := c.GetInjectionUnavailable(); m != "" {
		parts = append(parts, "injection unavailable: "+m)
	}
	return strings.Join(parts, "; ")
}

func (p *program) clustersCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "clusters [NAME...]",
		Short: "List the clusters (or the named ones): state, agent version, heartbeat age, machines",
		Example: `  imperatorctl clusters
  imperatorctl clusters spoke-a -o yaml
  imperatorctl clusters -o custom-columns=NAME:.name,STATE:.state --no-headers`,
		ValidArgsFunction: p.completeClusters,
	}
	p.g.bindWatch(cmd.Flags())
	return p.leaf(cmd, subcommand{objects: true, validate: clusterNames, run: func(c *command) error {
		if c.g.watch {
			return c.watch(func(t *table, ev *queryv1.ClusterEvent) error {
				if ev.GetType() == queryv1.ClusterEventType_CLUSTER_EVENT_TYPE_REMOVED {
					t.add(ev.GetCluster().GetName(), "Removed")
					return nil
				}
				c.printer.clusterRow(t, ev.GetCluster())
				return nil
			}, clusterColumns, c.args...)
		}
		ctx, cancel := c.unary()
		defer cancel()
		resp, err := c.client.ListClusters(ctx, &queryv1.ListClustersRequest{})
		if err != nil {
			return c.callError(err)
		}
		if len(c.args) > 0 {
			named, err := namedClusters(resp.GetClusters(), c.args)
			if err != nil {
				return err
			}
			resp = &queryv1.ListClustersResponse{Clusters: named}
		}
		if c.printer.structured() {
			if len(c.args) == 1 {
				// One named object is printed itself, as kubectl get NAME.
				return c.printer.message(resp.GetClusters()[0])
			}
			return c.printer.message(resp)
		}
		if c.printer.objectFormat() {
			var whole proto.Message = resp
			if len(c.args) == 1 {
				whole = resp.GetClusters()[0]
			}
			return c.printer.objects(whole, asMessages(resp.GetClusters()), namesOf("cluster", resp.GetClusters(), (*queryv1.Cluster).GetName), true)
		}
		t := &table{columns: clusterColumns}
		for _, cl := range resp.GetClusters() {
			c.printer.clusterRow(t, cl)
		}
		return c.printer.table(t, true)
	}})
}

// clusterNames checks the cluster names of a command's arguments.
func clusterNames(c *command) error {
	for _, name := range c.args {
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			return fail(ExitUsage, "cluster name %q: %s", name, strings.Join(msgs, "; "))
		}
	}
	return nil
}

// namedClusters are the clusters of all with the given names, in the order
// named; a name the hub does not know fails the command, as kubectl get
// does for a missing object.
func namedClusters(all []*queryv1.Cluster, names []string) ([]*queryv1.Cluster, error) {
	byName := make(map[string]*queryv1.Cluster, len(all))
	for _, cl := range all {
		byName[cl.GetName()] = cl
	}
	var out []*queryv1.Cluster
	var missing []string
	for _, name := range names {
		if cl, ok := byName[name]; ok {
			out = append(out, cl)
		} else {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return nil, fail(ExitFailure, "cluster %s not found: the hub knows no such cluster (imperatorctl clusters lists them)", strings.Join(missing, ", "))
	}
	return out, nil
}

// machines

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
					if ev.GetType() == queryv1.ClusterEventType_CLUSTER_EVENT_TYPE_REMOVED {
						t.add(ev.GetCluster().GetName(), "Removed")
						return nil
					}
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

// usage

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
					if ev.GetType() == queryv1.ClusterEventType_CLUSTER_EVENT_TYPE_REMOVED {
						t.add(ev.GetCluster().GetName(), "Removed")
						return nil
					}
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

// reopenAfter is how long a Watch stream must have worked for its loss to
// be taken for the hub recycling the connection (its --max-connection-age)
// rather than the hub being unreachable.
const reopenAfter = 5 * time.Second

// watch streams cluster events; table output prints the header once and
// rows as events arrive, json/yaml print each event. The hub recycles
// connections every half hour or so: a stream that was working and ends
// Unavailable is opened again (the hub resends the current state); one that
// fails at once ends the watch with "hub unreachable".
func (c *command) watch(rows func(*table, *queryv1.ClusterEvent) error, columns []column, only ...string) error {
	var clusters []string
	for _, o := range only {
		if o != "" {
			clusters = append(clusters, o)
		}
	}
	header := true
	for {
		opened := time.Now()
		stream, err := c.client.Watch(c.ctx, &queryv1.WatchRequest{Clusters: clusters})
		if err != nil {
			return c.callError(err)
		}
		received := false
		for {
			ev, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				if status.Code(err) == codes.Unavailable && c.ctx.Err() == nil && (received || time.Since(opened) >= reopenAfter) {
					break
				}
				return c.callError(err)
			}
			received = true
			if c.printer.structured() {
				if err := c.printer.message(ev); err != nil {
					return err
				}
				continue
			}
			if c.printer.objectFormat() {
				// Each event is an object: its type and the cluster.
				if err := c.printer.objects(ev, []proto.Message{ev}, []string{"cluster/" + ev.GetCluster().GetName()}, header); err != nil {
					return err
				}
				header = false
				continue
			}
			t := &table{columns: columns}
			if err := rows(t, ev); err != nil {
				return err
			}
			if err := c.printer.table(t, header); err != nil {
				return err
			}
			header = false
		}
	}
}

// capacity

func (p *program) capacityCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "capacity (TYPE | GROUP/TYPE | --gpu N [--gpu-product P] [--gpu-family F] [--cpu Q] [--memory Q]) [--count N] [--same-cluster]",
		Short: "Where N more units of a machine type, or of a resource shape, fit right now",
		Long: `Capacity asks the hub where --count more units fit now: of a machine type
(TYPE, or GROUP/TYPE), or of any type offering at least a resource shape. By
default the units are spread over the fewest clusters; with --same-cluster
they must all fit in one. Exits 1 when they do not fit, saying why for each
cluster.`,
		Example: `  imperatorctl capacity compute-xlarge --count 4 --same-cluster
  imperatorctl capacity --gpu 8 --gpu-product NVIDIA-H100-80GB-HBM3 --count 1`,
	}
	f := &capacityFlags{}
	f.add(cmd.Flags())
	req := &queryv1.FindCapacityRequest{}
	return p.leaf(cmd, subcommand{
		objects:  true,
		validate: func(c *command) error { return f.request(c.args, req) },
		run:      func(c *command) error { return c.findCapacity(req, f) },
	})
}

// capacityFlags are capacity's flags, and what the request asks for in
// words (for the refusal).
type capacityFlags struct {
	targetFlags
	count       int
	sameCluster bool
	what        string
}

func (f *capacityFlags) add(fs *pflag.FlagSet) {
	fs.IntVar(&f.count, "count", 1, "Number of units wanted.")
	fs.BoolVar(&f.sameCluster, "same-cluster", false, "All units in one cluster (default: spread over the fewest clusters).")
	f.targetFlags.add(fs)
}

// request checks the arguments and flags and fills in req from them.
func (f *capacityFlags) request(args []string, req *queryv1.FindCapacityRequest) error {
	switch {
	case len(args) > 1:
		return fail(ExitUsage, "capacity takes one machine type, got %q", args)
	case len(args) == 1 && f.hasShape():
		return fail(ExitUsage, "capacity: give a machine type or a shape (--gpu, --cpu, ...), not both")
	case len(args) == 0 && !f.hasShape():
		return fail(ExitUsage, "capacity: give a machine type (TYPE or GROUP/TYPE) or a shape (--gpu N, --gpu-product P, --cpu Q, --memory Q)")
	case f.count < 1 || f.count > 100000:
		return fail(ExitUsage, "--count %d: want 1 to 100000", f.count)
	}
	if err := f.checkGPUs(); err != nil {
		return err
	}
	req.Count, req.Mode = int32(f.count), capacityMode(f.sameCluster)
	if len(args) == 1 {
		ref, err := machineTypeRef(args[0])
		if err != nil {
			return err
		}
		req.Target = &queryv1.FindCapacityRequest_MachineType{MachineType: ref}
		f.what = args[0]
		return nil
	}
	shape, err := f.resourceShape()
	if err != nil {
		return err
	}
	req.Target = &queryv1.FindCapacityRequest_Shape{Shape: shape}
	f.what = describeShape(shape)
	return nil
}

// findCapacity asks the hub req and prints the answer; units that do not
// fit are an error saying why.
func (c *command) findCapacity(req *queryv1.FindCapacityRequest, f *capacityFlags) error {
	ctx, cancel := c.unary()
	defer cancel()
	resp, err := c.client.FindCapacity(ctx, req)
	if err != nil {
		return c.callError(err)
	}
	switch {
	case c.printer.structured():
		if err := c.printer.message(resp); err != nil {
			return err
		}
	case c.printer.objectFormat():
		if err := c.printer.objects(resp, asMessages(resp.GetCandidates()), namesOf("cluster", resp.GetCandidates(), (*queryv1.CapacityCandidate).GetCluster), true); err != nil {
			return err
		}
	default:
		if err := c.printer.capacity(resp); err != nil {
			return err
		}
	}
	if !resp.GetSatisfiable() {
		return fail(ExitFailure, "%s", notFitMessage(resp, f.count, f.what, f.sameCluster))
	}
	return nil
}

func describeShape(s *queryv1.ResourceShape) string {
	var parts []string
	if s.GpuCount > 0 {
		parts = append(parts, fmt.Sprintf("%d GPU", s.GpuCount))
	}
	for _, p := range []string{s.GpuProduct, s.GpuFamily} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	if s.Cpu != "" {
		parts = append(parts, "cpu "+s.Cpu)
	}
	if s.Memory != "" {
		parts = append(parts, "memory "+s.Memory)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func notFitMessage(resp *queryv1.FindCapacityResponse, count int, what string, sameCluster bool) string {
	where := "in the fleet"
	if sameCluster {
		where = "in one cluster"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d x %s do not fit %s", count, what, where)
	if resp.GetPlaced() > 0 {
		fmt.Fprintf(&b, " (%d could be placed)", resp.GetPlaced())
	}
	for _, ex := range resp.GetExcluded() {
		if ex.GetReason() == queryv1.ExclusionReason_EXCLUSION_REASON_OFFLINE {
			fmt.Fprintf(&b, "\n  cluster %s is %s", ex.GetCluster(), ex.GetMessage())
			continue
		}
		fmt.Fprintf(&b, "\n  cluster %s: %s", ex.GetCluster(), ex.GetMessage())
	}
	return b.String()
}

func (p *printer) capacity(resp *queryv1.FindCapacityResponse) error {
	t := &table{columns: []column{{name: "CLUSTER"}, {name: "FREE"}, {name: "TAKE"}, {name: "TYPES"}, {name: "OBSERVED"}}}
	for _, cand := range resp.GetCandidates() {
		var types []string
		for _, u := range cand.GetTypes() {
			types = append(types, fmt.Sprintf("%s/%s:%d", u.GetGroup(), u.GetType(), u.GetFree()))
		}
		t.add(cand.GetCluster(), itoa(cand.GetFree()), itoa(cand.GetTake()), strings.Join(types, ","), p.age(cand.GetObservedAt()))
	}
	if err := p.table(t, true); err != nil {
		return err
	}
	if len(resp.GetExcluded()) == 0 {
		return nil
	}
	p.printf("\n")
	ex := &table{columns: []column{{name: "EXCLUDED"}, {name: "REASON"}, {name: "FREE"}, {name: "DETAIL"}}}
	for _, e := range resp.GetExcluded() {
		ex.add(e.GetCluster(), enumName(e.GetReason().String(), reasonPrefix), itoa(e.GetFree()), e.GetMessage())
	}
	return p.table(ex, true)
}
