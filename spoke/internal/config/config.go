// Package config is the spoke agent's typed configuration: every setting with
// its default, bound to command-line flags, and validated before anything
// starts. With no flags at all the agent runs in-cluster in imperator-system;
// to join a hub it needs only the hub address and a bootstrap token.
package config

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/imperator-federation/imperator/internal/configflag"
	"github.com/imperator-federation/imperator/spoke/internal/admissionpolicy"
	"github.com/imperator-federation/imperator/spoke/internal/controller/capacityhold"
)

// Config is everything the agent can be told.
type Config struct {
	// Namespace holds the agent's reservation StatefulSets, Services, the
	// webhook certificate and the hub credentials. Default: $POD_NAMESPACE,
	// else imperator-system.
	Namespace string

	// MetricsAddr and HealthAddr are the listen addresses of the Prometheus
	// metrics and the health/readiness endpoints ("0" disables metrics).
	MetricsAddr string
	HealthAddr  string

	// LeaderElection makes one replica run the controllers; every replica
	// serves the webhooks.
	LeaderElection   bool
	LeaderElectionID string

	// HoldRetention is how long a CapacityHold whose booking ended (Failed,
	// or Expired at validUntil) stays before the agent deletes it: long
	// enough to read why with kubectl, and then its name is free again.
	// Default: capacityhold.DefaultRetention (1h, the API server's default
	// event TTL, so the hold goes with the events that explain it).
	HoldRetention time.Duration

	// ClockOffset is added to every instant the agent reads for holds, its
	// reports to the hub and the injector's admitted-at stamps (tests only:
	// the fault suite runs a spoke whose clock is a minute off the hub's).
	// Durations (timers, tickers, backoffs) and TLS certificate checks stay
	// on the system clock. Within ±MaxClockOffset; zero in production.
	ClockOffset time.Duration

	// Injection says where guests are injected (package admissionpolicy):
	// "webhook" (the default), "policy" (the MutatingAdmissionPolicy of
	// deploy/spoke/policy/injection, whose bindings the agent writes) or
	// "auto" (policy when the API server serves MutatingAdmissionPolicies).
	// In-cluster agents only.
	Injection string

	// ProvisioningMaxUnitsPerNamespace caps the units the ProvisioningRequests
	// of one namespace hold at once (package provisioningrequest); 0, the
	// default, sets no cap: Kueue's quota, which counts the units a Job's
	// template states, already bounds what a namespace's Workloads ask, and
	// who may create ProvisioningRequests by hand is RBAC's (docs/kueue.md).
	ProvisioningMaxUnitsPerNamespace int

	Webhook     Webhook
	Reservation Reservation
	Hub         Hub
	Hosted      Hosted
}

// ClustersFromKubeconfigSecrets is the hosted mode's --clusters-from value.
const ClustersFromKubeconfigSecrets = "kubeconfig-secrets"

// Hosted configures hosted mode: one agent, running in a management cluster,
// serves member clusters it reaches through kubeconfigs (package hosted).
type Hosted struct {
	// ClustersFrom is "" for the in-cluster agent (its own cluster, the
	// default) or ClustersFromKubeconfigSecrets.
	ClustersFrom string
	// KubeconfigNamespace is the management cluster's namespace holding the
	// members' kubeconfig Secrets. Default: Namespace.
	KubeconfigNamespace string
	// RequestTimeout bounds every request to a member's API server, so that
	// a slow member holds a controller worker for at most this long.
	RequestTimeout time.Duration
	// WebhookProbeInterval is how often each member is asked whether its API
	// server reaches the agent's webhooks (and their CA bundle refreshed).
	WebhookProbeInterval time.Duration
}

// IsHosted reports whether the agent serves member clusters (hosted mode).
func (c *Config) IsHosted() bool { return c.Hosted.ClustersFrom != "" }

// Webhook configures the admission webhooks the agent serves.
type Webhook struct {
	// BindAddress and Port are where the webhook server listens.
	BindAddress string
	Port        int
	// ServiceName is the Service in Namespace through which the API server
	// reaches the webhook server (port 443).
	ServiceName string
	// URL, when set, is the https base URL at which the API server reaches the
	// webhook server instead of the Service: an agent running outside its
	// cluster, as in the local fleet.
	URL string
	// Hosts are the names the serving certificate is valid for. Default: the
	// host of URL, else the webhook Service's DNS names in Namespace.
	Hosts []string
	// CertSecret names the Secret holding the webhook CA and serving
	// certificate the agent generates and rotates itself (the default mode).
	CertSecret string
	// CertManagerCertificate, when set, names a cert-manager Certificate in
	// Namespace that issues the serving certificate instead: the agent
	// generates nothing, the webhook server reads tls.crt and tls.key from
	// CertDir (where the Certificate's Secret is mounted, reloading them when
	// cert-manager renews them), and the webhook configurations carry the
	// cert-manager.io/inject-ca-from annotation for cert-manager's cainjector
	// instead of a CA bundle.
	CertManagerCertificate string
	// CertDir is the directory holding tls.crt and tls.key when
	// CertManagerCertificate is set.
	CertDir string
	// MutatingConfiguration and ValidatingConfiguration name the webhook
	// configurations that receive the CA bundle.
	MutatingConfiguration   string
	ValidatingConfiguration string
	// CAValidity and CertValidity are the lifetimes of the webhook CA and
	// serving certificate the agent issues itself (each renewed with a third
	// left; the CA with an overlap, see package certs). Zero: 10 years and 1
	// year. Short ones exercise rollovers (the fault suite).
	CAValidity   time.Duration
	CertValidity time.Duration
}

// Reservation configures the pods that hold a machine type's capacity.
type Reservation struct {
	// Image of the placeholder container; it must exit at once on SIGTERM.
	Image string
	// PriorityClassName is the PriorityClass of reservation pods, shipped in
	// deploy/spoke and only read by the agent: they never preempt anything
	// (the agent scales reservations down itself when a guest waits).
	PriorityClassName string
}

// Hub configures the connection to the hub. An empty Address runs the agent
// stand-alone.
type Hub struct {
	// Address is host:port of the hub's gRPC endpoint.
	Address string
	// ClusterName is this cluster's name at the hub; it becomes the common
	// name of the client certificate.
	ClusterName string
	// CAFile is the hub's CA bundle (PEM), used to verify the hub.
	CAFile string
	// TokenFile holds the one-time bootstrap token used to join when
	// CredentialsSecret holds no certificate yet. $IMPERATOR_JOIN_TOKEN is
	// read when TokenFile is empty.
	TokenFile string
	// CredentialsSecret stores the client certificate obtained by joining.
	CredentialsSecret string
	// ReportDebounce batches Machine changes into one delta: the first
	// change after a quiet ReportDebounce is sent at once, later ones within
	// ReportDebounce of a send go together at its end.
	ReportDebounce time.Duration
	// APIServerStaleAfter is how long the agent may go without reaching its
	// own API server before its heartbeats tell the hub that its figures are
	// stale (the hub then shows the cluster degraded).
	APIServerStaleAfter time.Duration
}

// Default returns the configuration used when no flag is given.
func Default() Config {
	return Config{
		Namespace:        configflag.PodNamespace(),
		MetricsAddr:      ":8080",
		HealthAddr:       ":8081",
		LeaderElection:   true,
		LeaderElectionID: "imperator-spoke-agent",
		HoldRetention:    capacityhold.DefaultRetention,
		Injection:        admissionpolicy.ModeWebhook,
		Webhook: Webhook{
			Port:                    9443,
			ServiceName:             "imperator-webhook",
			CertSecret:              "imperator-webhook-cert",
			CertDir:                 "/tmp/k8s-webhook-server/serving-certs",
			MutatingConfiguration:   "imperator-pod-injector",
			ValidatingConfiguration: "imperator-machine-validator",
		},
		Reservation: Reservation{
			Image:             "registry.k8s.io/pause:3.10",
			PriorityClassName: "imperator-reservation",
		},
		Hub: Hub{
			CredentialsSecret:   "imperator-hub-credentials",
			ReportDebounce:      500 * time.Millisecond,
			APIServerStaleAfter: 30 * time.Second,
		},
		Hosted: Hosted{RequestTimeout: 15 * time.Second, WebhookProbeInterval: 30 * time.Second},
	}
}

// BindFlags registers every setting on fs, with c's values as defaults.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Namespace, "namespace", c.Namespace, "Namespace of the agent's reservation workloads, webhook certificate and hub credentials.")
	fs.StringVar(&c.MetricsAddr, "metrics-bind-address", c.MetricsAddr, "Address of the Prometheus metrics endpoint; 0 disables it.")
	fs.StringVar(&c.HealthAddr, "health-probe-bind-address", c.HealthAddr, "Address of the /healthz and /readyz endpoints.")
	fs.BoolVar(&c.LeaderElection, "leader-elect", c.LeaderElection, "Run the controllers on one replica at a time (webhooks are served by all).")
	fs.StringVar(&c.LeaderElectionID, "leader-election-id", c.LeaderElectionID, "Name of the leader election Lease.")
	fs.StringVar(&c.Webhook.BindAddress, "webhook-bind-address", c.Webhook.BindAddress, "Address the webhook server listens on (empty: all interfaces).")
	fs.IntVar(&c.Webhook.Port, "webhook-port", c.Webhook.Port, "Port of the webhook server.")
	fs.StringVar(&c.Webhook.ServiceName, "webhook-service", c.Webhook.ServiceName, "Service in --namespace through which the API server reaches the webhooks.")
	fs.StringVar(&c.Webhook.URL, "webhook-url", c.Webhook.URL, "https base URL at which the API server reaches the webhooks, for an agent outside its cluster (overrides --webhook-service).")
	fs.Func("webhook-hosts", "Comma-separated DNS names/IPs of the webhook serving certificate (default: the host of --webhook-url, else the --webhook-service Service in --namespace).", func(s string) error {
		c.Webhook.Hosts = configflag.SplitList(s)
		return nil
	})
	fs.StringVar(&c.Webhook.CertSecret, "webhook-cert-secret", c.Webhook.CertSecret, "Secret holding the webhook CA and serving certificate.")
	fs.StringVar(&c.Webhook.CertManagerCertificate, "webhook-cert-manager-certificate", c.Webhook.CertManagerCertificate, "cert-manager Certificate in --namespace that issues the webhook serving certificate; its Secret must be mounted at --webhook-cert-dir (empty: the agent generates and rotates the certificate itself in --webhook-cert-secret).")
	fs.StringVar(&c.Webhook.CertDir, "webhook-cert-dir", c.Webhook.CertDir, "Directory with tls.crt and tls.key of the webhook server, used with --webhook-cert-manager-certificate.")
	fs.StringVar(&c.Webhook.MutatingConfiguration, "mutating-webhook-configuration", c.Webhook.MutatingConfiguration, "MutatingWebhookConfiguration that gets the CA bundle.")
	fs.StringVar(&c.Webhook.ValidatingConfiguration, "validating-webhook-configuration", c.Webhook.ValidatingConfiguration, "ValidatingWebhookConfiguration that gets the CA bundle.")
	fs.DurationVar(&c.Webhook.CAValidity, "webhook-ca-validity", c.Webhook.CAValidity, "Lifetime of the webhook CA the agent issues (0: 10 years); it rolls over with a third left, old and new CA both trusted meanwhile.")
	fs.DurationVar(&c.Webhook.CertValidity, "webhook-cert-validity", c.Webhook.CertValidity, "Lifetime of the webhook serving certificate the agent issues (0: 1 year); renewed with a third left.")
	fs.DurationVar(&c.HoldRetention, "hold-retention", c.HoldRetention, "How long a CapacityHold whose booking ended (Failed, or Expired at validUntil) is kept before the agent deletes it; at least "+capacityhold.MinRetention.String()+".")
	fs.DurationVar(&c.ClockOffset, "clock-offset", c.ClockOffset, "For tests only: run the agent's clock this much ahead (negative: behind) of the system clock, for the instants of holds, hub reports and admission stamps, to test clock skew between spoke and hub; within ±"+MaxClockOffset.String()+". Leave unset in production.")
	fs.StringVar(&c.Injection, "injection", c.Injection, "Where guests are injected: webhook (the agent's webhook), policy (the MutatingAdmissionPolicy of deploy/spoke/policy/injection; the agent writes its bindings) or auto (policy when the API server serves admissionregistration.k8s.io/v1 MutatingAdmissionPolicies, Kubernetes 1.36 and later). In-cluster agents only.")
	fs.IntVar(&c.ProvisioningMaxUnitsPerNamespace, "provisioning-max-units-per-namespace", c.ProvisioningMaxUnitsPerNamespace, "Most units the ProvisioningRequests of one namespace may hold at once; a request above it fails NamespaceCapReached. 0: no cap (Kueue's quota bounds a namespace's Workloads; RBAC who may create ProvisioningRequests by hand).")
	fs.StringVar(&c.Reservation.Image, "reservation-image", c.Reservation.Image, "Image of the reservation placeholder container.")
	fs.StringVar(&c.Reservation.PriorityClassName, "reservation-priority-class", c.Reservation.PriorityClassName, "PriorityClass of reservation pods (deploy/spoke ships it; the agent only reads it).")
	fs.StringVar(&c.Hub.Address, "hub-address", c.Hub.Address, "host:port of the hub; empty runs the agent stand-alone.")
	fs.StringVar(&c.Hub.ClusterName, "cluster-name", c.Hub.ClusterName, "Name of this cluster at the hub.")
	fs.StringVar(&c.Hub.CAFile, "hub-ca-file", c.Hub.CAFile, "PEM CA bundle that signed the hub's serving certificate.")
	fs.StringVar(&c.Hub.TokenFile, "join-token-file", c.Hub.TokenFile, "File with the one-time bootstrap token (default: $IMPERATOR_JOIN_TOKEN).")
	fs.StringVar(&c.Hub.CredentialsSecret, "hub-credentials-secret", c.Hub.CredentialsSecret, "Secret that stores the hub client certificate.")
	fs.DurationVar(&c.Hub.ReportDebounce, "report-debounce", c.Hub.ReportDebounce, "Machine changes within this time of the last report are batched into one; the first change after a quiet period is sent at once.")
	fs.DurationVar(&c.Hub.APIServerStaleAfter, "api-server-stale-after", c.Hub.APIServerStaleAfter, "How long the agent may go without reaching its API server before its heartbeats tell the hub that its figures are stale.")
	fs.StringVar(&c.Hosted.ClustersFrom, "clusters-from", c.Hosted.ClustersFrom, "Where the member clusters come from: empty serves the agent's own cluster (in-cluster mode); \""+ClustersFromKubeconfigSecrets+"\" serves every cluster whose kubeconfig is in a labelled Secret of --kubeconfig-namespace (hosted mode).")
	fs.StringVar(&c.Hosted.KubeconfigNamespace, "kubeconfig-namespace", c.Hosted.KubeconfigNamespace, "Namespace of the management cluster holding the members' kubeconfig Secrets in hosted mode (default: --namespace).")
	fs.DurationVar(&c.Hosted.RequestTimeout, "member-request-timeout", c.Hosted.RequestTimeout, "In hosted mode, the longest a request to a member's API server may take.")
	fs.DurationVar(&c.Hosted.WebhookProbeInterval, "member-webhook-probe-interval", c.Hosted.WebhookProbeInterval, "In hosted mode, how often each member's API server is checked to reach the agent's webhooks.")
}

// Complete fills the settings that derive from others.
func (c *Config) Complete() {
	if c.IsHosted() && c.Hosted.KubeconfigNamespace == "" {
		c.Hosted.KubeconfigNamespace = c.Namespace
	}
	if len(c.Webhook.Hosts) > 0 {
		return
	}
	if u, err := url.Parse(c.Webhook.URL); err == nil && u.Hostname() != "" {
		c.Webhook.Hosts = []string{u.Hostname()}
		return
	}
	svc := c.Webhook.ServiceName + "." + c.Namespace
	c.Webhook.Hosts = []string{svc + ".svc", svc + ".svc.cluster.local"}
}

// Validate returns every problem of the configuration, each naming its flag.
func (c *Config) Validate() error {
	var errs []error
	if msgs := validation.IsDNS1123Label(c.Namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--namespace %q: %s", c.Namespace, strings.Join(msgs, "; ")))
	}
	errs = append(errs, c.validateWebhook()...)
	errs = append(errs, c.validateAgent()...)
	errs = append(errs, c.validateHosted()...)
	errs = append(errs, c.validateHub()...)
	return errors.Join(errs...)
}

// validateWebhook checks the --webhook-* flags.
func (c *Config) validateWebhook() []error {
	var errs []error
	if c.Webhook.URL != "" {
		if u, err := url.Parse(c.Webhook.URL); err != nil || u.Scheme != "https" || u.Host == "" {
			errs = append(errs, fmt.Errorf("--webhook-url %q: must be an absolute https URL", c.Webhook.URL))
		}
	} else if msgs := validation.IsDNS1035Label(c.Webhook.ServiceName); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--webhook-service %q: %s", c.Webhook.ServiceName, strings.Join(msgs, "; ")))
	}
	if c.Webhook.CertManagerCertificate != "" {
		if msgs := validation.IsDNS1123Subdomain(c.Webhook.CertManagerCertificate); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--webhook-cert-manager-certificate %q: %s", c.Webhook.CertManagerCertificate, strings.Join(msgs, "; ")))
		}
		if c.Webhook.CertDir == "" {
			errs = append(errs, errors.New("--webhook-cert-dir: required with --webhook-cert-manager-certificate"))
		}
	} else if msgs := validation.IsDNS1123Subdomain(c.Webhook.CertSecret); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--webhook-cert-secret %q: %s", c.Webhook.CertSecret, strings.Join(msgs, "; ")))
	}
	if c.Webhook.CAValidity < 0 {
		errs = append(errs, fmt.Errorf("--webhook-ca-validity %s: must not be negative", c.Webhook.CAValidity))
	}
	if c.Webhook.CertValidity < 0 {
		errs = append(errs, fmt.Errorf("--webhook-cert-validity %s: must not be negative", c.Webhook.CertValidity))
	}
	if c.Webhook.Port < 1 || c.Webhook.Port > 65535 {
		errs = append(errs, fmt.Errorf("--webhook-port %d: must be between 1 and 65535", c.Webhook.Port))
	}
	return errs
}

// validateAgent checks the flags of the agent's own work: holds, the
// clock, injection, provisioning and reservations.
func (c *Config) validateAgent() []error {
	var errs []error
	if c.HoldRetention < capacityhold.MinRetention {
		errs = append(errs, fmt.Errorf("--hold-retention %s: must be at least %s, so that the hub's hold request still finds a failed hold to say why", c.HoldRetention, capacityhold.MinRetention))
	}
	if c.ClockOffset < -MaxClockOffset || c.ClockOffset > MaxClockOffset {
		errs = append(errs, fmt.Errorf("--clock-offset %s: must be within ±%s (it is for clock skew tests)", c.ClockOffset, MaxClockOffset))
	}
	if !slices.Contains(admissionpolicy.Modes, c.Injection) {
		errs = append(errs, fmt.Errorf("--injection %q: must be one of %s", c.Injection, strings.Join(admissionpolicy.Modes, ", ")))
	} else if c.Injection != admissionpolicy.ModeWebhook && c.IsHosted() {
		errs = append(errs, fmt.Errorf("--injection %s: hosted agents (--clusters-from) inject with the webhook only", c.Injection))
	}
	if c.ProvisioningMaxUnitsPerNamespace < 0 || c.ProvisioningMaxUnitsPerNamespace > math.MaxInt32 {
		errs = append(errs, fmt.Errorf("--provisioning-max-units-per-namespace %d: must be between 0 (no cap) and %d", c.ProvisioningMaxUnitsPerNamespace, math.MaxInt32))
	}
	if c.Reservation.Image == "" {
		errs = append(errs, errors.New("--reservation-image: must not be empty"))
	}
	if msgs := validation.IsDNS1123Subdomain(c.Reservation.PriorityClassName); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--reservation-priority-class %q: %s", c.Reservation.PriorityClassName, strings.Join(msgs, "; ")))
	}
	return errs
}

// validateHosted checks --clusters-from and the flags only hosted agents
// (or only in-cluster agents) take.
func (c *Config) validateHosted() []error {
	var errs []error
	switch c.Hosted.ClustersFrom {
	case "":
		if c.Hosted.KubeconfigNamespace != "" {
			errs = append(errs, errors.New("--kubeconfig-namespace: only with --clusters-from="+ClustersFromKubeconfigSecrets))
		}
	case ClustersFromKubeconfigSecrets:
		if msgs := validation.IsDNS1123Label(c.Hosted.KubeconfigNamespace); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--kubeconfig-namespace %q: %s", c.Hosted.KubeconfigNamespace, strings.Join(msgs, "; ")))
		}
		if c.Hosted.RequestTimeout <= 0 {
			errs = append(errs, fmt.Errorf("--member-request-timeout %s: must be positive", c.Hosted.RequestTimeout))
		}
		if c.Hosted.WebhookProbeInterval < time.Second {
			errs = append(errs, fmt.Errorf("--member-webhook-probe-interval %s: must be at least 1s", c.Hosted.WebhookProbeInterval))
		}
		if c.ClockOffset != 0 {
			errs = append(errs, errors.New("--clock-offset: not supported with --clusters-from (the clock skew tests run in-cluster agents)"))
		}
		if c.Webhook.CertManagerCertificate != "" {
			errs = append(errs, errors.New("--webhook-cert-manager-certificate: not supported with --clusters-from (the agent puts its own CA bundle into every member's webhook configurations)"))
		}
	default:
		errs = append(errs, fmt.Errorf("--clusters-from %q: must be empty (in-cluster) or %q", c.Hosted.ClustersFrom, ClustersFromKubeconfigSecrets))
	}
	return errs
}

// validateHub checks the --hub-* flags and those that go with them.
func (c *Config) validateHub() []error {
	var errs []error
	if c.Hub.Address != "" {
		if _, _, err := net.SplitHostPort(c.Hub.Address); err != nil {
			errs = append(errs, fmt.Errorf("--hub-address %q: %w", c.Hub.Address, err))
		}
		if c.IsHosted() {
			if c.Hub.ClusterName != "" {
				errs = append(errs, errors.New("--cluster-name: not used with --clusters-from, each member's name at the hub comes from its kubeconfig Secret"))
			}
		} else if msgs := validation.IsDNS1123Label(c.Hub.ClusterName); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--cluster-name %q: required with --hub-address, and %s", c.Hub.ClusterName, strings.Join(msgs, "; ")))
		}
		if c.Hub.CAFile == "" {
			errs = append(errs, errors.New("--hub-ca-file: required with --hub-address"))
		}
		if c.Hub.ReportDebounce < 0 {
			errs = append(errs, fmt.Errorf("--report-debounce %s: must not be negative", c.Hub.ReportDebounce))
		}
		if c.Hub.APIServerStaleAfter < time.Second {
			errs = append(errs, fmt.Errorf("--api-server-stale-after %s: must be at least 1s", c.Hub.APIServerStaleAfter))
		}
	}
	return errs
}

// JoinToken returns the bootstrap token from TokenFile or $IMPERATOR_JOIN_TOKEN,
// or "" when there is none.
func (c *Config) JoinToken() (string, error) {
	if c.Hub.TokenFile == "" {
		return strings.TrimSpace(os.Getenv("IMPERATOR_JOIN_TOKEN")), nil
	}
	data, err := os.ReadFile(c.Hub.TokenFile)
	if err != nil {
		return "", fmt.Errorf("reading --join-token-file: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}
