package config

import (
	"flag"
	"slices"
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
		"short anonymous idle and connection age for tests": {
			args: []string{"--anonymous-connection-idle=2s", "--max-connection-age=1m", "--max-connection-age-grace=5s", "--join-rate-per-source=0.5"},
			check: func(t *testing.T, c Config) {
				if c.Limits.AnonymousIdleTimeout != 2*time.Second || c.Limits.MaxConnectionAge != time.Minute || c.Limits.MaxConnectionAgeGrace != 5*time.Second || c.Limits.JoinRatePerSource != 0.5 {
					t.Errorf("got limits %+v", c.Limits)
				}
			},
		},
		"client certificates under a minute":       {args: []string{"--client-cert-validity=30s"}, wantErrFlag: "--client-cert-validity"},
		"zero join rate":                           {args: []string{"--join-rate-per-source=0"}, wantErrFlag: "--join-rate-per-source"},
		"no connection age":                        {args: []string{"--max-connection-age=0s"}, wantErrFlag: "--max-connection-age"},
		"more anonymous than all":                  {args: []string{"--max-connections=10", "--max-anonymous-connections=20"}, wantErrFlag: "--max-anonymous-connections"},
		"more token callers than all":              {args: []string{"--max-connections=10", "--max-token-connections=20"}, wantErrFlag: "--max-token-connections"},
		"no token callers":                         {args: []string{"--max-token-connections=0"}, wantErrFlag: "--max-token-connections"},
		"handshakes above half of all connections": {args: []string{"--max-connections=100", "--max-handshakes=51"}, wantErrFlag: "--max-handshakes"},
		"no connection per certificate":            {args: []string{"--max-connections-per-certificate=0"}, wantErrFlag: "--max-connections-per-certificate"},
		"no authenticated connection per source":   {args: []string{"--max-authenticated-connections-per-source=0"}, wantErrFlag: "--max-authenticated-connections-per-source"},
		"connection caps tuned": {
			args: []string{"--max-handshakes=64", "--max-connections-per-certificate=4", "--max-authenticated-connections-per-source=32"},
			check: func(t *testing.T, c Config) {
				if c.Limits.MaxHandshakes != 64 || c.Limits.MaxConnectionsPerCertificate != 4 || c.Limits.MaxAuthenticatedConnectionsPerSource != 32 {
					t.Errorf("got limits %+v", c.Limits)
				}
			},
		},
		"negative renewal overlap": {args: []string{"--renewal-overlap=-1s"}, wantErrFlag: "--renewal-overlap"},
		"serving certificate of 3 minutes (fault suite)": {
			args: []string{"--serving-cert-validity=3m"},
			check: func(t *testing.T, c Config) {
				if c.ServingCertValidity != 3*time.Minute {
					t.Errorf("got serving certificate validity %s, want 3m", c.ServingCertValidity)
				}
			},
		},
		"serving certificate too short": {args: []string{"--serving-cert-validity=30s"}, wantErrFlag: "--serving-cert-validity"},
		"no revocation list refresh":    {args: []string{"--revocations-refresh=0s"}, wantErrFlag: "--revocations-refresh"},
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

// TestClockOffset: a replica started with --clock-offset reads times that far
// off the system clock, and an offset beyond an hour is refused naming the
// flag.
func TestClockOffset(t *testing.T) {
	c := Default()
	fs := flag.NewFlagSet("hub", flag.ContinueOnError)
	c.BindFlags(fs)
	if err := fs.Parse([]string{"--clock-offset=-10s"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("--clock-offset=-10s refused: %v", err)
	}
	clk := c.Clock()
	if d := time.Until(clk.Now()); d > -9*time.Second || d < -11*time.Second {
		t.Errorf("the hub's clock is %s off the system's, want -10s", d)
	}
	if since := clk.Since(clk.Now()); since < 0 || since > time.Second {
		t.Errorf("Since(Now()) = %s on the offset clock, want about zero", since)
	}
	c.ClockOffset = 2 * time.Hour
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--clock-offset") {
		t.Errorf("Validate() = %v, want an error naming --clock-offset", err)
	}
}

// TestTokenAudiences: --token-audiences binds people's tokens to the given
// audiences, and an empty or spaced audience is refused naming the flag.
func TestTokenAudiences(t *testing.T) {
	for _, tc := range []struct {
		arg     string
		want    []string
		wantErr string
	}{
		{arg: "imperator-hub", want: []string{"imperator-hub"}},
		{arg: "imperator-hub, https://hub.example.com", want: []string{"imperator-hub", "https://hub.example.com"}},
		{arg: "imperator-hub,,other", wantErr: `--token-audiences: audience 2 ("")`},
		{arg: "", wantErr: `--token-audiences: audience 1 ("")`},
	} {
		t.Run(tc.arg, func(t *testing.T) {
			c := Default()
			fs := flag.NewFlagSet("hub", flag.ContinueOnError)
			c.BindFlags(fs)
			if err := fs.Parse([]string{"--token-audiences=" + tc.arg}); err != nil {
				t.Fatal(err)
			}
			err := c.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Validate() = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate() = %v", err)
			}
			if !slices.Equal(c.TokenAudiences, tc.want) {
				t.Errorf("TokenAudiences = %q, want %q", c.TokenAudiences, tc.want)
			}
		})
	}
	if got := Default().TokenAudiences; got != nil {
		t.Errorf("default TokenAudiences = %q, want none (the API server's own)", got)
	}
}

// TestTokenCacheTTLs: --token-auth-ttl and --token-decision-ttl set how long
// a token's authentication and an authorization decision are reused; both
// default to query.DefaultTokenAuthTTL and out-of-range values are refused
// naming the flag.
func TestTokenCacheTTLs(t *testing.T) {
	for _, tc := range []struct {
		args               []string
		wantAuth, wantDecn time.Duration
		wantErr            string
	}{
		{args: nil, wantAuth: 10 * time.Second, wantDecn: 10 * time.Second},
		{args: []string{"--token-auth-ttl=1m", "--token-decision-ttl=2s"}, wantAuth: time.Minute, wantDecn: 2 * time.Second},
		{args: []string{"--token-auth-ttl=0s"}, wantErr: "--token-auth-ttl 0s: must be within 1s to 10m"},
		{args: []string{"--token-decision-ttl=11m"}, wantErr: "--token-decision-ttl 11m0s: must be within 1s to 10m"},
		{args: []string{"--token-decision-ttl=-1s"}, wantErr: "--token-decision-ttl -1s"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			c := Default()
			fs := flag.NewFlagSet("hub", flag.ContinueOnError)
			c.BindFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := c.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Validate() = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate() = %v", err)
			}
			if c.TokenAuthTTL != tc.wantAuth || c.TokenDecisionTTL != tc.wantDecn {
				t.Errorf("TTLs = %s, %s, want %s, %s", c.TokenAuthTTL, c.TokenDecisionTTL, tc.wantAuth, tc.wantDecn)
			}
		})
	}
}
