package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestCommandsThatDoNotStartTheAgent: version and --version print the build
// and an unknown word is a usage error, never an agent started with it
// ignored.
func TestCommandsThatDoNotStartTheAgent(t *testing.T) {
	cases := map[string]struct {
		args       []string
		wantDone   bool
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		"version":                      {args: []string{"version"}, wantDone: true, wantStdout: "spoke "},
		"--version":                    {args: []string{"--version"}, wantDone: true, wantStdout: "spoke "},
		"--version among other flags":  {args: []string{"--namespace=x", "--version"}, wantDone: true, wantStdout: "spoke "},
		"version with an argument":     {args: []string{"version", "now"}, wantDone: true, wantCode: 2, wantStderr: `"now"`},
		"an unknown word":              {args: []string{"serve"}, wantDone: true, wantCode: 2, wantStderr: `unknown command "serve"`},
		"flags start the agent":        {args: []string{"--namespace=imperator-system"}},
		"no arguments start the agent": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code, done := runCommand(tc.args, &stdout, &stderr)
			if done != tc.wantDone || code != tc.wantCode {
				t.Errorf("spoke %v: exit %d (done %v), want %d (done %v); stderr %s", tc.args, code, done, tc.wantCode, tc.wantDone, stderr.String())
			}
			if !strings.Contains(stdout.String(), tc.wantStdout) || !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("spoke %v: stdout %q stderr %q, want %q and %q", tc.args, stdout.String(), stderr.String(), tc.wantStdout, tc.wantStderr)
			}
			if tc.wantStdout == "" && stdout.Len() > 0 {
				t.Errorf("spoke %v printed %q", tc.args, stdout.String())
			}
		})
	}
}
