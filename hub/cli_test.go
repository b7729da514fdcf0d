package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestCommandLine runs the hub's command line as an operator types it: help
// and version never touch a cluster, unknown words and bad flags are usage
// errors (exit 2) that name the culprit, and an admin subcommand whose
// command line is right but whose cluster is unreachable fails with exit 1.
func TestCommandLine(t *testing.T) {
	cases := map[string]struct {
		args       []string
		wantCode   int
		wantStdout []string
		wantStderr []string
	}{
		"help lists every subcommand": {
			args:       []string{"--help"},
			wantStdout: []string{"serve", "ca", "token", "client-cert", "version", "--listen-address"},
		},
		"help of ca lists print, init and rotate": {
			args:       []string{"ca", "--help"},
			wantStdout: []string{"print", "init", "rotate", "--ca-secret"},
		},
		"help of ca rotate names its three steps": {
			args:       []string{"ca", "rotate", "--help"},
			wantStdout: []string{"--promote", "--finish", "--force"},
		},
		"ca rotate takes one step at a time": {
			args:       []string{"ca", "rotate", "--promote", "--finish"},
			wantCode:   exitUsage,
			wantStderr: []string{"--promote and --finish"},
		},
		"ca rotate --force only finishes": {
			args:       []string{"ca", "rotate", "--promote", "--force"},
			wantCode:   exitUsage,
			wantStderr: []string{"--force: only with --finish"},
		},
		"ca rotate takes no argument": {
			args:       []string{"ca", "rotate", "now"},
			wantCode:   exitUsage,
			wantStderr: []string{`"now"`},
		},
		"ca rotate with an unreadable kubeconfig fails, not a usage error": {
			args:       []string{"ca", "rotate", "--finish", "--kubeconfig", "/nonexistent/kubeconfig"},
			wantCode:   exitFailure,
			wantStderr: []string{"--kubeconfig /nonexistent/kubeconfig"},
		},
		"help of version does not load a configuration": {
			args:       []string{"version", "--help"},
			wantStdout: []string{"Usage:", "hub version"},
		},
		"help of serve shows the server's flags": {
			args:       []string{"serve", "--help"},
			wantStdout: []string{"--grace-period", "--zap-log-level"},
		},
		"help of token is imperatorctl's token command": {
			args:       []string{"token", "--help"},
			wantStdout: []string{"create", "revoke", "--kubeconfig"},
		},
		"version": {
			args:       []string{"version"},
			wantStdout: []string{"hub ", "linux/"},
		},
		"--version": {
			args:       []string{"--version"},
			wantStdout: []string{"hub ", "go1."},
		},
		"an unknown word does not start the server": {
			args:       []string{"verison"},
			wantCode:   exitUsage,
			wantStderr: []string{`unknown command "verison"`, "hub --help"},
		},
		"an unknown word after ca": {
			args:       []string{"ca", "rotate-everything"},
			wantCode:   exitUsage,
			wantStderr: []string{`"rotate-everything"`},
		},
		"version takes no argument": {
			args:       []string{"version", "now"},
			wantCode:   exitUsage,
			wantStderr: []string{`"now"`},
		},
		"an unknown flag of the bare hub": {
			args:       []string{"--no-such-flag"},
			wantCode:   exitUsage,
			wantStderr: []string{"no-such-flag"},
		},
		"a flag value of the wrong type": {
			args:       []string{"serve", "--grace-period=soon"},
			wantCode:   exitUsage,
			wantStderr: []string{"grace-period"},
		},
		"the bare hub validates its configuration like serve": {
			args:       []string{"--grace-period=10ms", "--listen-address=nowhere"},
			wantCode:   exitUsage,
			wantStderr: []string{"--grace-period", "--listen-address"},
		},
		"the bare hub takes Go's one-dash flags as before": {
			args:       []string{"-grace-period=10ms", "-listen-address", "nowhere"},
			wantCode:   exitUsage,
			wantStderr: []string{"invalid configuration", "--grace-period", "--listen-address"},
		},
		"one-dash flags of serve": {
			args:       []string{"serve", "-zap-log-level=debug", "-grace-period=10ms"},
			wantCode:   exitUsage,
			wantStderr: []string{"invalid configuration", "--grace-period"},
		},
		"one-dash help": {
			args:       []string{"-help"},
			wantStdout: []string{"serve", "--listen-address"},
		},
		"an unknown one-dash word is still refused": {
			args:       []string{"-no-such-flag"},
			wantCode:   exitUsage,
			wantStderr: []string{"-no-such-flag"},
		},
		"client-cert lifetime beyond the maximum": {
			args:       []string{"client-cert", "--name", "alice", "--hub-address", "hub.example.com:9443", "--validity", "9000h"},
			wantCode:   exitUsage,
			wantStderr: []string{"--validity"},
		},
		"client-cert without a lifetime": {
			args:       []string{"client-cert", "--name", "alice", "--hub-address", "hub.example.com:9443", "--validity", "0s"},
			wantCode:   exitUsage,
			wantStderr: []string{"--validity"},
		},
		"client-cert of an unknown role, without name or address": {
			args:       []string{"client-cert", "--role", "root"},
			wantCode:   exitUsage,
			wantStderr: []string{"--role", "--name", "--hub-address"},
		},
		"client-cert revoke without a serial": {
			args:       []string{"client-cert", "revoke"},
			wantCode:   exitUsage,
			wantStderr: []string{"usage: hub client-cert revoke"},
		},
		"client-cert revoke of a serial that is no hex": {
			args:       []string{"client-cert", "revoke", "../../etc"},
			wantCode:   exitUsage,
			wantStderr: []string{"SERIAL"},
		},
		"ca print with an unreadable kubeconfig fails, not a usage error": {
			args:       []string{"ca", "print", "--kubeconfig", "/nonexistent/kubeconfig"},
			wantCode:   exitFailure,
			wantStderr: []string{"--kubeconfig /nonexistent/kubeconfig"},
		},
		"bare ca is print": {
			args:       []string{"ca", "--kubeconfig", "/nonexistent/kubeconfig"},
			wantCode:   exitFailure,
			wantStderr: []string{"--kubeconfig /nonexistent/kubeconfig"},
		},
		"ca init with an unreadable kubeconfig": {
			args:       []string{"ca", "init", "--kubeconfig", "/nonexistent/kubeconfig"},
			wantCode:   exitFailure,
			wantStderr: []string{"--kubeconfig /nonexistent/kubeconfig"},
		},
		"token with an unknown subcommand": {
			args:     []string{"token", "mint"},
			wantCode: exitUsage,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			// Reaching a cluster through the environment would fail
			// with another message.
			t.Setenv("KUBECONFIG", "/nonexistent")
			var stdout, stderr bytes.Buffer
			code := run(tc.args, &stdout, &stderr)
			if code != tc.wantCode {
				t.Errorf("hub %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(tc.args, " "), code, tc.wantCode, stdout.String(), stderr.String())
			}
			for _, want := range tc.wantStdout {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("hub %s: stdout does not show %q:\n%s", strings.Join(tc.args, " "), want, stdout.String())
				}
			}
			for _, want := range tc.wantStderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("hub %s: stderr does not show %q:\n%s", strings.Join(tc.args, " "), want, stderr.String())
				}
			}
		})
	}
}
