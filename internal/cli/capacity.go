package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// reasonPrefix is the prefix of ExclusionReason names, left out of tables.
const reasonPrefix = "EXCLUSION_REASON_"

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
