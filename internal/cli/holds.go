package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/apimachinery/pkg/util/validation"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

const (
	phasePrefix  = "FLEET_HOLD_PHASE_"
	resultPrefix = "HOLD_RESULT_"
	// holdCallTimeout is the least deadline of create and release, which
	// wait for every chosen spoke (the hub's --hold-deadline, 10 s).
	holdCallTimeout = 40 * time.Second
)

var holdColumns = []column{
	{name: "NAME"}, {name: "PHASE"}, {name: "COUNT"}, {name: "CLUSTERS"}, {name: "VALID-UNTIL"},
	{name: "TARGET", wide: true}, {name: "CREATOR", wide: true}, {name: "MESSAGE", wide: true},
}

func (p *printer) holdRow(t *table, h *queryv1.FleetHold) {
	var parts []string
	for _, cl := range h.GetClusters() {
		parts = append(parts, fmt.Sprintf("%s:%d", cl.GetCluster(), cl.GetCount()))
	}
	target := "-"
	if s := h.GetShape(); s != nil {
		target = describeShape(s)
	}
	if ref := h.GetMachineType(); ref != nil {
		target = ref.GetType()
		if ref.GetGroup() != "" {
			target = ref.GetGroup() + "/" + target
		}
	}
	t.add(h.GetName(), enumName(h.GetPhase().String(), phasePrefix), itoa(h.GetCount()), strings.Join(parts, ","),
		h.GetValidUntil().AsTime().UTC().Format(time.RFC3339), target, h.GetCreator(), h.GetMessage())
}

// holdDetail prints one hold: its parts and the labels its guests carry.
func (p *printer) holdDetail(h *queryv1.FleetHold) error {
	t := &table{columns: holdColumns}
	p.holdRow(t, h)
	if err := p.table(t, true); err != nil {
		return err
	}
	if h.GetMessage() != "" {
		p.printf("\n%s\n", h.GetMessage())
	}
	if len(h.GetClusters()) == 0 {
		return nil
	}
	p.printf("\n")
	parts := &table{columns: []column{{name: "CLUSTER"}, {name: "GROUP"}, {name: "TYPE"}, {name: "UNITS"}, {name: "HELD"}, {name: "RESULT"}, {name: "REASON"}, {name: "MESSAGE"}}}
	for _, cl := range h.GetClusters() {
		parts.add(cl.GetCluster(), cl.GetGroup(), cl.GetType(), itoa(cl.GetCount()), itoa(cl.GetHeld()),
			enumName(cl.GetResult().String(), resultPrefix), cl.GetReason(), cl.GetMessage())
	}
	if err := p.table(parts, true); err != nil {
		return err
	}
	if h.GetPhase() != queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_HELD {
		return nil
	}
	p.printf("\n")
	keys := make([]string, 0, len(h.GetGuestLabels()))
	for k := range h.GetGuestLabels() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, cl := range h.GetClusters() {
		p.printf("Guests on cluster %s carry the labels:\n", cl.GetCluster())
		labels := map[string]string{imperatorv1alpha1.MachineGroupKey: cl.GetGroup(), imperatorv1alpha1.MachineTypeKey: cl.GetType()}
		for _, k := range keys {
			labels[k] = h.GetGuestLabels()[k]
		}
		all := make([]string, 0, len(labels))
		for k := range labels {
			all = append(all, k)
		}
		sort.Strings(all)
		for _, k := range all {
			p.printf("  %s: %s\n", k, labels[k])
		}
	}
	return nil
}

// holdCall returns a context with the deadline of a call that waits for
// the spokes: --timeout, at least holdCallTimeout.
func (c *command) holdCall() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.ctx, max(c.g.timeout, holdCallTimeout))
}

func (p *program) holdCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "hold",
		Short: "Book units across the fleet for a while (fleet holds): create, list, get, release",
		Long: `A fleet hold books --count units of a machine type (or of a shape) for --ttl.
The hub picks clusters as capacity does and asks each chosen spoke to hold
its part; when one cannot, none holds anything and the hold is Failed with
each cluster's reason. Guests carrying the label imperator.tenzen-y.io/hold
with the hold's name (and the usual three labels) take the held units ahead
of everyone else's queue. Units nobody claimed go back at the end of --ttl.`,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fail(ExitUsage, "unknown hold command %q: want create, list, get or release", args[0])
			}
			return fail(ExitUsage, "usage: imperatorctl hold create|list|get|release")
		},
	}
	cmd.AddCommand(p.holdCreateCommand(), p.holdListCommand(), p.holdGetCommand(), p.holdReleaseCommand())
	return cmd
}

func (p *program) holdCreateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create NAME (TYPE | GROUP/TYPE | --gpu N [--gpu-product P] [--gpu-family F] [--cpu Q] [--memory Q]) --count N [--same-cluster] --ttl D",
		Short: "Hold units across the fleet; prints the clusters, the units and the labels guests must carry",
		Example: `  imperatorctl hold create train-42 compute-xlarge --count 4 --same-cluster --ttl 15m
  imperatorctl hold create h100-run --gpu 8 --gpu-product NVIDIA-H100-80GB-HBM3 --count 2 --ttl 1h`,
	}
	f := &holdCreateFlags{}
	f.add(cmd.Flags())
	req := &queryv1.CreateHoldRequest{}
	return p.leaf(cmd, subcommand{
		validate: func(c *command) error { return f.request(c.args, req) },
		run: func(c *command) error {
			if f.dryRun {
				return c.holdDryRun(req)
			}
			return c.holdCreate(req)
		},
	})
}

// holdCreateFlags are hold create's flags.
type holdCreateFlags struct {
	targetFlags
	count       int
	sameCluster bool
	ttl         time.Duration
	namespaces  []string
	dryRun      bool
}

func (f *holdCreateFlags) add(fs *pflag.FlagSet) {
	fs.IntVar(&f.count, "count", 1, "Number of units to hold (1 to 10000).")
	fs.BoolVar(&f.sameCluster, "same-cluster", false, "All units in one cluster (default: spread over the fewest clusters).")
	fs.DurationVar(&f.ttl, "ttl", 15*time.Minute, "How long unclaimed units stay held (1m to 168h).")
	f.targetFlags.add(fs)
	fs.StringSliceVar(&f.namespaces, "namespace", nil, "Only guests of these namespaces may claim the units (repeatable).")
	fs.BoolVar(&f.dryRun, "dry-run", false, "Show where the hold would go now (the hub's FindCapacity with the same target, count and mode) without booking anything. The hub has no plan call: the spokes are not asked, so a real create can still fail when a spoke refuses its part, and neither the hold's name nor your right to create holds in --namespace is checked.")
}

// request checks the arguments and flags and fills in req from them.
func (f *holdCreateFlags) request(args []string, req *queryv1.CreateHoldRequest) error {
	switch {
	case len(args) == 0:
		return fail(ExitUsage, "hold create: give the hold's name, then a machine type or a shape")
	case len(args) > 2:
		return fail(ExitUsage, "hold create takes a name and one machine type, got %q", args)
	case len(args) == 2 && f.hasShape():
		return fail(ExitUsage, "hold create: give a machine type or a shape (--gpu, --cpu, ...), not both")
	case len(args) == 1 && !f.hasShape():
		return fail(ExitUsage, "hold create: give a machine type (TYPE or GROUP/TYPE) or a shape (--gpu N, --gpu-product P, --cpu Q, --memory Q)")
	case f.count < 1 || f.count > 10000:
		return fail(ExitUsage, "--count %d: want 1 to 10000", f.count)
	case f.ttl < time.Minute || f.ttl > 7*24*time.Hour:
		return fail(ExitUsage, "--ttl %s: want 1m to 168h", f.ttl)
	}
	if err := f.checkGPUs(); err != nil {
		return err
	}
	if msgs := validation.IsDNS1123Label(args[0]); len(msgs) > 0 {
		return fail(ExitUsage, "hold name %q: %s", args[0], strings.Join(msgs, "; "))
	}
	req.Name, req.Count, req.Ttl, req.Namespaces = args[0], int32(f.count), durationpb.New(f.ttl), f.namespaces
	req.Mode = capacityMode(f.sameCluster)
	if len(args) == 2 {
		ref, err := machineTypeRef(args[1])
		if err != nil {
			return err
		}
		req.Target = &queryv1.CreateHoldRequest_MachineType{MachineType: ref}
		return nil
	}
	shape, err := f.resourceShape()
	if err != nil {
		return err
	}
	req.Target = &queryv1.CreateHoldRequest_Shape{Shape: shape}
	return nil
}

// holdCreate creates req at the hub and prints the hold; a hold that does
// not fit or fails is an error.
func (c *command) holdCreate(req *queryv1.CreateHoldRequest) error {
	ctx, cancel := c.holdCall()
	defer cancel()
	h, err := c.client.CreateHold(ctx, req)
	if status.Code(err) == codes.FailedPrecondition {
		return fail(ExitFailure, "hold %s does not fit: %s", req.GetName(), status.Convert(err).Message())
	}
	if err != nil {
		return c.callError(err)
	}
	if c.printer.structured() {
		if err := c.printer.message(h); err != nil {
			return err
		}
	} else if err := c.printer.holdDetail(h); err != nil {
		return err
	}
	if h.GetPhase() != queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_HELD {
		return fail(ExitFailure, "hold %s failed: %s", h.GetName(), h.GetMessage())
	}
	return nil
}

// holdDryRun shows where req would be held now, without booking: the
// FindCapacity answer for the same target, count and mode.
func (c *command) holdDryRun(req *queryv1.CreateHoldRequest) error {
	find := &queryv1.FindCapacityRequest{Count: req.GetCount(), Mode: req.GetMode()}
	what := ""
	switch t := req.GetTarget().(type) {
	case *queryv1.CreateHoldRequest_MachineType:
		find.Target = &queryv1.FindCapacityRequest_MachineType{MachineType: t.MachineType}
		what = t.MachineType.GetType()
		if g := t.MachineType.GetGroup(); g != "" {
			what = g + "/" + what
		}
	case *queryv1.CreateHoldRequest_Shape:
		find.Target = &queryv1.FindCapacityRequest_Shape{Shape: t.Shape}
		what = describeShape(t.Shape)
	}
	ctx, cancel := c.unary()
	defer cancel()
	resp, err := c.client.FindCapacity(ctx, find)
	if err != nil {
		return c.callError(err)
	}
	if c.printer.structured() {
		if err := c.printer.message(resp); err != nil {
			return err
		}
	} else {
		c.printer.printf("Dry run: hold %s would take, if the spokes agree now (nothing was booked):\n\n", req.GetName())
		if err := c.printer.capacity(resp); err != nil {
			return err
		}
	}
	if !resp.GetSatisfiable() {
		return fail(ExitFailure, "hold %s would not fit: %s", req.GetName(),
			notFitMessage(resp, int(req.GetCount()), what, req.GetMode() == queryv1.CapacityMode_CAPACITY_MODE_SAME_CLUSTER))
	}
	return nil
}

func (p *program) holdListCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:               "list [NAME]",
		Short:             "List the fleet holds (or the named one, as a row)",
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: p.completeHolds,
	}
	p.g.bindWatch(cmd.Flags())
	return p.leaf(cmd, subcommand{
		objects: true,
		validate: func(c *command) error {
			if c.g.watch && (c.printer.structured() || c.printer.objectFormat()) {
				return fail(ExitUsage, "hold list --watch prints rows (table or wide): the hub's Watch streams clusters, and the holds are asked again at each of its events")
			}
			if len(c.args) == 0 {
				return nil
			}
			return oneHoldName(c)
		},
		run: func(c *command) error {
			if c.g.watch {
				return c.watchHolds()
			}
			ctx, cancel := c.unary()
			defer cancel()
			var resp *queryv1.ListHoldsResponse
			if len(c.args) == 1 {
				h, err := c.client.GetHold(ctx, &queryv1.GetHoldRequest{Name: c.args[0]})
				if status.Code(err) == codes.NotFound {
					return fail(ExitFailure, "%s", status.Convert(err).Message())
				}
				if err != nil {
					return c.callError(err)
				}
				resp = &queryv1.ListHoldsResponse{Holds: []*queryv1.FleetHold{h}}
			} else {
				var err error
				if resp, err = c.client.ListHolds(ctx, &queryv1.ListHoldsRequest{}); err != nil {
					return c.callError(err)
				}
			}
			if c.printer.structured() {
				if len(c.args) == 1 {
					return c.printer.message(resp.GetHolds()[0])
				}
				return c.printer.message(resp)
			}
			if c.printer.objectFormat() {
				var whole proto.Message = resp
				if len(c.args) == 1 {
					whole = resp.GetHolds()[0]
				}
				return c.printer.objects(whole, asMessages(resp.GetHolds()), namesOf("hold", resp.GetHolds(), (*queryv1.FleetHold).GetName), true)
			}
			t := &table{columns: holdColumns}
			for _, h := range resp.GetHolds() {
				c.printer.holdRow(t, h)
			}
			return c.printer.table(t, true)
		},
	})
}

// watchHolds prints the holds (or the named one), then again each hold
// that changed. The hub's Watch streams clusters, not holds; a hold's
// booking, claims, release and expiry move its clusters' held units, so
// each event of the Watch is when the holds are asked again, and a hold
// is printed when its phase, message or parts changed.
func (c *command) watchHolds() error {
	last := map[string]string{}
	return c.watch(func(t *table, _ *queryv1.ClusterEvent) error {
		ctx, cancel := c.unary()
		defer cancel()
		var holds []*queryv1.FleetHold
		if len(c.args) == 1 {
			h, err := c.client.GetHold(ctx, &queryv1.GetHoldRequest{Name: c.args[0]})
			if status.Code(err) == codes.NotFound {
				return fail(ExitFailure, "%s", status.Convert(err).Message())
			}
			if err != nil {
				return c.callError(err)
			}
			holds = []*queryv1.FleetHold{h}
		} else {
			resp, err := c.client.ListHolds(ctx, &queryv1.ListHoldsRequest{})
			if err != nil {
				return c.callError(err)
			}
			holds = resp.GetHolds()
		}
		for _, h := range holds {
			seen := proto.Clone(h).(*queryv1.FleetHold)
			seen.ValidUntil = nil // unchanged by what happens to the hold
			key, err := proto.MarshalOptions{Deterministic: true}.Marshal(seen)
			if err != nil {
				return fmt.Errorf("encoding hold %s: %w", h.GetName(), err)
			}
			if last[h.GetName()] == string(key) {
				continue
			}
			last[h.GetName()] = string(key)
			c.printer.holdRow(t, h)
		}
		return nil
	}, holdColumns)
}

func oneHoldName(c *command) error {
	if len(c.args) != 1 {
		return fail(ExitUsage, "usage: %s NAME", c.name)
	}
	if msgs := validation.IsDNS1123Label(c.args[0]); len(msgs) > 0 {
		return fail(ExitUsage, "hold name %q: %s", c.args[0], strings.Join(msgs, "; "))
	}
	return nil
}

func (p *program) holdGetCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "get NAME", Short: "Show one fleet hold: its clusters, units and the labels guests carry"}
	return p.holdByName(cmd, (*command).unary, func(ctx context.Context, c *command) (*queryv1.FleetHold, error) {
		return c.client.GetHold(ctx, &queryv1.GetHoldRequest{Name: c.args[0]})
	})
}

func (p *program) holdReleaseCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "release NAME", Short: "Release a fleet hold: every cluster gives its units back now"}
	return p.holdByName(cmd, (*command).holdCall, func(ctx context.Context, c *command) (*queryv1.FleetHold, error) {
		return c.client.ReleaseHold(ctx, &queryv1.ReleaseHoldRequest{Name: c.args[0]})
	})
}

// holdByName is a subcommand that names one hold, calls the hub within the
// deadline deadline gives, and prints the hold the hub answers; a hold the hub
// does not know is a plain failure, not a call error.
func (p *program) holdByName(cmd *cobra.Command, deadline func(*command) (context.Context, context.CancelFunc),
	call func(context.Context, *command) (*queryv1.FleetHold, error)) *cobra.Command {
	cmd.ValidArgsFunction = p.completeHolds
	return p.leaf(cmd, subcommand{
		objects:  true,
		validate: oneHoldName,
		run: func(c *command) error {
			ctx, cancel := deadline(c)
			defer cancel()
			h, err := call(ctx, c)
			if status.Code(err) == codes.NotFound {
				return fail(ExitFailure, "%s", status.Convert(err).Message())
			}
			if err != nil {
				return c.callError(err)
			}
			if c.printer.structured() {
				return c.printer.message(h)
			}
			if c.printer.objectFormat() {
				return c.printer.objects(h, []proto.Message{h}, []string{"hold/" + h.GetName()}, true)
			}
			return c.printer.holdDetail(h)
		},
	})
}
