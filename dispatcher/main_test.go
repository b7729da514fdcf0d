package main

import (
	"strings"
	"testing"
	"time"
)

func TestValidateNamesTheFlag(t *testing.T) {
	good := func() options {
		return options{hubAddress: "hub:8443", hubCAFile: "ca.pem", tokenFile: "token", maxClusters: 20, callTimeout: 5 * time.Second}
	}
	cases := map[string]struct {
		change   func(*options)
		wantErrs []string
	}{
		"a token":             {change: func(*options) {}},
		"a certificate":       {change: func(o *options) { o.tokenFile, o.certFile, o.keyFile = "", "c.pem", "k.pem" }},
		"no hub":              {change: func(o *options) { o.hubAddress, o.hubCAFile = "", "" }, wantErrs: []string{"--hub-address is required", "--hub-ca-file is required"}},
		"no identity":         {change: func(o *options) { o.tokenFile = "" }, wantErrs: []string{"one of --hub-token-file or --hub-client-cert"}},
		"both identities":     {change: func(o *options) { o.certFile, o.keyFile = "c.pem", "k.pem" }, wantErrs: []string{"exclude each other"}},
		"a certificate alone": {change: func(o *options) { o.tokenFile, o.certFile = "", "c.pem" }, wantErrs: []string{"go together"}},
		"too many clusters":   {change: func(o *options) { o.maxClusters = 21 }, wantErrs: []string{"--max-clusters 21: want 1 to 20"}},
		"no clusters":         {change: func(o *options) { o.maxClusters = 0 }, wantErrs: []string{"--max-clusters 0"}},
		"no deadline":         {change: func(o *options) { o.callTimeout = 0 }, wantErrs: []string{"--call-timeout 0s"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := good()
			tc.change(&o)
			err := o.validate()
			if len(tc.wantErrs) == 0 {
				if err != nil {
					t.Fatalf("validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("validate() = nil, want errors %q", tc.wantErrs)
			}
			for _, want := range tc.wantErrs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("validate() = %v, want it to contain %q", err, want)
				}
			}
		})
	}
}
