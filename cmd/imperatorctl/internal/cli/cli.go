// Package cli implements imperatorctl: the subcommands, their flags, the
// configuration file, the connection to the hub and the output formats.
// Run is the whole program, so that tests drive it like a user.
package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/imperator-federation/imperator/internal/identity"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// Exit codes scripts can rely on.
const (
	ExitOK = 0
	// ExitFailure: the command failed, or capacity found no placement.
	ExitFailure = 1
	// ExitUsage: bad command line or request (also InvalidArgument from the hub).
	ExitUsage = 2
	// ExitUnreachable: the hub could not be reached or did not answer in time.
	ExitUnreachable = 3
	// ExitDenied: the hub refused the credentials.
	ExitDenied = 4
)

const usage = `imperatorctl queries the Imperator hub.

Commands:
  clusters                        list the clusters (state, agent, heartbeat age, machines)
  machines [filters]              list machine types: --cluster --group --type --gpu-product --gpu-family
  usage [--cluster NAME]          maximum/reserved/used/waiting/free per type, with fleet totals
  capacity TYPE|GROUP/TYPE --count N [--same-cluster]
  capacity --gpu N [--gpu-product P] [--gpu-family F] [--cpu Q] [--memory Q] --count N [--same-cluster]
                                  where N more units fit now; by default spread over the
                                  fewest clusters, with --same-cluster all in one cluster
  token create [--ttl 24h] [--cluster NAME] [--description TEXT]
  token list
  token revoke ID                 bootstrap tokens for joining spokes (admin certificate)
  help                            this text

Flags of every command:
  -o, --output table|wide|json|yaml   output format (default table)
  --watch                             clusters, usage: keep printing changes
  --config PATH                       configuration file ($IMPERATOR_CONFIG, default ~/.imperator/config)
  --context NAME                      context of the configuration file
  --hub HOST:PORT                     hub address ($IMPERATOR_HUB)
  --ca, --cert, --key PATH            hub CA bundle, client certificate and key (PEM)
  --server-name NAME                  TLS name of the hub (default: the host of --hub)
  --timeout DURATION                  deadline of each call (default 10s)

The configuration file is YAML shaped like a kubeconfig:
  current-context: prod
  contexts:
  - name: prod
    hub: hub.example.com:9443
    certificate-authority: hub-ca.crt
    client-certificate: alice.crt
    client-key: alice.key
Flags win over the environment, which wins over the file. The client
certificate must be signed by the hub CA with organization
imperator.tenzen-y.io:viewers (read) or imperator.tenzen-y.io:admins (tokens).

Exit codes:
  0  success
  1  failure; capacity: the units do not fit
  2  usage error (bad flags or a request the hub rejected as invalid)
  3  hub unreachable or no answer before --timeout
  4  the hub refused the credentials
`

// Env is what the program touches outside itself.
type Env struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	// Now is the clock for relative times (time.Now when nil).
	Now func() time.Time
}

// exitError carries an exit code and a message for the user.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func fail(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

// globals are the flags of every command.
type globals struct {
	output     string
	watch      bool
	configPath string
	context    string
	timeout    time.Duration
	over       overrides
}

func (g *globals) bind(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&g.output, "output", "table", "Output format: table, wide, json or yaml.")
	fs.StringVar(&g.output, "o", "table", "Shorthand for --output.")
	fs.BoolVar(&g.watch, "watch", false, "Keep printing changes (clusters, usage).")
	fs.BoolVar(&g.watch, "w", false, "Shorthand for --watch.")
	fs.StringVar(&g.configPath, "config", "", "Configuration file.")
	fs.StringVar(&g.context, "context", "", "Context of the configuration file.")
	fs.StringVar(&g.over.hub, "hub", getenv("IMPERATOR_HUB"), "Hub address host:port.")
	fs.StringVar(&g.over.ca, "ca", "", "Hub CA bundle (PEM file).")
	fs.StringVar(&g.over.cert, "cert", "", "Client certificate (PEM file).")
	fs.StringVar(&g.over.key, "key", "", "Client key (PEM file).")
	fs.StringVar(&g.over.serverName, "server-name", "", "TLS server name of the hub.")
	fs.DurationVar(&g.timeout, "timeout", 10*time.Second, "Deadline of each call.")
}

// command is one subcommand run.
type command struct {
	env     Env
	g       globals
	fs      *flag.FlagSet
	args    []string // positional arguments
	hub     string
	client  queryv1.QueryClient
	printer printer
	ctx     context.Context
}

// Run runs imperatorctl with args and returns the exit code.
func Run(ctx context.Context, args []string, env Env) int {
	if env.Now == nil {
		env.Now = time.Now
	}
	err := run(ctx, args, env)
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		ee = &exitError{code: ExitFailure, msg: err.Error()}
	}
	if ee.msg != "" {
		fmt.Fprintf(env.Stderr, "imperatorctl: %s\n", ee.msg)
	}
	return ee.code
}

// subcommand is what a command's constructor returns after binding its
// flags: validate checks them (before dialing), run does the work.
type subcommand struct {
	validate func(c *command) error
	run      func(c *command) error
}

func run(ctx context.Context, args []string, env Env) error {
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, usage)
		return fail(ExitUsage, "")
	}
	name, args := args[0], args[1:]
	if name == "token" {
		if len(args) == 0 {
			return fail(ExitUsage, "usage: imperatorctl token create|list|revoke")
		}
		name, args = "token "+args[0], args[1:]
	}
	var newSub func(fs *flag.FlagSet) subcommand
	switch name {
	case "help", "-h", "--help":
		fmt.Fprint(env.Stdout, usage)
		return nil
	case "clusters":
		newSub = clustersCommand
	case "machines":
		newSub = machinesCommand
	case "usage":
		newSub = usageCommand
	case "capacity":
		newSub = capacityCommand
	case "token create":
		newSub = tokenCreateCommand
	case "token list":
		newSub = tokenListCommand
	case "token revoke":
		newSub = tokenRevokeCommand
	default:
		return fail(ExitUsage, "unknown command %q: run `imperatorctl help`", name)
	}
	cmd := &command{env: env}
	cmd.fs = flag.NewFlagSet("imperatorctl "+name, flag.ContinueOnError)
	cmd.fs.SetOutput(env.Stderr)
	cmd.fs.Usage = func() {
		fmt.Fprintf(env.Stderr, "usage of imperatorctl %s (see `imperatorctl help`):\n", name)
		cmd.fs.PrintDefaults()
	}
	cmd.g.bind(cmd.fs, env.Getenv)
	sub := newSub(cmd.fs)
	positional, err := parseInterspersed(cmd.fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fail(ExitUsage, "%v", err)
	}
	cmd.args = positional
	if cmd.printer, err = newPrinter(cmd.g.output, env); err != nil {
		return fail(ExitUsage, "%v", err)
	}
	if cmd.g.watch && name != "clusters" && name != "usage" {
		return fail(ExitUsage, "--watch: only clusters and usage can be watched")
	}
	if cmd.g.timeout <= 0 {
		return fail(ExitUsage, "--timeout %s: must be positive", cmd.g.timeout)
	}
	// Validate the command's own flags before dialing.
	if sub.validate != nil {
		if err := sub.validate(cmd); err != nil {
			return err
		}
	}
	conn, err := cmd.connect()
	if err != nil {
		return err
	}
	defer conn.Close()
	cmd.client = queryv1.NewQueryClient(conn)
	cmd.ctx = ctx
	return sub.run(cmd)
}

// unary returns a context with the call deadline.
func (c *command) unary() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.ctx, c.g.timeout)
}

// parseInterspersed parses flags anywhere among the positional arguments
// (`capacity compute-xlarge --count 4`), which flag.Parse alone does not.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		if args[0] == "--" {
			return append(positional, args[1:]...), nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

func (c *command) connect() (*grpc.ClientConn, error) {
	path, explicit := c.g.configPath, c.g.configPath != ""
	if !explicit {
		path, explicit = defaultConfigPath(c.env.Getenv)
	}
	cfg := &Config{}
	if path != "" {
		var err error
		if cfg, err = loadConfig(path, explicit); err != nil {
			return nil, fail(ExitUsage, "%v", err)
		}
	}
	hctx, err := cfg.context(c.g.context)
	if err != nil {
		return nil, fail(ExitUsage, "%v", err)
	}
	conn, err := resolve(hctx, c.g.over)
	if err != nil {
		return nil, fail(ExitUsage, "%v", err)
	}
	pair, err := tls.X509KeyPair(conn.certPEM, conn.keyPEM)
	if err != nil {
		return nil, fail(ExitUsage, "loading the client certificate and key: %v", err)
	}
	tlsCfg, err := identity.ClientTLS(conn.caPEM, &pair, conn.serverName)
	if err != nil {
		return nil, fail(ExitUsage, "%v", err)
	}
	c.hub = conn.hub
	cc, err := grpc.NewClient(conn.hub, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		return nil, fail(ExitUsage, "hub address %q: %v", conn.hub, err)
	}
	return cc, nil
}

// callError turns a gRPC error into a message and exit code a human and a
// script can act on.
func (c *command) callError(err error) error {
	st := status.Convert(err)
	switch st.Code() {
	case codes.Unavailable:
		return fail(ExitUnreachable, "hub unreachable at %s: %s", c.hub, st.Message())
	case codes.DeadlineExceeded:
		return fail(ExitUnreachable, "hub at %s did not answer within %s", c.hub, c.g.timeout)
	case codes.Unauthenticated, codes.PermissionDenied:
		return fail(ExitDenied, "hub at %s refused the request: %s", c.hub, st.Message())
	case codes.InvalidArgument:
		return fail(ExitUsage, "invalid request: %s", st.Message())
	case codes.Canceled:
		return fail(ExitFailure, "interrupted")
	default:
		return fail(ExitFailure, "%s", strings.TrimSpace(st.Message()))
	}
}
