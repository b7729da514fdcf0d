package main

import (
	"strings"
	"testing"
)

func TestClientCertRefusesBadInputBeforeTouchingTheHub(t *testing.T) {
	cases := map[string]struct {
		args     []string
		wantFlag string
	}{
		"lifetime beyond the maximum": {
			args:     []string{"client-cert", "--name", "alice", "--hub-address", "hub.example.com:9443", "--validity", "9000h"},
			wantFlag: "--validity",
		},
		"no lifetime": {
			args:     []string{"client-cert", "--name", "alice", "--hub-address", "hub.example.com:9443", "--validity", "0s"},
			wantFlag: "--validity",
		},
		"unknown role": {
			args:     []string{"client-cert", "--name", "alice", "--role", "root", "--hub-address", "hub.example.com:9443"},
			wantFlag: "--role",
		},
		"revoke without a serial": {
			args:     []string{"client-cert", "revoke"},
			wantFlag: "usage: hub client-cert revoke",
		},
		"revoke a serial that is no hex": {
			args:     []string{"client-cert", "revoke", "../../etc"},
			wantFlag: "SERIAL",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			// An unreachable kubeconfig: reaching the hub cluster would fail
			// with another message.
			t.Setenv("KUBECONFIG", "/nonexistent")
			err := run(tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.wantFlag) {
				t.Errorf("run(%v) = %v, want an error naming %s", tc.args, err, tc.wantFlag)
			}
		})
	}
}
