package cli

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// deregisteringHub answers DeregisterCluster with answer (or err) and
// records what it was asked.
type deregisteringHub struct {
	queryv1.QueryClient
	answer   *queryv1.DeregisterClusterResponse
	err      error
	requests []*queryv1.DeregisterClusterRequest
}

func (d *deregisteringHub) DeregisterCluster(_ context.Context, req *queryv1.DeregisterClusterRequest, _ ...grpc.CallOption) (*queryv1.DeregisterClusterResponse, error) {
	d.requests = append(d.requests, req)
	return d.answer, d.err
}

// runWithInput runs imperatorctl against hub with stdin as its standard
// input (nil: none).
func runWithInput(hub queryv1.QueryClient, stdin io.Reader, args ...string) ran {
	var out, errb bytes.Buffer
	var r ran
	env := Env{Stdout: &out, Stderr: &errb, Stdin: stdin, Getenv: func(string) string { return "" }}
	cmd := newCommand(env, func(c *command) (func(), error) {
		r.connected = true
		c.client, c.hub = hub, "hub.example.com:9443"
		return func() {}, nil
	})
	r.code = Execute(context.Background(), cmd, args, env)
	r.stdout, r.stderr = out.String(), errb.String()
	return r
}

func TestClusterDeregister(t *testing.T) {
	deregistered := &queryv1.DeregisterClusterResponse{}
	cases := map[string]struct {
		args         []string
		stdin        io.Reader
		answer       *queryv1.DeregisterClusterResponse
		err          error
		wantCode     int
		wantRequests []*queryv1.DeregisterClusterRequest
		wantStdout   string
		wantStderr   string
	}{
		"--yes deregisters without asking": {
			args: []string{"cluster", "deregister", "spoke-a", "--yes"}, answer: deregistered,
			wantRequests: []*queryv1.DeregisterClusterRequest{{Name: "spoke-a"}},
			wantStdout:   "cluster/spoke-a deregistered\n",
		},
		"the name typed confirms": {
			args: []string{"cluster", "deregister", "spoke-a"}, stdin: strings.NewReader("spoke-a\n"), answer: deregistered,
			wantRequests: []*queryv1.DeregisterClusterRequest{{Name: "spoke-a"}},
			wantStdout:   "cluster/spoke-a deregistered\n",
			wantStderr:   "Type the cluster's name to confirm",
		},
		"another name typed aborts before asking the hub": {
			args: []string{"cluster", "deregister", "spoke-a"}, stdin: strings.NewReader("spoke-b\n"),
			wantCode: ExitFailure, wantStderr: `not deregistered: "spoke-b" typed, not the cluster's name "spoke-a"`,
		},
		"nothing typed aborts": {
			args: []string{"cluster", "deregister", "spoke-a"}, stdin: strings.NewReader(""),
			wantCode: ExitFailure, wantStderr: "no confirmation was typed",
		},
		"no standard input needs --yes": {
			args:     []string{"cluster", "deregister", "spoke-a"},
			wantCode: ExitUsage, wantStderr: "pass --yes",
		},
		"--release-holds is passed on and the released holds are named": {
			args:         []string{"cluster", "deregister", "spoke-a", "-y", "--release-holds"},
			answer:       &queryv1.DeregisterClusterResponse{ReleasedHolds: []string{"train-a", "train-b"}},
			wantRequests: []*queryv1.DeregisterClusterRequest{{Name: "spoke-a", ReleaseHolds: true}},
			wantStdout:   "fleethold/train-a released\nfleethold/train-b released\ncluster/spoke-a deregistered\n",
		},
		"an unknown cluster is a clear error": {
			args:         []string{"cluster", "deregister", "nope", "--yes"},
			err:          status.Error(codes.NotFound, `cluster "nope" is not registered at the hub (imperatorctl clusters lists those that are)`),
			wantRequests: []*queryv1.DeregisterClusterRequest{{Name: "nope"}},
			wantCode:     ExitFailure, wantStderr: `cluster "nope" is not registered at the hub`,
		},
		"holds placing units refuse it": {
			args:         []string{"cluster", "deregister", "spoke-a", "--yes"},
			err:          status.Error(codes.FailedPrecondition, `fleet holds still place units on cluster "spoke-a": train-a; release them first`),
			wantRequests: []*queryv1.DeregisterClusterRequest{{Name: "spoke-a"}},
			wantCode:     ExitFailure, wantStderr: `cluster "spoke-a" not deregistered: fleet holds still place units on cluster "spoke-a": train-a`,
		},
		"a viewer is refused": {
			args:         []string{"cluster", "deregister", "spoke-a", "--yes"},
			err:          status.Error(codes.PermissionDenied, `"alice" is a viewer: this call needs a admin certificate`),
			wantRequests: []*queryv1.DeregisterClusterRequest{{Name: "spoke-a"}},
			wantCode:     ExitDenied, wantStderr: "refused the request",
		},
		"an invalid name never reaches the hub": {
			args:     []string{"cluster", "deregister", "Spoke_A", "--yes"},
			wantCode: ExitUsage, wantStderr: "Spoke_A",
		},
		"no name": {
			args:     []string{"cluster", "deregister", "--yes"},
			wantCode: ExitUsage, wantStderr: "usage: imperatorctl cluster deregister NAME",
		},
		"an unknown cluster command": {
			args:     []string{"cluster", "remove", "spoke-a"},
			wantCode: ExitUsage, wantStderr: `unknown cluster command "remove"`,
		},
		"json answer": {
			args:         []string{"cluster", "deregister", "spoke-a", "--yes", "-o", "json"},
			answer:       &queryv1.DeregisterClusterResponse{ReleasedHolds: []string{"train-a"}},
			wantRequests: []*queryv1.DeregisterClusterRequest{{Name: "spoke-a"}},
			wantStdout:   "\"releasedHolds\"",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			hub := &deregisteringHub{answer: tc.answer, err: tc.err}
			r := runWithInput(hub, tc.stdin, tc.args...)
			if r.code != tc.wantCode {
				t.Errorf("exit %d, want %d; stderr %q", r.code, tc.wantCode, r.stderr)
			}
			if diff := cmp.Diff(tc.wantRequests, hub.requests, protocmp.Transform()); diff != "" {
				t.Errorf("requests to the hub (-want +got):\n%s", diff)
			}
			if !strings.Contains(r.stdout, tc.wantStdout) {
				t.Errorf("stdout %q, want it to contain %q", r.stdout, tc.wantStdout)
			}
			if !strings.Contains(r.stderr, tc.wantStderr) {
				t.Errorf("stderr %q, want it to contain %q", r.stderr, tc.wantStderr)
			}
		})
	}
}

func TestClustersFlagAnAgentOutsideTheSkewPolicy(t *testing.T) {
	const skew = "agent v0.3.0 is newer than hub v0.2.0; upgrade the hub first (an agent may be as new as its hub, not newer)"
	cases := map[string]struct {
		cluster     *queryv1.Cluster
		format      string
		wantContain []string
		wantLacking []string
	}{
		"table flags the agent": {
			cluster: &queryv1.Cluster{Name: "a", AgentVersion: "v0.3.0", VersionSkew: skew}, format: formatTable,
			wantContain: []string{"v0.3.0 (unsupported skew)"},
		},
		"wide says why": {
			cluster: &queryv1.Cluster{Name: "a", AgentVersion: "v0.3.0", VersionSkew: skew}, format: formatWide,
			wantContain: []string{"v0.3.0 (unsupported skew)", "unsupported version skew: " + skew},
		},
		"an agent inside the policy is not flagged": {
			cluster: &queryv1.Cluster{Name: "a", AgentVersion: "v0.2.0"}, format: formatWide,
			wantContain: []string{"v0.2.0"}, wantLacking: []string{"skew"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			p, err := newPrinter(tc.format, Env{Stdout: &out, Now: time.Now})
			if err != nil {
				t.Fatal(err)
			}
			tbl := &table{columns: clusterColumns}
			p.clusterRow(tbl, tc.cluster)
			if err := p.table(tbl, true); err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.wantContain {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
			for _, unwanted := range tc.wantLacking {
				if strings.Contains(out.String(), unwanted) {
					t.Errorf("output has %q:\n%s", unwanted, out.String())
				}
			}
		})
	}
}

func TestDescribeClusterShowsVersionSkew(t *testing.T) {
	const skew = "agent v0.1.0 is more than one minor version older than hub v0.3.0; upgrade the agent to v0.2 or v0.3"
	var out bytes.Buffer
	p, err := newPrinter(formatTable, Env{Stdout: &out, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	d := &clusterDescription{cluster: &queryv1.Cluster{Name: "a", AgentVersion: "v0.1.0", VersionSkew: skew}}
	if err := p.description(d); err != nil {
		t.Fatal(err)
	}
	if want := "Version skew:   unsupported: " + skew; !strings.Contains(out.String(), want) {
		t.Errorf("describe lacks %q:\n%s", want, out.String())
	}
}
