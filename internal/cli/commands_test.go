package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// fakeHub is a Query client answering from fixed data and recording what it
// was asked; calls it does not override fail as the embedded nil would.
type fakeHub struct {
	queryv1.QueryClient
	usage    *queryv1.GetUsageResponse
	machines *queryv1.ListMachinesResponse
	version  *queryv1.Version
	err      error // returned by every call when set
	tokens   []*queryv1.Token

	capacityRequests []*queryv1.FindCapacityRequest
	createRequests   []*queryv1.CreateTokenRequest
}

func (f *fakeHub) GetUsage(context.Context, *queryv1.GetUsageRequest, ...grpc.CallOption) (*queryv1.GetUsageResponse, error) {
	return f.usage, f.err
}

func (f *fakeHub) ListMachines(context.Context, *queryv1.ListMachinesRequest, ...grpc.CallOption) (*queryv1.ListMachinesResponse, error) {
	return f.machines, f.err
}

func (f *fakeHub) FindCapacity(_ context.Context, req *queryv1.FindCapacityRequest, _ ...grpc.CallOption) (*queryv1.FindCapacityResponse, error) {
	f.capacityRequests = append(f.capacityRequests, req)
	return &queryv1.FindCapacityResponse{Satisfiable: true}, f.err
}

func (f *fakeHub) GetVersion(context.Context, *queryv1.GetVersionRequest, ...grpc.CallOption) (*queryv1.GetVersionResponse, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &queryv1.GetVersionResponse{Hub: f.version}, nil
}

func (f *fakeHub) CreateToken(_ context.Context, req *queryv1.CreateTokenRequest, _ ...grpc.CallOption) (*queryv1.CreateTokenResponse, error) {
	f.createRequests = append(f.createRequests, req)
	return &queryv1.CreateTokenResponse{Token: "abcdef.0123456789abcdef", Info: &queryv1.Token{Id: "abcdef", Expiration: timestamppb.New(time.Unix(0, 0))}}, f.err
}

func (f *fakeHub) ListTokens(context.Context, *queryv1.ListTokensRequest, ...grpc.CallOption) (*queryv1.ListTokensResponse, error) {
	return &queryv1.ListTokensResponse{Tokens: f.tokens}, f.err
}

func (f *fakeHub) RevokeToken(context.Context, *queryv1.RevokeTokenRequest, ...grpc.CallOption) (*queryv1.RevokeTokenResponse, error) {
	return &queryv1.RevokeTokenResponse{}, f.err
}

type ran struct {
	stdout, stderr string
	code           int
	connected      bool
}

// runAgainst runs imperatorctl with args against hub instead of a dialled one.
func runAgainst(hub *fakeHub, args ...string) ran {
	return runWith(hub, args...)
}

// runWith runs imperatorctl with args against any Query client.
func runWith(hub queryv1.QueryClient, args ...string) ran {
	var out, errb bytes.Buffer
	var r ran
	env := Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	cmd := newCommand(env, func(c *command) (func(), error) {
		r.connected = true
		c.client, c.tokens, c.hub = hub, remoteTokens{hub}, "hub.example.com:9443"
		return func() {}, nil
	})
	r.code = Execute(context.Background(), cmd, args, env)
	r.stdout, r.stderr = out.String(), errb.String()
	return r
}

func TestFlagsGoAnywhereAmongArguments(t *testing.T) {
	typeTarget := func(group, typ string) *queryv1.FindCapacityRequest_MachineType {
		return &queryv1.FindCapacityRequest_MachineType{MachineType: &queryv1.MachineTypeRef{Group: group, Type: typ}}
	}
	spread, same := queryv1.CapacityMode_CAPACITY_MODE_SPREAD, queryv1.CapacityMode_CAPACITY_MODE_SAME_CLUSTER
	cases := map[string]struct {
		args []string
		want *queryv1.FindCapacityRequest
	}{
		"flags after the type": {
			args: []string{"capacity", "compute-xlarge", "--count", "4"},
			want: &queryv1.FindCapacityRequest{Target: typeTarget("", "compute-xlarge"), Count: 4, Mode: spread},
		},
		"flags before the type": {
			args: []string{"capacity", "--count=3", "--same-cluster", "team-a/compute-xlarge"},
			want: &queryv1.FindCapacityRequest{Target: typeTarget("team-a", "compute-xlarge"), Count: 3, Mode: same},
		},
		"global flags after the command": {
			args: []string{"capacity", "-o", "json", "compute-xlarge", "--timeout", "3s"},
			want: &queryv1.FindCapacityRequest{Target: typeTarget("", "compute-xlarge"), Count: 1, Mode: spread},
		},
		"a shape": {
			args: []string{"capacity", "--gpu", "8", "--gpu-product", "NVIDIA-H100-80GB-HBM3", "--memory", "32Gi"},
			want: &queryv1.FindCapacityRequest{Target: &queryv1.FindCapacityRequest_Shape{Shape: &queryv1.ResourceShape{
				GpuCount: 8, GpuProduct: "NVIDIA-H100-80GB-HBM3", Memory: "32Gi"}}, Count: 1, Mode: spread},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			hub := &fakeHub{}
			if r := runAgainst(hub, tc.args...); r.code != ExitOK {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			if diff := cmp.Diff([]*queryv1.FindCapacityRequest{tc.want}, hub.capacityRequests, protocmp.Transform()); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
		})
	}
}

// Two guests in line for the one unit of spoke-a: the usage table says so
// and offers no free unit.
func TestUsageShowsQueuedGuests(t *testing.T) {
	observed := timestamppb.New(time.Now().Add(-3 * time.Second))
	line := &queryv1.TypeUsage{Group: "team-a", Type: "compute-xlarge", Maximum: 1, Reserved: 0, Used: 1, Waiting: 2, Queued: 2, Free: 0}
	hub := &fakeHub{
		usage: &queryv1.GetUsageResponse{
			Clusters: []*queryv1.ClusterUsage{{Cluster: "spoke-a", State: queryv1.ClusterState_CLUSTER_STATE_AVAILABLE, ObservedAt: observed, Types: []*queryv1.TypeUsage{line}}},
			Fleet:    []*queryv1.TypeUsage{line},
		},
		machines: &queryv1.ListMachinesResponse{MachineTypes: []*queryv1.MachineTypeInfo{{
			Cluster: "spoke-a", ClusterState: queryv1.ClusterState_CLUSTER_STATE_AVAILABLE, Machine: "general", Group: "team-a", Type: "compute-xlarge",
			Cpu: "40", Memory: "128Gi", Usage: &federationv1.Usage{Maximum: 1, Used: 1, Waiting: 2, Queued: 2}, ObservedAt: observed,
		}}},
	}
	cases := map[string]struct {
		args []string
		want string
	}{
		"usage table": {args: []string{"usage"}, want: `CLUSTER  STATE  GROUP  TYPE  MAXIMUM  RESERVED  USED  WAITING  QUEUED  HELD  FREE
spoke-a  Available  team-a  compute-xlarge  1  0  1  2  2  0  0
(fleet)  -  team-a  compute-xlarge  1  0  1  2  2  0  0
`},
		"usage wide": {args: []string{"usage", "-o", "wide"}, want: `CLUSTER  STATE  GROUP  TYPE  MAXIMUM  RESERVED  USED  WAITING  QUEUED  HELD  FREE  OBSERVED
spoke-a  Available  team-a  compute-xlarge  1  0  1  2  2  0  0  3s
(fleet)  -  team-a  compute-xlarge  1  0  1  2  2  0  0  -
`},
		"machines wide": {args: []string{"machines", "-o", "wide"}, want: `CLUSTER  GROUP  TYPE  CPU  MEMORY  GPU  FREE  USED  WAITING  MAXIMUM  MACHINE  RESERVED  QUEUED  STATE  NODES(R/NR/M)  OBSERVED
spoke-a  team-a  compute-xlarge  40  128Gi  -  0  1  2  1  general  0  2  Available  0/0/0  3s
`},
	}
	spaces := strings.NewReplacer("   ", "  ")
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := runAgainst(hub, tc.args...)
			if r.code != ExitOK {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			got := r.stdout
			for strings.Contains(got, "   ") {
				got = spaces.Replace(got)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("usage json", func(t *testing.T) {
		r := runAgainst(hub, "usage", "-o", "json")
		var got queryv1.GetUsageResponse
		if err := protojson.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("%v in %q", err, r.stdout)
		}
		if !strings.Contains(r.stdout, `"queued": 2`) || got.GetFleet()[0].GetQueued() != 2 {
			t.Errorf("json lacks the queued guests:\n%s", r.stdout)
		}
	})
}

func TestVersion(t *testing.T) {
	hubVersion := &queryv1.Version{Version: "v9.8.7", GitCommit: "0123abc", GoVersion: "go1.26.8", Platform: "linux/arm64"}
	client := clientVersion().GetVersion()
	cases := map[string]struct {
		hub           *fakeHub
		args          []string
		wantCode      int
		wantConnected bool
		wantStdout    []string
		wantStderr    string
	}{
		"client and hub": {
			hub: &fakeHub{version: hubVersion}, args: []string{"version"}, wantConnected: true,
			wantStdout: []string{"Client Version: " + client + "\n", "Hub Version: v9.8.7\n"},
		},
		"wide adds commit, Go and platform": {
			hub: &fakeHub{version: hubVersion}, args: []string{"version", "-o", "wide"}, wantConnected: true,
			wantStdout: []string{"Hub Version: v9.8.7 (commit 0123abc, go1.26.8, linux/arm64)\n"},
		},
		"json for scripts": {
			hub: &fakeHub{version: hubVersion}, args: []string{"version", "-o", "json"}, wantConnected: true,
			wantStdout: []string{`"client": {`, `"hub": {`, `"version": "v9.8.7"`, `"gitCommit": "0123abc"`},
		},
		"--client never contacts the hub": {
			hub: &fakeHub{err: status.Error(codes.Unavailable, "connection refused")}, args: []string{"version", "--client"},
			wantStdout: []string{"Client Version: " + client + "\n"},
		},
		"an unreachable hub: the client's version and exit 3": {
			hub: &fakeHub{err: status.Error(codes.Unavailable, "connection refused")}, args: []string{"version"}, wantConnected: true,
			wantCode: ExitUnreachable, wantStdout: []string{"Client Version: " + client + "\n"}, wantStderr: "hub unreachable at hub.example.com:9443",
		},
	}
	t.Run("no hub configured: the client's version and exit 2", func(t *testing.T) {
		var out, errb bytes.Buffer
		code := Run(context.Background(), []string{"version"}, Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
		if code != ExitUsage || out.String() != "Client Version: "+client+"\n" || !strings.Contains(errb.String(), "no hub address") {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
		}
	})
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := runAgainst(tc.hub, tc.args...)
			if r.code != tc.wantCode || r.connected != tc.wantConnected {
				t.Errorf("exit %d, connected %t; want exit %d, connected %t (stderr %q)", r.code, r.connected, tc.wantCode, tc.wantConnected, r.stderr)
			}
			for _, want := range tc.wantStdout {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
				}
			}
			if !strings.Contains(r.stderr, tc.wantStderr) {
				t.Errorf("stderr = %q, want %q", r.stderr, tc.wantStderr)
			}
		})
	}
}

func TestHelpIsGeneratedFromTheFlags(t *testing.T) {
	cases := map[string]struct {
		args []string
		want []string
	}{
		"root":     {args: []string{"--help"}, want: []string{"Query the fleet:", "capacity", "usage", "completion", "version", "--output string", "--hub string", "Exit codes:"}},
		"help cmd": {args: []string{"help", "usage"}, want: []string{"QUEUED", "--watch", "--cluster string", "Global Flags:", "--timeout duration"}},
		"capacity": {args: []string{"capacity", "-h"}, want: []string{"--same-cluster", "--gpu-product string", "imperatorctl capacity compute-xlarge --count 4 --same-cluster"}},
		"token":    {args: []string{"token", "create", "--help"}, want: []string{"--ttl duration", "--cluster string"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := runAgainst(&fakeHub{}, tc.args...)
			if r.code != ExitOK || r.connected {
				t.Errorf("exit %d, connected %t; want 0 without contacting the hub", r.code, r.connected)
			}
			for _, want := range tc.want {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("help lacks %q:\n%s", want, r.stdout)
				}
			}
		})
	}
}

func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{
		"bash": "__start_imperatorctl",
		"zsh":  "#compdef imperatorctl",
		"fish": "complete -c imperatorctl",
	} {
		t.Run(shell, func(t *testing.T) {
			r := runAgainst(&fakeHub{}, "completion", shell)
			if r.code != ExitOK || !strings.Contains(r.stdout, want) {
				t.Errorf("exit %d, script lacks %q:\n%.300s", r.code, want, r.stdout)
			}
		})
	}
	t.Run("-o values", func(t *testing.T) {
		r := runAgainst(&fakeHub{}, "__complete", "usage", "-o", "")
		for _, format := range []string{"table", "wide", "json", "yaml"} {
			if !strings.Contains(r.stdout, format+"\n") {
				t.Errorf("completions of -o lack %s:\n%s", format, r.stdout)
			}
		}
	})
}

// The hub binary's token command is imperatorctl's, run against the hub's
// own token calls.
func TestHubTokenCommandSharesImperatorctls(t *testing.T) {
	run := func(tokens *fakeHub, args ...string) (ran, string) {
		var out, errb bytes.Buffer
		var namespace string
		env := Env{Stdout: &out, Stderr: &errb}
		cmd := NewHubTokenCommand(env, HubTokens{
			BindFlags: func(fs *pflag.FlagSet) { fs.StringVar(&namespace, "namespace", "imperator-system", "") },
			Open: func(context.Context) (TokenAPI, string, error) {
				return remoteTokens{tokens}, "the hub cluster's API server", nil
			},
		})
		code := Execute(context.Background(), cmd, args, env)
		return ran{stdout: out.String(), stderr: errb.String(), code: code}, namespace
	}
	tokens := &fakeHub{tokens: []*queryv1.Token{{Id: "abcdef", ClusterName: "spoke-c", Description: "local fleet"}}}
	r, namespace := run(tokens, "token", "create", "--cluster", "spoke-c", "--ttl", "1h", "--namespace", "hub-system")
	if r.code != ExitOK || r.stdout != "abcdef.0123456789abcdef\n" || !strings.Contains(r.stderr, "it is shown only once") || namespace != "hub-system" {
		t.Errorf("token create: exit %d, stdout %q, stderr %q, namespace %q", r.code, r.stdout, r.stderr, namespace)
	}
	want := []*queryv1.CreateTokenRequest{{ClusterName: "spoke-c", Ttl: durationpb.New(time.Hour)}}
	if diff := cmp.Diff(want, tokens.createRequests, protocmp.Transform()); diff != "" {
		t.Errorf("create request (-want +got):\n%s", diff)
	}
	if r, _ = run(tokens, "token", "list", "-o", "json"); r.code != ExitOK || !strings.Contains(r.stdout, `"clusterName": "spoke-c"`) {
		t.Errorf("token list -o json: exit %d, stdout %q", r.code, r.stdout)
	}
	if r, _ = run(tokens, "token", "revoke"); r.code != ExitUsage || !strings.Contains(r.stderr, "hub: usage: hub token revoke ID") {
		t.Errorf("token revoke without ID: exit %d, stderr %q", r.code, r.stderr)
	}
	refused := &fakeHub{err: status.Error(codes.NotFound, `no bootstrap token with ID "zzzzzz"`)}
	if r, _ = run(refused, "token", "revoke", "zzzzzz"); r.code != ExitFailure || !strings.Contains(r.stderr, `no bootstrap token with ID "zzzzzz"`) {
		t.Errorf("token revoke of an unknown ID: exit %d, stderr %q", r.code, r.stderr)
	}
}
