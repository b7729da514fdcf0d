package config

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestDefaultIsValid(t *testing.T) {
	c := Default()
	c.Complete()
	if err := c.Validate(); err != nil {
		t.Fatalf("default configuration is invalid: %v", err)
	}
	if len(c.ServingHosts) == 0 {
		t.Error("Complete left ServingHosts empty")
	}
}

func TestFlags(t *testing.T) {
	cases := map[string]struct {
		args        []string
		wantErrFlag string
		check       func(*testing.T, Config)
	}{
		"grace period and hosts": {
			args: []string{"--grace-period=10s", "--serving-hosts=hub.example.com, 10.0.0.1"},
			check: func(t *testing.T, c Config) {
				if c.GracePeriod != 10*time.Second || len(c.ServingHosts) != 2 || c.ServingHosts[1] != "10.0.0.1" {
					t.Errorf("got grace %s hosts %v", c.GracePeriod, c.ServingHosts)
				}
			},
		},
		"grace period too short": {args: []string{"--grace-period=10ms"}, wantErrFlag: "--grace-period"},
		"bad listen address":     {args: []string{"--listen-address=nope"}, wantErrFlag: "--listen-address"},
		"bad namespace":          {args: []string{"--namespace=Not_A_Namespace"}, wantErrFlag: "--namespace"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := Default()
			fs := flag.NewFlagSet("hub", flag.ContinueOnError)
			c.BindFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			c.Complete()
			err := c.Validate()
			if tc.wantErrFlag == "" && err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if tc.wantErrFlag != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErrFlag)) {
				t.Fatalf("Validate = %v, want an error naming %s", err, tc.wantErrFlag)
			}
			if tc.check != nil {
				tc.check(t, c)
			}
		})
	}
}
