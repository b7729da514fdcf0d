package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

func TestClustersWideShowsWhyAClusterIsStale(t *testing.T) {
	const why = "the spoke agent cannot reach its own cluster's API server since 2025-05-01T11:59:00Z"
	cluster := &queryv1.Cluster{Name: "a", State: queryv1.ClusterState_CLUSTER_STATE_STALE, StateMessage: why}
	cases := map[string]struct {
		format      string
		wantMessage bool
	}{
		"wide shows the message": {format: formatWide, wantMessage: true},
		"table keeps it out":     {format: formatTable},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			p, err := newPrinter(tc.format, Env{Stdout: &out, Now: time.Now})
			if err != nil {
				t.Fatal(err)
			}
			tbl := &table{columns: clusterColumns}
			p.clusterRow(tbl, cluster)
			if err := p.table(tbl, true); err != nil {
				t.Fatal(err)
			}
			got := strings.Contains(out.String(), why) && strings.Contains(out.String(), "MESSAGE")
			if diff := cmp.Diff(tc.wantMessage, got); diff != "" {
				t.Errorf("message shown (-want +got):\n%s\noutput:\n%s", diff, out.String())
			}
		})
	}
}

func TestClustersWideShowsAgentModeAndUnreachableWebhooks(t *testing.T) {
	const why = "the API server could not call the webhook at https://10.0.0.5:9443: connection refused"
	cases := map[string]struct {
		cluster      *queryv1.Cluster
		wantContains []string
	}{
		"hosted member whose API server cannot reach the agent": {
			cluster:      &queryv1.Cluster{Name: "edge-1", State: queryv1.ClusterState_CLUSTER_STATE_AVAILABLE, AgentMode: "hosted", InjectionUnavailable: why},
			wantContains: []string{"MODE", "hosted", "injection unavailable: " + why},
		},
		"in-cluster agent": {
			cluster:      &queryv1.Cluster{Name: "a", State: queryv1.ClusterState_CLUSTER_STATE_AVAILABLE, AgentMode: "in-cluster"},
			wantContains: []string{"MODE", "in-cluster"},
		},
		"agent that predates agent modes": {
			cluster:      &queryv1.Cluster{Name: "old", State: queryv1.ClusterState_CLUSTER_STATE_AVAILABLE},
			wantContains: []string{"MODE", " -"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			p, err := newPrinter(formatWide, Env{Stdout: &out, Now: time.Now})
			if err != nil {
				t.Fatal(err)
			}
			tbl := &table{columns: clusterColumns}
			p.clusterRow(tbl, tc.cluster)
			if err := p.table(tbl, true); err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.wantContains {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

func TestClustersTableCannotBeForgedByASpokesText(t *testing.T) {
	// A spoke writes its agent version and its injection message; neither
	// may add a row for another cluster nor send the terminal an escape.
	cluster := &queryv1.Cluster{
		Name: "evil", State: queryv1.ClusterState_CLUSTER_STATE_AVAILABLE, AgentMode: "hosted",
		AgentVersion:         "v1\x1b[2J",
		InjectionUnavailable: "x\nprod-a  Available  v1.0  1s  3  3  1s  true  1  in-cluster\tok\r",
	}
	var out bytes.Buffer
	p, err := newPrinter(formatWide, Env{Stdout: &out, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	tbl := &table{columns: clusterColumns}
	p.clusterRow(tbl, cluster)
	if err := p.table(tbl, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Errorf("want a header and one row, got %d lines:\n%s", len(lines), out.String())
	}
	if strings.ContainsAny(out.String(), "\x1b\r") {
		t.Errorf("a control character reached the terminal: %q", out.String())
	}
}
