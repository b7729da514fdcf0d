package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"go.uber.org/zap/zapcore"

	"github.com/imperator-federation/imperator/spoke/internal/config"
)

// TestFlagsBecomeACheckedConfiguration: the agent refuses to start on flags
// that cannot work, naming each bad flag, and fills the settings that derive
// from others before anything starts.
func TestFlagsBecomeACheckedConfiguration(t *testing.T) {
	tests := map[string]struct {
		args        []string
		wantErrs    []string
		wantHosted  bool
		wantMembers string
		wantHosts   []string
	}{
		"defaults": {
			args:      []string{"--namespace=imperator-system"},
			wantHosts: []string{"imperator-webhook.imperator-system.svc", "imperator-webhook.imperator-system.svc.cluster.local"},
		},
		"hosted, members in the agent's namespace": {
			args:       []string{"--namespace=imperator-system", "--clusters-from=" + config.ClustersFromKubeconfigSecrets, "--webhook-url=https://agent.example.com:9443"},
			wantHosted: true, wantMembers: "imperator-system", wantHosts: []string{"agent.example.com"},
		},
		"every bad flag is named": {
			args:     []string{"--namespace=imperator-system", "--clusters-from=elsewhere", "--webhook-port=0", "--hub-address=nowhere"},
			wantErrs: []string{"--clusters-from", "--webhook-port", "--hub-address", "--hub-ca-file"},
		},
		"an unknown flag": {
			args:     []string{"--no-such-flag"},
			wantErrs: []string{"no-such-flag"},
		},
		"a value of the wrong type": {
			args:     []string{"--leader-elect=maybe"},
			wantErrs: []string{"leader-elect"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fs := flag.NewFlagSet("spoke", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			cfg, _, err := parseFlags(fs, tc.args)
			if len(tc.wantErrs) > 0 {
				if err == nil {
					t.Fatalf("no error, want one naming %v", tc.wantErrs)
				}
				for _, want := range tc.wantErrs {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not name %s", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.IsHosted() != tc.wantHosted || cfg.Hosted.KubeconfigNamespace != tc.wantMembers {
				t.Errorf("hosted %v with members in %q, want %v and %q", cfg.IsHosted(), cfg.Hosted.KubeconfigNamespace, tc.wantHosted, tc.wantMembers)
			}
			if strings.Join(cfg.Webhook.Hosts, ",") != strings.Join(tc.wantHosts, ",") {
				t.Errorf("webhook certificate hosts %v, want %v", cfg.Webhook.Hosts, tc.wantHosts)
			}
		})
	}
}

// TestLogFlagsReachTheLogger: --zap-log-level is parsed with the agent's
// flags, so that an operator can raise the log level.
func TestLogFlagsReachTheLogger(t *testing.T) {
	fs := flag.NewFlagSet("spoke", flag.ContinueOnError)
	_, zapOpts, err := parseFlags(fs, []string{"--namespace=imperator-system", "--zap-log-level=debug"})
	if err != nil {
		t.Fatal(err)
	}
	if zapOpts.Level == nil || !zapOpts.Level.Enabled(zapcore.DebugLevel) {
		t.Errorf("--zap-log-level=debug did not enable debug logs: %v", zapOpts.Level)
	}
}
