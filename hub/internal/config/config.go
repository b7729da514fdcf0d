// Package config is the hub's typed configuration: every setting with its
// default, bound to command-line flags and validated before anything starts.
// With no flags at all the hub runs in-cluster (or against $KUBECONFIG) in
// imperator-system, creating its CA on first start.
package config

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/imperator-federation/imperator/hub/internal/holds"
	"github.com/imperator-federation/imperator/hub/internal/hubca"
	"github.com/imperator-federation/imperator/hub/internal/join"
	"github.com/imperator-federation/imperator/hub/internal/persist"
	"github.com/imperator-federation/imperator/hub/internal/query"
	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/hub/internal/server"
	"github.com/imperator-federation/imperator/hub/internal/store"
	"github.com/imperator-federation/imperator/internal/configflag"
)

// Config is everything the hub can be told.
type Config struct {
	// Kubeconfig of the hub cluster; empty: in-cluster, else $KUBECONFIG or
	// ~/.kube/config.
	Kubeconfig string
	// Namespace holds the hub CA and the bootstrap tokens. Default:
	// $POD_NAMESPACE, else imperator-system.
	Namespace string
	// ListenAddress is where the gRPC server listens.
	ListenAddress string
	// MetricsAddr and HealthAddr are the Prometheus metrics and health probe
	// endpoints ("0" disables).
	MetricsAddr string
	HealthAddr  string
	// CASecret names the Secret in Namespace holding the hub CA (created
	// when missing).
	CASecret string
	// ServingHosts are the DNS names/IPs of the hub's serving certificate.
	// Default: localhost, 127.0.0.1 and the imperator-hub Service in Namespace.
	ServingHosts []string
	// GracePeriod is how long a spoke may stay silent before it is Unknown.
	GracePeriod time.Duration
	// PersistInterval is the shortest time between two writes of one
	// cluster's inventory.
	PersistInterval time.Duration
	// ClientCertValidity is the lifetime of spoke certificates issued on join.
	ClientCertValidity time.Duration
	// ServingCertValidity is the lifetime of the hub's serving certificate,
	// re-issued from the hub CA at 2/3 of it without a restart.
	ServingCertValidity time.Duration
	// MaxRecvMsgBytes bounds one spoke message.
	MaxRecvMsgBytes int
	// Limits bound connections and anonymous calls of the gRPC server.
	Limits server.Limits
	// RenewalOverlap is how long a spoke certificate replaced by a Renew
	// stays good.
	RenewalOverlap time.Duration
	// RevocationsRefresh is how often every replica rereads the list of
	// revoked certificates.
	RevocationsRefresh time.Duration
	// HoldDeadline is how long a fleet hold waits for the chosen spokes'
	// answers before it fails and releases what the others hold.
	HoldDeadline time.Duration
	// LeaderElect elects one replica, through a Lease in Namespace, for the
	// work that needs a single writer: placement scores and marking Unknown
	// the clusters whose replica went away. Every replica serves spokes and
	// queries either way.
	LeaderElect bool
	// ClockOffset is added to every time the hub reads (tests only: the
	// fault suite runs a replica whose clock is off, to show that replicas
	// never compare each other's times). Zero in production.
	ClockOffset time.Duration
	// TokenAudiences, when set, are the audiences a person's bearer token
	// must be issued for (kubectl create token --audience, or an exec
	// plugin that asks for one): a token meant only for the hub cluster's
	// API server is then refused, so that a hub address that is not ours
	// cannot collect tokens that open the API server. Empty: the API
	// server's own audiences.
	TokenAudiences []string
	// TokenAuthTTL is how long a bearer token's authentication (its
	// TokenReview) is reused, and TokenDecisionTTL an authorization
	// decision (a SubjectAccessReview): a revoked token, a deleted account
	// or a removed binding is honoured within them.
	TokenAuthTTL, TokenDecisionTTL time.Duration
}

// LeaderElectionID names the Lease of the hub's leader election.
const LeaderElectionID = "imperator-hub-leader"

// Default returns the configuration used when no flag is given.
func Default() Config {
	return Config{
		Namespace:           configflag.PodNamespace(),
		ListenAddress:       ":9443",
		MetricsAddr:         ":8080",
		HealthAddr:          ":8081",
		CASecret:            "imperator-hub-ca",
		GracePeriod:         store.DefaultGracePeriod,
		PersistInterval:     persist.DefaultInterval,
		ClientCertValidity:  join.DefaultCertificateValidity,
		ServingCertValidity: hubca.DefaultServingValidity,
		MaxRecvMsgBytes:     server.DefaultMaxRecvMsgBytes,
		Limits:              server.DefaultLimits(),
		RenewalOverlap:      join.DefaultRenewalOverlap,
		RevocationsRefresh:  registry.DefaultRevocationsRefresh,
		HoldDeadline:        holds.DefaultDeadline,
		TokenAuthTTL:        query.DefaultTokenAuthTTL,
		TokenDecisionTTL:    query.DefaultTokenAuthTTL,
		LeaderElect:         true,
	}
}

// BindFlags registers every setting on fs, with c's values as defaults.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "Kubeconfig of the hub cluster (default: in-cluster, $KUBECONFIG, ~/.kube/config).")
	fs.StringVar(&c.Namespace, "namespace", c.Namespace, "Namespace of the hub CA and bootstrap tokens.")
	fs.StringVar(&c.ListenAddress, "listen-address", c.ListenAddress, "Address of the gRPC server.")
	fs.StringVar(&c.MetricsAddr, "metrics-bind-address", c.MetricsAddr, "Address of the Prometheus metrics endpoint; 0 disables it.")
	fs.StringVar(&c.HealthAddr, "health-probe-bind-address", c.HealthAddr, "Address of the /healthz and /readyz endpoints; 0 disables them.")
	fs.StringVar(&c.CASecret, "ca-secret", c.CASecret, "Secret in --namespace holding the hub CA (created when missing).")
	fs.Func("serving-hosts", "Comma-separated DNS names/IPs of the serving certificate (default: localhost, 127.0.0.1, the imperator-hub Service).", func(s string) error {
		c.ServingHosts = configflag.SplitList(s)
		return nil
	})
	fs.DurationVar(&c.GracePeriod, "grace-period", c.GracePeriod, "How long a spoke may stay silent before it becomes Unknown.")
	fs.DurationVar(&c.PersistInterval, "persist-interval", c.PersistInterval, "Shortest time between two writes of one cluster's inventory.")
	fs.DurationVar(&c.ClientCertValidity, "client-cert-validity", c.ClientCertValidity, "Lifetime of spoke client certificates issued on join and renewal (at least 1m); agents renew at two thirds of it.")
	fs.DurationVar(&c.ServingCertValidity, "serving-cert-validity", c.ServingCertValidity, "Lifetime of the hub's serving certificate; it is re-issued from the hub CA at 2/3 of it, without a restart.")
	fs.IntVar(&c.MaxRecvMsgBytes, "max-recv-msg-bytes", c.MaxRecvMsgBytes, "Largest spoke message accepted, in bytes.")
	fs.IntVar(&c.Limits.MaxConnections, "max-connections", c.Limits.MaxConnections, "Most open gRPC connections, of every kind.")
	fs.IntVar(&c.Limits.MaxTokenConnections, "max-token-connections", c.Limits.MaxTokenConnections, "Most open gRPC connections without a client certificate from callers with a bearer token (imperatorctl --kubeconfig), counted apart from joining spokes'; more are closed at once.")
	fs.IntVar(&c.Limits.MaxAnonymousConnections, "max-anonymous-connections", c.Limits.MaxAnonymousConnections, "Most open gRPC connections without a verified client certificate (joining spokes); more are closed at once.")
	fs.IntVar(&c.Limits.MaxAnonymousConnectionsPerSource, "max-anonymous-connections-per-source", c.Limits.MaxAnonymousConnectionsPerSource, "Most connections of one IP address in their TLS handshake, and apart most anonymous ones; more are closed at once.")
	fs.IntVar(&c.Limits.MaxHandshakes, "max-handshakes", c.Limits.MaxHandshakes, "Most connections in their TLS handshake at once, of all sources (at most half of --max-connections); more are closed at once.")
	fs.IntVar(&c.Limits.MaxConnectionsPerCertificate, "max-connections-per-certificate", c.Limits.MaxConnectionsPerCertificate, "Most open connections presenting one client certificate (by serial); more are closed at once.")
	fs.IntVar(&c.Limits.MaxAuthenticatedConnectionsPerSource, "max-authenticated-connections-per-source", c.Limits.MaxAuthenticatedConnectionsPerSource, "Most open connections with a client certificate from one IPv4 address or IPv6 /64; more are closed at once.")
	fs.DurationVar(&c.Limits.HandshakeTimeout, "tls-handshake-timeout", c.Limits.HandshakeTimeout, "Longest TLS handshake of a gRPC connection.")
	fs.DurationVar(&c.Limits.AnonymousIdleTimeout, "anonymous-connection-idle", c.Limits.AnonymousIdleTimeout, "Close a connection without a client certificate after this long without a call.")
	fs.DurationVar(&c.Limits.MaxConnectionIdle, "max-connection-idle", c.Limits.MaxConnectionIdle, "Close an authenticated connection after this long without a call.")
	fs.DurationVar(&c.Limits.MaxConnectionAge, "max-connection-age", c.Limits.MaxConnectionAge, "Make clients reconnect after this long (±10%), so that renewed certificates are used.")
	fs.DurationVar(&c.Limits.MaxConnectionAgeGrace, "max-connection-age-grace", c.Limits.MaxConnectionAgeGrace, "How long calls in progress may go on after --max-connection-age.")
	fs.Float64Var(&c.Limits.JoinRatePerSource, "join-rate-per-source", c.Limits.JoinRatePerSource, "Join calls per second allowed from one IP address.")
	fs.IntVar(&c.Limits.JoinBurstPerSource, "join-burst-per-source", c.Limits.JoinBurstPerSource, "Join calls one IP address may make in a burst.")
	fs.IntVar(&c.Limits.MaxConcurrentJoins, "max-concurrent-joins", c.Limits.MaxConcurrentJoins, "Join calls answered at once; more wait within their deadline.")
	fs.DurationVar(&c.RenewalOverlap, "renewal-overlap", c.RenewalOverlap, "How long a spoke certificate replaced by a renewal stays good.")
	fs.DurationVar(&c.RevocationsRefresh, "revocations-refresh", c.RevocationsRefresh, "How often every replica rereads the list of revoked certificates.")
	fs.DurationVar(&c.HoldDeadline, "hold-deadline", c.HoldDeadline, "How long a fleet hold waits for the chosen spokes' answers before it fails and releases the others' parts (1s to 1m).")
	fs.DurationVar(&c.ClockOffset, "clock-offset", c.ClockOffset, "For tests only: run the hub's clock this much ahead (negative: behind) of the system clock, to test clock skew between replicas. Leave unset in production.")
	fs.Func("token-audiences", "Comma-separated audiences a person's bearer token must be issued for (kubectl create token --audience=...); default: the hub cluster API server's own. Set it so that tokens given to the hub do not open the API server.", func(v string) error {
		c.TokenAudiences = nil
		for a := range strings.SplitSeq(v, ",") {
			c.TokenAudiences = append(c.TokenAudiences, strings.TrimSpace(a))
		}
		return nil
	})
	fs.DurationVar(&c.TokenAuthTTL, "token-auth-ttl", c.TokenAuthTTL, "How long the hub reuses a bearer token's authentication (TokenReview): a revoked token or a deleted ServiceAccount is refused within it (1s to 10m).")
	fs.DurationVar(&c.TokenDecisionTTL, "token-decision-ttl", c.TokenDecisionTTL, "How long the hub reuses an authorization decision for a bearer token's user (SubjectAccessReview): a removed RoleBinding is honoured within it (1s to 10m).")
	fs.BoolVar(&c.LeaderElect, "leader-elect", c.LeaderElect, "Elect one replica for the single-writer work (placement scores, marking silent clusters Unknown); disable only when exactly one hub runs.")
}

// Complete fills the settings that derive from others.
func (c *Config) Complete() {
	if len(c.ServingHosts) == 0 {
		svc := "imperator-hub." + c.Namespace
		c.ServingHosts = []string{"localhost", "127.0.0.1", svc + ".svc", svc + ".svc.cluster.local"}
	}
}

// Validate returns every problem of the configuration, each naming its flag.
func (c *Config) Validate() error {
	var errs []error
	if msgs := validation.IsDNS1123Label(c.Namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--namespace %q: %s", c.Namespace, strings.Join(msgs, "; ")))
	}
	if _, _, err := net.SplitHostPort(c.ListenAddress); err != nil {
		errs = append(errs, fmt.Errorf("--listen-address %q: %w", c.ListenAddress, err))
	}
	if msgs := validation.IsDNS1123Subdomain(c.CASecret); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--ca-secret %q: %s", c.CASecret, strings.Join(msgs, "; ")))
	}
	if c.GracePeriod < time.Second {
		errs = append(errs, fmt.Errorf("--grace-period %s: must be at least 1s", c.GracePeriod))
	}
	if c.PersistInterval <= 0 {
		errs = append(errs, fmt.Errorf("--persist-interval %s: must be positive", c.PersistInterval))
	}
	// Minutes are for fault tests of renewal (the agent renews at two
	// thirds of the life); production keeps the default year.
	if c.ClientCertValidity < time.Minute {
		errs = append(errs, fmt.Errorf("--client-cert-validity %s: must be at least 1m", c.ClientCertValidity))
	}
	if c.ServingCertValidity < hubca.MinServingValidity {
		errs = append(errs, fmt.Errorf("--serving-cert-validity %s: must be at least %s", c.ServingCertValidity, hubca.MinServingValidity))
	}
	if c.MaxRecvMsgBytes < 1<<20 {
		errs = append(errs, fmt.Errorf("--max-recv-msg-bytes %d: must be at least 1MiB", c.MaxRecvMsgBytes))
	}
	for flagName, positive := range map[string]bool{
		"--max-connections":                          c.Limits.MaxConnections > 0,
		"--max-anonymous-connections":                c.Limits.MaxAnonymousConnections > 0,
		"--max-token-connections":                    c.Limits.MaxTokenConnections > 0,
		"--max-anonymous-connections-per-source":     c.Limits.MaxAnonymousConnectionsPerSource > 0,
		"--max-handshakes":                           c.Limits.MaxHandshakes > 0,
		"--max-connections-per-certificate":          c.Limits.MaxConnectionsPerCertificate > 0,
		"--max-authenticated-connections-per-source": c.Limits.MaxAuthenticatedConnectionsPerSource > 0,
		"--tls-handshake-timeout":                    c.Limits.HandshakeTimeout > 0,
		"--anonymous-connection-idle":                c.Limits.AnonymousIdleTimeout > 0,
		"--max-connection-idle":                      c.Limits.MaxConnectionIdle > 0,
		"--max-connection-age":                       c.Limits.MaxConnectionAge > 0,
		"--max-connection-age-grace":                 c.Limits.MaxConnectionAgeGrace > 0,
		"--join-rate-per-source":                     c.Limits.JoinRatePerSource > 0,
		"--join-burst-per-source":                    c.Limits.JoinBurstPerSource > 0,
		"--max-concurrent-joins":                     c.Limits.MaxConcurrentJoins > 0,
	} {
		if !positive {
			errs = append(errs, fmt.Errorf("%s: must be positive", flagName))
		}
	}
	if c.Limits.MaxHandshakes > 0 && c.Limits.MaxHandshakes > c.Limits.MaxConnections/2 {
		errs = append(errs, fmt.Errorf("--max-handshakes %d: must not exceed half of --max-connections %d", c.Limits.MaxHandshakes, c.Limits.MaxConnections))
	}
	if c.Limits.MaxTokenConnections > c.Limits.MaxConnections {
		errs = append(errs, fmt.Errorf("--max-token-connections %d: must not exceed --max-connections %d", c.Limits.MaxTokenConnections, c.Limits.MaxConnections))
	}
	if c.Limits.MaxAnonymousConnections > c.Limits.MaxConnections {
		errs = append(errs, fmt.Errorf("--max-anonymous-connections %d: must not exceed --max-connections %d", c.Limits.MaxAnonymousConnections, c.Limits.MaxConnections))
	}
	if c.RenewalOverlap <= 0 {
		errs = append(errs, fmt.Errorf("--renewal-overlap %s: must be positive", c.RenewalOverlap))
	}
	if c.ClockOffset < -time.Hour || c.ClockOffset > time.Hour {
		errs = append(errs, fmt.Errorf("--clock-offset %s: must be within ±1h (it is for clock skew tests)", c.ClockOffset))
	}
	for i, a := range c.TokenAudiences {
		if a == "" || strings.ContainsAny(a, " \t\n") {
			errs = append(errs, fmt.Errorf("--token-audiences: audience %d (%q) must be a non-empty word without spaces", i+1, a))
		}
	}
	for flag, ttl := range map[string]time.Duration{"--token-auth-ttl": c.TokenAuthTTL, "--token-decision-ttl": c.TokenDecisionTTL} {
		if ttl < time.Second || ttl > 10*time.Minute {
			errs = append(errs, fmt.Errorf("%s %s: must be within 1s to 10m", flag, ttl))
		}
	}
	if c.RevocationsRefresh <= 0 {
		errs = append(errs, fmt.Errorf("--revocations-refresh %s: must be positive", c.RevocationsRefresh))
	}
	if c.HoldDeadline < time.Second || c.HoldDeadline > time.Minute {
		errs = append(errs, fmt.Errorf("--hold-deadline %s: must be within 1s to 1m", c.HoldDeadline))
	}
	return errors.Join(errs...)
}
