package loadgen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestFleetSizesReadsTheBenchmarksSizes(t *testing.T) {
	cases := map[string]struct {
		env       string
		wantSizes []int
		wantErr   string
	}{
		"unset: the benchmark's defaults": {env: "", wantSizes: []int{200, 1000}},
		"one size":                        {env: "10000", wantSizes: []int{10000}},
		"several, with spaces":            {env: "100, 1000 ,5000", wantSizes: []int{100, 1000, 5000}},
		"not a number":                    {env: "100,ten", wantErr: `IMPERATOR_BENCH_SPOKES="100,ten": "ten" is not a number of spokes`},
		"zero":                            {env: "0", wantErr: `"0" is not a number of spokes`},
		"empty entry":                     {env: "100,", wantErr: `"" is not a number of spokes`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Setenv(SpokesEnv, tc.env)
			got, err := FleetSizes(200, 1000)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("FleetSizes() error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantSizes, got); diff != "" {
				t.Errorf("FleetSizes() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunRefusesABadJobNamingTheField(t *testing.T) {
	cases := map[string]struct {
		job string
		// command is what the generator reads ("hello" when empty).
		command string
		wantErr string
	}{
		"not JSON":                {job: "{", wantErr: "reading the job"},
		"no CA":                   {job: `{"addr":"127.0.0.1:1","spokes":[{"cluster":"a","certPEM":"Y2VydA==","keyPEM":"a2V5"}]}`, wantErr: "caPEM: the hub's CA bundle is missing"},
		"no spokes":               {job: `{"addr":"127.0.0.1:1","caPEM":"Y2E="}`, wantErr: "spokes: none to play"},
		"spoke without a name":    {job: `{"addr":"127.0.0.1:1","caPEM":"Y2E=","spokes":[{"certPEM":"Y2VydA==","keyPEM":"a2V5"}]}`, wantErr: "spokes[0].cluster: empty"},
		"spoke without an addr":   {job: `{"caPEM":"Y2E=","spokes":[{"cluster":"a","certPEM":"Y2VydA==","keyPEM":"a2V5"}]}`, wantErr: "spokes[0].addr: empty"},
		"spoke without a key":     {job: `{"addr":"127.0.0.1:1","caPEM":"Y2E=","spokes":[{"cluster":"a","certPEM":"Y2VydA=="}]}`, wantErr: "spokes[0] (a): certPEM and keyPEM are both needed"},
		"heartbeats and rounds":   {job: `{"addr":"127.0.0.1:1","caPEM":"Y2E=","heartbeatInterval":5000000000,"rounds":["CgFn"],"spokes":[{"cluster":"a","certPEM":"Y2VydA==","keyPEM":"a2V5"}]}`, wantErr: "rounds: a job with heartbeatInterval cannot have rounds"},
		"negative heartbeat":      {job: `{"addr":"127.0.0.1:1","caPEM":"Y2E=","heartbeatInterval":-1,"spokes":[{"cluster":"a","certPEM":"Y2VydA==","keyPEM":"a2V5"}]}`, wantErr: "heartbeatInterval: -1ns is negative"},
		"snapshot not a Machine":  {job: `{"addr":"127.0.0.1:1","caPEM":"Y2E=","snapshot":["/w=="],"spokes":[{"cluster":"a","certPEM":"Y2VydA==","keyPEM":"a2V5"}]}`, wantErr: "snapshot[0]"},
		"unknown command":         {job: `{"addr":"127.0.0.1:1","caPEM":"Y2E=","spokes":[{"cluster":"a","certPEM":"Y2VydA==","keyPEM":"a2V5"}]}`, wantErr: `unknown command "hello": want connect or round K`},
		"round before connecting": {job: `{"addr":"127.0.0.1:1","caPEM":"Y2E=","rounds":["CgFn"],"spokes":[{"cluster":"a","certPEM":"Y2VydA==","keyPEM":"a2V5"}]}`, command: "round 1", wantErr: "round before connect"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "job.json")
			if err := os.WriteFile(path, []byte(tc.job), 0o600); err != nil {
				t.Fatal(err)
			}
			command := "hello"
			if tc.command != "" {
				command = tc.command
			}
			var out strings.Builder
			err := Run(path, strings.NewReader(command+"\n"), &out)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Run() error = %v, want one containing %q", err, tc.wantErr)
			}
			if out.Len() != 0 {
				t.Errorf("Run() answered %q to a job it refused", out.String())
			}
		})
	}
}

func TestAnswersCarryTheLatenciesAndSkipOtherOutput(t *testing.T) {
	want := []time.Duration{time.Millisecond, 2 * time.Second, 0}
	got, ok, err := parseLatencies(formatLatencies(want))
	if err != nil || !ok {
		t.Fatalf("parseLatencies(formatLatencies()) = ok %t, error %v", ok, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("latencies (-want +got):\n%s", diff)
	}
	if _, ok, _ := parseLatencies("PASS"); ok {
		t.Error("the test binary's own output was taken for an answer")
	}
	if _, _, err := parseLatencies(answerPrefix + "12,x"); err == nil {
		t.Error("an answer with a field that is not a number was accepted")
	}
}
