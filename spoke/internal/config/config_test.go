package config

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/clock"
)

func TestDefaultsNeedNoFlags(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	c := Default()
	c.Complete()
	if err := c.Validate(); err != nil {
		t.Fatalf("default configuration is invalid: %v", err)
	}
	if c.HoldRetention != time.Hour {
		t.Errorf("default --hold-retention = %s, want the 1h the flag's documentation gives", c.HoldRetention)
	}
	want := []string{"imperator-webhook.imperator-system.svc", "imperator-webhook.imperator-system.svc.cluster.local"}
	if diff := cmp.Diff(want, c.Webhook.Hosts); diff != "" {
		t.Errorf("webhook hosts (-want +got):\n%s", diff)
	}
}

func TestValidateNamesTheFlag(t *testing.T) {
	cases := map[string]struct {
		args     []string
		wantErrs []string
	}{
		"valid hub settings": {
			args: []string{"--hub-address=hub.example.com:8443", "--cluster-name=spoke-a", "--hub-ca-file=/ca.crt"},
		},
		"hosted mode with a hub": {
			args: []string{"--clusters-from=kubeconfig-secrets", "--kubeconfig-namespace=members", "--hub-address=hub:1", "--hub-ca-file=/ca.crt"},
		},
		"hosted probe and request bounds": {
			args:     []string{"--clusters-from=kubeconfig-secrets", "--member-webhook-probe-interval=100ms", "--member-request-timeout=0s"},
			wantErrs: []string{"--member-webhook-probe-interval", "--member-request-timeout"},
		},
		"unknown cluster source": {args: []string{"--clusters-from=cluster-profiles"}, wantErrs: []string{"--clusters-from"}},
		"kubeconfig namespace without hosted mode": {
			args: []string{"--kubeconfig-namespace=members"}, wantErrs: []string{"--kubeconfig-namespace"},
		},
		"bad kubeconfig namespace": {
			args: []string{"--clusters-from=kubeconfig-secrets", "--kubeconfig-namespace=Members"}, wantErrs: []string{"--kubeconfig-namespace"},
		},
		"one cluster name for many members": {
			args:     []string{"--clusters-from=kubeconfig-secrets", "--hub-address=hub:1", "--hub-ca-file=/ca.crt", "--cluster-name=a"},
			wantErrs: []string{"--cluster-name"},
		},
		"hosted mode with cert-manager": {
			args:     []string{"--clusters-from=kubeconfig-secrets", "--webhook-cert-manager-certificate=imperator-webhook"},
			wantErrs: []string{"--webhook-cert-manager-certificate"},
		},
		"bad namespace":        {args: []string{"--namespace=Not_Valid"}, wantErrs: []string{"--namespace"}},
		"bad port":             {args: []string{"--webhook-port=70000"}, wantErrs: []string{"--webhook-port"}},
		"hub without port":     {args: []string{"--hub-address=hub", "--cluster-name=a", "--hub-ca-file=x"}, wantErrs: []string{"--hub-address"}},
		"hub without identity": {args: []string{"--hub-address=hub:1"}, wantErrs: []string{"--cluster-name", "--hub-ca-file"}},
		"empty image":          {args: []string{"--reservation-image="}, wantErrs: []string{"--reservation-image"}},
		"plain-http webhook":   {args: []string{"--webhook-url=http://127.0.0.1:9443"}, wantErrs: []string{"--webhook-url"}},
		"bad webhook service":  {args: []string{"--webhook-service=Web_Hook"}, wantErrs: []string{"--webhook-service"}},
		"bad cert secret":      {args: []string{"--webhook-cert-secret=Cert_Secret"}, wantErrs: []string{"--webhook-cert-secret"}},
		"short webhook certificate lifetimes": {
			args: []string{"--webhook-ca-validity=10m", "--webhook-cert-validity=3m"},
		},
		"negative webhook certificate lifetimes": {
			args:     []string{"--webhook-ca-validity=-1m", "--webhook-cert-validity=-1s"},
			wantErrs: []string{"--webhook-ca-validity", "--webhook-cert-validity"},
		},
		"cert-manager certificate": {
			args: []string{"--webhook-cert-manager-certificate=imperator-webhook", "--webhook-cert-dir=/certs"},
		},
		"cert-manager certificate with the default cert dir": {
			args: []string{"--webhook-cert-manager-certificate=imperator-webhook"},
		},
		"bad cert-manager certificate": {
			args:     []string{"--webhook-cert-manager-certificate=Imperator/Webhook"},
			wantErrs: []string{"--webhook-cert-manager-certificate"},
		},
		"cert-manager certificate without a cert dir": {
			args:     []string{"--webhook-cert-manager-certificate=imperator-webhook", "--webhook-cert-dir="},
			wantErrs: []string{"--webhook-cert-dir"},
		},
		"API server staleness bound below a second": {
			args:     []string{"--hub-address=hub:1", "--cluster-name=a", "--hub-ca-file=x", "--api-server-stale-after=500ms"},
			wantErrs: []string{"--api-server-stale-after"},
		},
		"hold retention shorter than the hub's wait for a hold's verdict": {
			args: []string{"--hold-retention=30s"}, wantErrs: []string{"--hold-retention"},
		},
		"hold retention of a day": {args: []string{"--hold-retention=24h"}},
		"clock a minute ahead":    {args: []string{"--clock-offset=60s"}},
		"clock a minute behind":   {args: []string{"--clock-offset=-1m"}},
		"clock an hour ahead":     {args: []string{"--clock-offset=1h"}},
		"clock more than an hour ahead": {
			args: []string{"--clock-offset=1h0m1s"}, wantErrs: []string{"--clock-offset 1h0m1s: must be within ±1h0m0s"},
		},
		"clock more than an hour behind": {
			args: []string{"--clock-offset=-2h"}, wantErrs: []string{"--clock-offset -2h0m0s: must be within ±1h0m0s"},
		},
		"negative provisioning cap": {
			args: []string{"--provisioning-max-units-per-namespace=-1"}, wantErrs: []string{"--provisioning-max-units-per-namespace -1: must be between 0 (no cap)"},
		},
		"provisioning cap beyond a hold's count type": {
			args: []string{"--provisioning-max-units-per-namespace=2147483648"}, wantErrs: []string{"--provisioning-max-units-per-namespace 2147483648"},
		},
		"provisioning cap": {args: []string{"--provisioning-max-units-per-namespace=64"}},
		// The Secret the agent would manage itself does not matter when
		// cert-manager issues the certificate.
		"cert-manager certificate ignores the cert secret": {
			args: []string{"--webhook-cert-manager-certificate=imperator-webhook", "--webhook-cert-secret="},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := Default()
			fs := flag.NewFlagSet("agent", flag.ContinueOnError)
			c.BindFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			c.Complete()
			err := c.Validate()
			if len(tc.wantErrs) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() accepted %v", tc.args)
			}
			for _, want := range tc.wantErrs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %s", err, want)
				}
			}
		})
	}
}

func TestWebhookHostsFlag(t *testing.T) {
	c := Default()
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	c.BindFlags(fs)
	if err := fs.Parse([]string{"--webhook-hosts=127.0.0.1, localhost,"}); err != nil {
		t.Fatal(err)
	}
	c.Complete()
	if diff := cmp.Diff([]string{"127.0.0.1", "localhost"}, c.Webhook.Hosts); diff != "" {
		t.Errorf("webhook hosts (-want +got):\n%s", diff)
	}
}

func TestWebhookURLGivesTheCertificateItsHost(t *testing.T) {
	c := Default()
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	c.BindFlags(fs)
	if err := fs.Parse([]string{"--webhook-url=https://127.0.0.1:19443"}); err != nil {
		t.Fatal(err)
	}
	c.Complete()
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	if diff := cmp.Diff([]string{"127.0.0.1"}, c.Webhook.Hosts); diff != "" {
		t.Errorf("webhook hosts (-want +got):\n%s", diff)
	}
}

func TestCertManagerFlags(t *testing.T) {
	c := Default()
	if c.Webhook.CertManagerCertificate != "" {
		t.Errorf("default cert-manager Certificate = %q, want none (the agent manages its certificate)", c.Webhook.CertManagerCertificate)
	}
	if want := "/tmp/k8s-webhook-server/serving-certs"; c.Webhook.CertDir != want {
		t.Errorf("default cert dir = %q, want %q", c.Webhook.CertDir, want)
	}
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	c.BindFlags(fs)
	if err := fs.Parse([]string{"--webhook-cert-manager-certificate=imperator-webhook", "--webhook-cert-dir=/etc/imperator/webhook"}); err != nil {
		t.Fatal(err)
	}
	want := Webhook{CertManagerCertificate: "imperator-webhook", CertDir: "/etc/imperator/webhook"}
	got := Webhook{CertManagerCertificate: c.Webhook.CertManagerCertificate, CertDir: c.Webhook.CertDir}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parsed webhook certificate settings (-want +got):\n%s", diff)
	}
}

func TestClockOffset(t *testing.T) {
	c := Default()
	if _, real := c.Clock().(clock.RealClock); !real {
		t.Errorf("default Clock() = %T, want the system clock", c.Clock())
	}
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	c.BindFlags(fs)
	if err := fs.Parse([]string{"--clock-offset=-60s"}); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	got := c.Clock().Now()
	after := time.Now()
	if got.Before(before.Add(-time.Minute)) || got.After(after.Add(-time.Minute)) {
		t.Errorf("Clock().Now() = %s, want a minute before the system clock's [%s, %s]", got, before, after)
	}
	if since := c.Clock().Since(got); since < 0 || since > time.Second {
		t.Errorf("Clock().Since(its own Now()) = %s, want a real duration close to 0", since)
	}
}
