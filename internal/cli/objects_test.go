package cli

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// fleetHub answers clusters and holds besides fakeHub's calls, and records
// the machines requests.
type fleetHub struct {
	fakeHub
	clusters         []*queryv1.Cluster
	holds            []*queryv1.FleetHold
	machinesRequests []*queryv1.ListMachinesRequest
}

func (f *fleetHub) ListClusters(context.Context, *queryv1.ListClustersRequest, ...grpc.CallOption) (*queryv1.ListClustersResponse, error) {
	return &queryv1.ListClustersResponse{Clusters: f.clusters}, f.err
}

func (f *fleetHub) ListHolds(context.Context, *queryv1.ListHoldsRequest, ...grpc.CallOption) (*queryv1.ListHoldsResponse, error) {
	return &queryv1.ListHoldsResponse{Holds: f.holds}, f.err
}

func (f *fleetHub) GetHold(_ context.Context, req *queryv1.GetHoldRequest, _ ...grpc.CallOption) (*queryv1.FleetHold, error) {
	for _, h := range f.holds {
		if h.GetName() == req.GetName() {
			return h, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "fleet hold %q not found", req.GetName())
}

func (f *fleetHub) ListMachines(ctx context.Context, req *queryv1.ListMachinesRequest, opts ...grpc.CallOption) (*queryv1.ListMachinesResponse, error) {
	f.machinesRequests = append(f.machinesRequests, req)
	return f.fakeHub.ListMachines(ctx, req, opts...)
}

func newFleetHub() *fleetHub {
	return &fleetHub{
		fakeHub: fakeHub{
			machines: &queryv1.ListMachinesResponse{MachineTypes: []*queryv1.MachineTypeInfo{
				{Cluster: "spoke-a", Group: "team-a", Type: "compute-xlarge", Free: 3},
			}},
			usage: &queryv1.GetUsageResponse{
				Clusters: []*queryv1.ClusterUsage{
					{Cluster: "spoke-a", Types: []*queryv1.TypeUsage{{Group: "team-a", Type: "compute-xlarge", Maximum: 4}, {Group: "team-a", Type: "compute-small", Maximum: 9}}},
					{Cluster: "spoke-b", Types: []*queryv1.TypeUsage{{Group: "team-b", Type: "compute-small", Maximum: 7}}},
				},
				Fleet: []*queryv1.TypeUsage{{Group: "team-a", Type: "compute-xlarge", Maximum: 4}, {Group: "team-a", Type: "compute-small", Maximum: 9}, {Group: "team-b", Type: "compute-small", Maximum: 7}},
			},
		},
		clusters: []*queryv1.Cluster{
			{Name: "spoke-a", State: queryv1.ClusterState_CLUSTER_STATE_AVAILABLE, AgentVersion: "v0.2.0"},
			{Name: "spoke-b", State: queryv1.ClusterState_CLUSTER_STATE_OFFLINE, AgentVersion: "v0.1.0"},
		},
		holds: []*queryv1.FleetHold{{Name: "train-1", Phase: queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_HELD, Count: 2}},
	}
}

// runFleet runs imperatorctl against hub.
func runFleet(hub *fleetHub, args ...string) ran {
	return runWith(hub, args...)
}

func TestObjectOutputsAndNames(t *testing.T) {
	cases := map[string]struct {
		args       []string
		wantCode   int
		wantStdout string
		// wantContains, when set, replaces the exact stdout check.
		wantContains []string
		wantAbsent   []string
		wantStderr   string
	}{
		"-o name": {args: []string{"clusters", "-o", "name"}, wantStdout: "cluster/spoke-a\ncluster/spoke-b\n"},
		"a named cluster, as a row": {args: []string{"clusters", "spoke-b"},
			wantContains: []string{"spoke-b", "Offline"}, wantAbsent: []string{"spoke-a"}},
		"named clusters keep the order named": {args: []string{"clusters", "spoke-b", "spoke-a", "-o", "name"}, wantStdout: "cluster/spoke-b\ncluster/spoke-a\n"},
		"a cluster the hub does not know":     {args: []string{"clusters", "spoke-z"}, wantCode: ExitFailure, wantStderr: "cluster spoke-z not found"},
		"one named cluster is printed itself": {args: []string{"clusters", "spoke-a", "-o", "json"},
			wantContains: []string{`"name": "spoke-a"`}, wantAbsent: []string{`"clusters"`, "spoke-b"}},
		"jsonpath over the answer":        {args: []string{"clusters", "-o", "jsonpath={.clusters[*].name}"}, wantStdout: "spoke-a spoke-b\n"},
		"jsonpath over one named cluster": {args: []string{"clusters", "spoke-b", "-o", "jsonpath={.agentVersion}"}, wantStdout: "v0.1.0\n"},
		"custom-columns": {args: []string{"clusters", "-o", "custom-columns=NAME:.name,AGENT:.agentVersion,GEN:.generation"},
			wantStdout: "NAME     AGENT   GEN\nspoke-a  v0.2.0  <none>\nspoke-b  v0.1.0  <none>\n"},
		"custom-columns without headers": {args: []string{"clusters", "--no-headers", "-o", "custom-columns=NAME:{.name}"}, wantStdout: "spoke-a\nspoke-b\n"},
		"table without headers": {args: []string{"clusters", "--no-headers"},
			wantContains: []string{"spoke-a", "spoke-b"}, wantAbsent: []string{"NAME", "STATE"}},
		"machines of one type by name": {args: []string{"machines", "team-a/compute-xlarge", "-o", "name"}, wantStdout: "machinetype/spoke-a/team-a/compute-xlarge\n"},
		"usage of one type": {args: []string{"usage", "--type", "compute-small", "-o", "custom-columns=CLUSTER:.cluster,MAX:.types[*].maximum"},
			wantStdout: "CLUSTER  MAX\nspoke-a  9\nspoke-b  7\n"},
		"usage of one group/type, fleet rows too": {args: []string{"usage", "--type", "team-b/compute-small"},
			wantContains: []string{"spoke-b", "(fleet)"}, wantAbsent: []string{"spoke-a", "compute-xlarge", "team-a"}},
		"usage -o name":           {args: []string{"usage", "-o", "name"}, wantStdout: "usage/spoke-a\nusage/spoke-b\n"},
		"hold list -o name":       {args: []string{"hold", "list", "-o", "name"}, wantStdout: "hold/train-1\n"},
		"hold list NAME":          {args: []string{"hold", "list", "train-1", "--no-headers"}, wantContains: []string{"train-1", "Held"}, wantAbsent: []string{"NAME"}},
		"hold list of no hold":    {args: []string{"hold", "list", "nope"}, wantCode: ExitFailure, wantStderr: `fleet hold "nope" not found`},
		"hold get -o jsonpath":    {args: []string{"hold", "get", "train-1", "-o", "jsonpath={.count}"}, wantStdout: "2\n"},
		"capacity -o name":        {args: []string{"capacity", "compute-xlarge", "-o", "name"}, wantStdout: ""},
		"yaml still documents":    {args: []string{"hold", "list", "-o", "yaml"}, wantContains: []string{"name: train-1"}},
		"wide still wide":         {args: []string{"clusters", "-o", "wide"}, wantContains: []string{"GENERATION"}},
		"get clusters NAME":       {args: []string{"get", "clusters", "spoke-b", "-o", "name"}, wantStdout: "cluster/spoke-b\n"},
		"get cluster, singular":   {args: []string{"get", "cluster", "-o", "name"}, wantStdout: "cluster/spoke-a\ncluster/spoke-b\n"},
		"get holds":               {args: []string{"get", "holds", "-o", "name"}, wantStdout: "hold/train-1\n"},
		"get machines TYPE":       {args: []string{"get", "machines", "compute-xlarge", "-o", "name"}, wantStdout: "machinetype/spoke-a/team-a/compute-xlarge\n"},
		"get of an unknown kind":  {args: []string{"get", "nodes"}, wantCode: ExitUsage, wantStderr: `unknown kind "nodes"`},
		"version refuses -o name": {args: []string{"version", "-o", "name"}, wantCode: ExitUsage, wantStderr: "is for the commands that list objects"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := runFleet(newFleetHub(), tc.args...)
			if r.code != tc.wantCode {
				t.Fatalf("exit %d, want %d; stderr %q", r.code, tc.wantCode, r.stderr)
			}
			if tc.wantStderr != "" && !strings.Contains(r.stderr, tc.wantStderr) {
				t.Errorf("stderr %q, want it to contain %q", r.stderr, tc.wantStderr)
			}
			if tc.wantCode != ExitOK {
				return
			}
			if tc.wantContains == nil && tc.wantAbsent == nil {
				if diff := cmp.Diff(tc.wantStdout, r.stdout); diff != "" {
					t.Errorf("stdout (-want +got):\n%s", diff)
				}
				return
			}
			for _, want := range tc.wantContains {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
				}
			}
			for _, absent := range tc.wantAbsent {
				if strings.Contains(r.stdout, absent) {
					t.Errorf("stdout has %q:\n%s", absent, r.stdout)
				}
			}
		})
	}
}

// machines NAME asks the hub for that type (and group) only.
func TestMachinesNameFiltersAtTheHub(t *testing.T) {
	hub := newFleetHub()
	if r := runFleet(hub, "machines", "team-a/compute-xlarge"); r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if len(hub.machinesRequests) != 1 || hub.machinesRequests[0].GetType() != "compute-xlarge" || hub.machinesRequests[0].GetGroup() != "team-a" {
		t.Errorf("ListMachines requests = %v, want type compute-xlarge of group team-a", hub.machinesRequests)
	}
	hub = newFleetHub()
	hub.machines = &queryv1.ListMachinesResponse{}
	if r := runFleet(hub, "machines", "gone"); r.code != ExitFailure || !strings.Contains(r.stderr, "machine type gone not found") {
		t.Errorf("a type no cluster has: exit %d, stderr %q, want 1 naming it", r.code, r.stderr)
	}
}

// Cluster, hold and type names are completed from the hub.
func TestDynamicCompletion(t *testing.T) {
	cases := map[string]struct {
		args []string
		want []string
		not  []string
	}{
		"clusters":                     {args: []string{"__complete", "clusters", ""}, want: []string{"spoke-a", "spoke-b"}},
		"clusters by prefix":           {args: []string{"__complete", "clusters", "spoke-b"}, want: []string{"spoke-b"}, not: []string{"spoke-a"}},
		"clusters already named":       {args: []string{"__complete", "clusters", "spoke-a", ""}, want: []string{"spoke-b"}, not: []string{"spoke-a"}},
		"hold get":                     {args: []string{"__complete", "hold", "get", ""}, want: []string{"train-1"}},
		"hold release":                 {args: []string{"__complete", "hold", "release", "tr"}, want: []string{"train-1"}},
		"machines":                     {args: []string{"__complete", "machines", ""}, want: []string{"compute-xlarge", "team-a/compute-xlarge"}},
		"--cluster of usage":           {args: []string{"__complete", "usage", "--cluster", ""}, want: []string{"spoke-a", "spoke-b"}},
		"describe cluster":             {args: []string{"__complete", "describe", "cluster", ""}, want: []string{"spoke-a", "spoke-b"}},
		"-o offers the object formats": {args: []string{"__complete", "clusters", "-o", ""}, want: []string{"name", "jsonpath=", "custom-columns="}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := runFleet(newFleetHub(), tc.args...)
			lines := strings.Split(r.stdout, "\n")
			has := func(s string) bool {
				for _, l := range lines {
					if l == s {
						return true
					}
				}
				return false
			}
			for _, w := range tc.want {
				if !has(w) {
					t.Errorf("completions lack %q:\n%s", w, r.stdout)
				}
			}
			for _, n := range tc.not {
				if has(n) {
					t.Errorf("completions offer %q:\n%s", n, r.stdout)
				}
			}
		})
	}
}

// describe cluster gathers the cluster's state, its machine types, its
// usage and the holds with a part in it, and nothing of other clusters.
func TestDescribeCluster(t *testing.T) {
	hub := newFleetHub()
	hub.clusters[0].StateMessage = "all\x1b[31m good"
	hub.holds = append(hub.holds,
		&queryv1.FleetHold{Name: "train-1", Clusters: []*queryv1.FleetHoldCluster{{Cluster: "spoke-a", Type: "compute-xlarge", Count: 2, Held: 2}}},
		&queryv1.FleetHold{Name: "elsewhere", Clusters: []*queryv1.FleetHoldCluster{{Cluster: "spoke-b", Type: "compute-small", Count: 1}}})
	hub.holds = hub.holds[1:]
	r := runFleet(hub, "describe", "cluster", "spoke-a")
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"Name:", "spoke-a", "Available", "v0.2.0", "Last heartbeat: never", "Machine types:", "compute-xlarge", "Usage:", "compute-small", "Fleet holds:", "train-1"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("describe lacks %q:\n%s", want, r.stdout)
		}
	}
	for _, absent := range []string{"elsewhere", "\x1b"} {
		if strings.Contains(r.stdout, absent) {
			t.Errorf("describe shows %q:\n%s", absent, r.stdout)
		}
	}
	r = runFleet(hub, "describe", "cluster", "spoke-a", "-o", "json")
	for _, want := range []string{`"cluster"`, `"machineTypes"`, `"usage"`, `"holds"`, `"train-1"`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("describe -o json lacks %s:\n%s", want, r.stdout)
		}
	}
	if r := runFleet(hub, "describe", "cluster", "spoke-z"); r.code != ExitFailure || !strings.Contains(r.stderr, "cluster spoke-z not found") {
		t.Errorf("describe of an unknown cluster: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runFleet(hub, "describe", "node", "x"); r.code != ExitUsage || !strings.Contains(r.stderr, `unknown describe kind "node"`) {
		t.Errorf("describe node: exit %d, stderr %q", r.code, r.stderr)
	}
}

// hold create --dry-run asks FindCapacity with the hold's target, count and
// mode, books nothing, and exits 1 when the hold would not fit.
func TestHoldCreateDryRun(t *testing.T) {
	hub := &bookingHub{fleetHub: newFleetHub()}
	r := runWith(hub, "hold", "create", "train-9", "team-a/compute-xlarge", "--count", "3", "--same-cluster", "--dry-run")
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if hub.created != 0 {
		t.Errorf("a dry run called CreateHold %d times", hub.created)
	}
	if len(hub.capacityRequests) != 1 {
		t.Fatalf("FindCapacity asked %d times, want once", len(hub.capacityRequests))
	}
	got := hub.capacityRequests[0]
	if got.GetCount() != 3 || got.GetMode() != queryv1.CapacityMode_CAPACITY_MODE_SAME_CLUSTER ||
		got.GetMachineType().GetType() != "compute-xlarge" || got.GetMachineType().GetGroup() != "team-a" {
		t.Errorf("FindCapacity request = %v, want 3 x team-a/compute-xlarge in one cluster", got)
	}
	if !strings.Contains(r.stdout, "nothing was booked") {
		t.Errorf("the dry run does not say nothing was booked:\n%s", r.stdout)
	}
	hub.unsatisfiable = true
	if r := runWith(hub, "hold", "create", "train-9", "compute-xlarge", "--dry-run"); r.code != ExitFailure || !strings.Contains(r.stderr, "hold train-9 would not fit") {
		t.Errorf("a dry run that does not fit: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runWith(hub, "hold", "create", "Bad_Name", "compute-xlarge", "--dry-run"); r.code != ExitUsage {
		t.Errorf("a dry run is validated as a create: exit %d, stderr %q", r.code, r.stderr)
	}
}

// bookingHub counts CreateHold calls and can answer FindCapacity unsatisfied.
type bookingHub struct {
	*fleetHub
	created       int
	unsatisfiable bool
}

func (b *bookingHub) CreateHold(context.Context, *queryv1.CreateHoldRequest, ...grpc.CallOption) (*queryv1.FleetHold, error) {
	b.created++
	return &queryv1.FleetHold{}, nil
}

func (b *bookingHub) FindCapacity(ctx context.Context, req *queryv1.FindCapacityRequest, opts ...grpc.CallOption) (*queryv1.FindCapacityResponse, error) {
	resp, err := b.fleetHub.FindCapacity(ctx, req, opts...)
	if b.unsatisfiable {
		resp = &queryv1.FindCapacityResponse{Satisfiable: false}
	}
	return resp, err
}

// watchingFleet is a fleetHub whose Watch streams scripted events.
type watchingFleet struct {
	*fleetHub
	watcher scriptedWatcher
}

func (w *watchingFleet) Watch(ctx context.Context, req *queryv1.WatchRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[queryv1.ClusterEvent], error) {
	return w.watcher.Watch(ctx, req, opts...)
}

// machines -w prints the changed cluster's machine types at each event of
// the hub's Watch, asking them again with the command's filters; -o name
// and custom-columns print each event.
func TestMachinesWatch(t *testing.T) {
	hub := &watchingFleet{fleetHub: newFleetHub()}
	removed := event("spoke-b")
	removed.Type = queryv1.ClusterEventType_CLUSTER_EVENT_TYPE_REMOVED
	hub.watcher.streams = []*scriptedStream{{events: []*queryv1.ClusterEvent{event("spoke-a"), removed}, err: io.EOF}}
	r := runWith(hub, "machines", "-w", "--gpu-family", "ampere")
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if len(hub.machinesRequests) != 1 || hub.machinesRequests[0].GetCluster() != "spoke-a" || hub.machinesRequests[0].GetGpuFamily() != "ampere" {
		t.Errorf("ListMachines requests = %v, want one for spoke-a with --gpu-family ampere", hub.machinesRequests)
	}
	if strings.Count(r.stdout, "CLUSTER") != 1 || !strings.Contains(r.stdout, "compute-xlarge") || !strings.Contains(r.stdout, "Removed") {
		t.Errorf("machines -w printed:\n%s", r.stdout)
	}
	hub.watcher = scriptedWatcher{streams: []*scriptedStream{{events: []*queryv1.ClusterEvent{event("spoke-a"), event("spoke-b")}, err: io.EOF}}}
	r = runWith(hub, "clusters", "-w", "-o", "custom-columns=NAME:.cluster.name")
	if diff := cmp.Diff("NAME\nspoke-a\nspoke-b\n", r.stdout); diff != "" || r.code != ExitOK {
		t.Errorf("clusters -w -o custom-columns: exit %d (-want +got):\n%s", r.code, diff)
	}
}

// changingHolds answers ListHolds with the next of its answers each time.
type changingHolds struct {
	*watchingFleet
	answers [][]*queryv1.FleetHold
	calls   int
}

func (c *changingHolds) ListHolds(context.Context, *queryv1.ListHoldsRequest, ...grpc.CallOption) (*queryv1.ListHoldsResponse, error) {
	a := c.answers[min(c.calls, len(c.answers)-1)]
	c.calls++
	return &queryv1.ListHoldsResponse{Holds: a}, nil
}

// hold list -w asks the holds again at each event of the hub's Watch and
// prints a hold when it changed, once.
func TestHoldListWatch(t *testing.T) {
	pending := &queryv1.FleetHold{Name: "train-1", Phase: queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_PENDING, Count: 2}
	held := &queryv1.FleetHold{Name: "train-1", Phase: queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_HELD, Count: 2,
		Clusters: []*queryv1.FleetHoldCluster{{Cluster: "spoke-a", Count: 2, Held: 2}}}
	other := &queryv1.FleetHold{Name: "train-2", Phase: queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_HELD, Count: 1}
	hub := &changingHolds{watchingFleet: &watchingFleet{fleetHub: newFleetHub()}, answers: [][]*queryv1.FleetHold{
		{pending}, {pending}, {held, other}, {held, other},
	}}
	hub.watcher.streams = []*scriptedStream{{events: []*queryv1.ClusterEvent{event("spoke-a"), event("spoke-b"), event("spoke-a"), event("spoke-a")}, err: io.EOF}}
	r := runWith(hub, "hold", "list", "-w")
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[1], "Pending") ||
		!strings.Contains(lines[2], "Held") || !strings.Contains(lines[2], "spoke-a:2") || !strings.HasPrefix(lines[3], "train-2") {
		t.Errorf("hold list -w printed, want a header, train-1 Pending, train-1 Held, train-2:\n%s", r.stdout)
	}
	if hub.calls != 4 {
		t.Errorf("ListHolds asked %d times, want once per event (4)", hub.calls)
	}
	if r := runWith(hub, "hold", "list", "-w", "-o", "json"); r.code != ExitUsage || !strings.Contains(r.stderr, "prints rows") {
		t.Errorf("hold list -w -o json: exit %d, stderr %q", r.code, r.stderr)
	}
}
