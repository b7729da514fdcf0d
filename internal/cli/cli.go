package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/imperator-federation/imperator/internal/ctlconfig"
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

const rootLong = `imperatorctl queries the Imperator hub: the clusters of the fleet, their
machine types and usage, where N more units fit, and bootstrap tokens.

The configuration file ($IMPERATOR_CONFIG, default ~/.imperator/config) is
YAML shaped like a kubeconfig:
  current-context: prod
  contexts:
  - name: prod
    hub: hub.example.com:9443
    certificate-authority: hub-ca.crt
    client-certificate: alice.crt
    client-key: alice.key
Flags win over the environment ($IMPERATOR_HUB), which wins over the file.
The client certificate must be signed by the hub CA with organization
imperator.tenzen-y.io:viewers (read) or imperator.tenzen-y.io:admins
(tokens); ` + "`hub client-cert`" + ` prints such a configuration. Instead of a
certificate, --kubeconfig (or kubeconfig: in a context) sends the bearer
token of a kubeconfig user of the hub cluster, authorized by its RBAC
(docs/access.md). The commands and output formats follow kubectl's:
docs/imperatorctl.md.

Exit codes:
  0  success
  1  failure; capacity: the units do not fit
  2  usage error (bad flags or a request the hub rejected as invalid)
  3  hub unreachable or no answer before --timeout
  4  the hub refused the credentials`

// Env is what the program touches outside itself.
type Env struct {
	Stdout, Stderr io.Writer
	// Stdin is where a destructive command reads its confirmation; nil:
	// there is none and such a command needs --yes.
	Stdin  io.Reader
	Getenv func(string) string
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

// globals are the flags every command of a program shares.
type globals struct {
	output     string
	noHeaders  bool
	watch      bool
	configPath string
	context    string
	timeout    time.Duration
	over       overrides
}

// bindOutput binds the flags of every command that answers: -o and --timeout.
func (g *globals) bindOutput(fs *pflag.FlagSet) {
	fs.StringVarP(&g.output, "output", "o", formatTable, "Output format: table, wide, json, yaml, name, jsonpath=TEMPLATE or custom-columns=HEADER:PATH,... (name, jsonpath and custom-columns on the commands that list objects).")
	fs.BoolVar(&g.noHeaders, "no-headers", false, "Leave out the header line of tables (table, wide, custom-columns).")
	fs.DurationVar(&g.timeout, "timeout", 10*time.Second, "Deadline of each call.")
}

// bindConnection binds how imperatorctl finds and authenticates to the hub.
func (g *globals) bindConnection(fs *pflag.FlagSet) {
	fs.StringVar(&g.configPath, "config", "", "Configuration file ($IMPERATOR_CONFIG, default ~/.imperator/config).")
	fs.StringVar(&g.context, "context", "", "Context of the configuration file (default: its current-context).")
	fs.StringVar(&g.over.hub, "hub", "", "Hub address host:port ($IMPERATOR_HUB).")
	fs.StringVar(&g.over.ca, "ca", "", "Hub CA bundle (PEM file).")
	fs.StringVar(&g.over.cert, "cert", "", "Client certificate (PEM file).")
	fs.StringVar(&g.over.key, "key", "", "Client key (PEM file).")
	fs.StringVar(&g.over.serverName, "server-name", "", "TLS server name of the hub (default: the host of --hub).")
	fs.StringVar(&g.over.kubeconfig, "kubeconfig", "", "Authenticate with the bearer token of this kubeconfig's user (token, token file or exec plugin) instead of a client certificate; the hub checks it with the hub cluster's API server.")
	fs.StringVar(&g.over.kubeContext, "kube-context", "", "Context of --kubeconfig (default: its current-context).")
}

// bindWatch binds --watch on the commands that can follow changes.
func (g *globals) bindWatch(fs *pflag.FlagSet) {
	fs.BoolVarP(&g.watch, "watch", "w", false, "Keep printing changes as the hub sees them.")
}

// TokenAPI is the token calls of the query API: a gRPC client's (imperatorctl)
// or the hub's own query.Tokens run with a kubeconfig (hub token).
type TokenAPI interface {
	CreateToken(context.Context, *queryv1.CreateTokenRequest) (*queryv1.CreateTokenResponse, error)
	ListTokens(context.Context, *queryv1.ListTokensRequest) (*queryv1.ListTokensResponse, error)
	RevokeToken(context.Context, *queryv1.RevokeTokenRequest) (*queryv1.RevokeTokenResponse, error)
}

// program is one binary's command tree: what its commands share.
type program struct {
	env Env
	g   globals
	// connect opens what the command talks to: it sets c.client and/or
	// c.tokens and c.hub (how errors name the other side), and returns how
	// to close it.
	connect func(c *command) (func(), error)
}

// command is one command run.
type command struct {
	env     Env
	g       *globals
	name    string
	args    []string // positional arguments
	hub     string
	client  queryv1.QueryClient
	tokens  TokenAPI
	printer printer
	ctx     context.Context
	// connectErr is why the connection could not be made (mayFailToConnect).
	connectErr error
}

// subcommand is what a command does: validate checks its flags and
// arguments (before connecting), run does the work.
type subcommand struct {
	validate func(c *command) error
	run      func(c *command) error
	// offline commands never connect (version --client).
	offline func() bool
	// mayFailToConnect commands run without a connection when it cannot be
	// made; c.connectErr says why (version prints the client's part first).
	mayFailToConnect bool
	// objects commands list objects and print -o name, jsonpath and
	// custom-columns; the others refuse those formats.
	objects bool
}

// leaf turns sub into cmd's RunE.
func (p *program) leaf(cmd *cobra.Command, sub subcommand) *cobra.Command {
	cmd.RunE = func(cc *cobra.Command, args []string) error {
		return asExit(p.execute(cc.Context(), cc.CommandPath(), args, sub))
	}
	return cmd
}

func (p *program) execute(ctx context.Context, name string, args []string, sub subcommand) error {
	c := &command{env: p.env, g: &p.g, name: name, args: args, ctx: ctx}
	var err error
	if c.printer, err = newPrinter(p.g.output, p.env); err != nil {
		return fail(ExitUsage, "%v", err)
	}
	c.printer.noHeaders = p.g.noHeaders
	if c.printer.objectFormat() && !sub.objects {
		return fail(ExitUsage, "%s: --output %s is for the commands that list objects (clusters, machines, usage, capacity, hold list, hold get); use json or yaml", name, c.printer.format)
	}
	if p.g.timeout <= 0 {
		return fail(ExitUsage, "--timeout %s: must be positive", p.g.timeout)
	}
	if sub.validate != nil {
		if err := sub.validate(c); err != nil {
			return err
		}
	}
	if sub.offline == nil || !sub.offline() {
		closeFn, err := p.connect(c)
		switch {
		case err != nil && sub.mayFailToConnect:
			c.connectErr = err
		case err != nil:
			return err
		default:
			defer closeFn()
		}
	}
	if err := sub.run(c); err != nil {
		return err
	}
	if err := c.printer.out.err; err != nil {
		return fmt.Errorf("writing the answer: %w", err)
	}
	return nil
}

// asExit makes every error of a command's own an exitError, so that what
// is left unwrapped at the top is cobra's: a command line it could not parse.
func asExit(err error) error {
	var ee *exitError
	if err == nil || errors.As(err, &ee) {
		return err
	}
	return &exitError{code: ExitFailure, msg: err.Error()}
}

// NewCommand returns imperatorctl's command tree writing to env.
func NewCommand(env Env) *cobra.Command {
	return newCommand(env, nil)
}

// newCommand is NewCommand connecting with connect (dialHub when nil).
func newCommand(env Env, connect func(c *command) (func(), error)) *cobra.Command {
	if env.Now == nil {
		env.Now = time.Now
	}
	p := &program{env: env, connect: connect}
	if p.connect == nil {
		p.connect = p.dialHub
	}
	root := &cobra.Command{
		Use:   "imperatorctl",
		Short: "imperatorctl queries the Imperator hub",
		Long:  rootLong,
		// Without a command: the help, and a usage error for scripts.
		RunE: func(cc *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fail(ExitUsage, "unknown command %q: run `imperatorctl help`", args[0])
			}
			cc.SetOut(env.Stderr)
			_ = cc.Help()
			return fail(ExitUsage, "")
		},
		Args:              cobra.ArbitraryArgs,
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	p.g.bindOutput(root.PersistentFlags())
	p.g.bindConnection(root.PersistentFlags())
	registerOutputCompletion(root)
	root.AddGroup(&cobra.Group{ID: "query", Title: "Query the fleet:"}, &cobra.Group{ID: "admin", Title: "Administer the hub:"})
	for _, cmd := range []*cobra.Command{p.clustersCommand(), p.machinesCommand(), p.usageCommand(), p.capacityCommand(), p.holdCommand(), p.getCommand(), p.describeCommand(), p.whyCommand()} {
		cmd.GroupID = "query"
		root.AddCommand(cmd)
	}
	tokens := p.tokenCommand("imperatorctl token")
	tokens.GroupID = "admin"
	clusterAdmin := p.clusterCommand()
	clusterAdmin.GroupID = "admin"
	root.AddCommand(tokens, clusterAdmin, p.versionCommand(), completionCommand())
	setIO(root, env)
	return root
}

// setIO points cmd's output at env and makes flag errors usage errors.
func setIO(cmd *cobra.Command, env Env) {
	cmd.SetOut(env.Stdout)
	cmd.SetErr(env.Stderr)
	cmd.SetFlagErrorFunc(func(cc *cobra.Command, err error) error {
		return fail(ExitUsage, "%v (see `%s --help`)", err, cc.CommandPath())
	})
}

// registerOutputCompletion completes -o with the formats.
func registerOutputCompletion(root *cobra.Command) {
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(
		[]string{formatTable, formatWide, formatJSON, formatYAML, formatName, formatJSONPath + "=", formatCustomColumns + "="}, cobra.ShellCompDirectiveNoFileComp|cobra.ShellCompDirectiveNoSpace))
}

// Run runs imperatorctl with args and returns the exit code.
func Run(ctx context.Context, args []string, env Env) int {
	return Execute(ctx, NewCommand(env), args, env)
}

// Execute runs cmd with args and returns the exit code: the code of the
// command's error, or ExitUsage for a command line cobra could not parse.
// Messages go to env.Stderr, prefixed with the program's name.
func Execute(ctx context.Context, cmd *cobra.Command, args []string, env Env) int {
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		// Not from a command: cobra refused the command line.
		ee = &exitError{code: ExitUsage, msg: fmt.Sprintf("%v (see `%s --help`)", err, cmd.Name())}
	}
	if ee.msg != "" {
		// Where else could a failure to write the error go: the exit code says it.
		_, _ = fmt.Fprintf(env.Stderr, "%s: %s\n", cmd.Name(), ee.msg)
	}
	return ee.code
}

// unary returns a context with the call deadline.
func (c *command) unary() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.ctx, c.g.timeout)
}

// dialHub connects imperatorctl to the hub its flags, environment and
// configuration file name.
func (p *program) dialHub(c *command) (func(), error) {
	path, explicit := c.g.configPath, c.g.configPath != ""
	if !explicit {
		path, explicit = defaultConfigPath(c.env.Getenv)
	}
	cfg := &ctlconfig.Config{}
	if path != "" {
		var err error
		if cfg, err = ctlconfig.Load(path, explicit); err != nil {
			return nil, fail(ExitUsage, "%v", err)
		}
	}
	hctx, err := cfg.Lookup(c.g.context)
	if err != nil {
		return nil, fail(ExitUsage, "%v", err)
	}
	over := c.g.over
	if over.hub == "" && c.env.Getenv != nil {
		over.hub = c.env.Getenv("IMPERATOR_HUB")
	}
	conn, err := resolve(hctx, over)
	if err != nil {
		return nil, fail(ExitUsage, "%v", err)
	}
	var pair *tls.Certificate
	var dialOpts []grpc.DialOption
	if conn.kubeconfig != "" {
		creds, err := newKubeCredentials(conn.kubeconfig, conn.kubeContext)
		if err != nil {
			return nil, fail(ExitUsage, "%v", err)
		}
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(creds))
	} else {
		loaded, err := tls.X509KeyPair(conn.certPEM, conn.keyPEM)
		if err != nil {
			return nil, fail(ExitUsage, "loading the client certificate and key: %v", err)
		}
		pair = &loaded
	}
	tlsCfg, err := identity.ClientTLS(conn.caPEM, pair, conn.serverName)
	if err != nil {
		return nil, fail(ExitUsage, "%v", err)
	}
	if pair == nil {
		// A token caller's connections count against the hub's budget
		// for them, not the joining spokes' (identity.TokenCallerProtocol).
		tlsCfg.NextProtos = []string{"h2", identity.TokenCallerProtocol}
	}
	c.hub = conn.hub
	cc, err := grpc.NewClient(conn.hub, append(dialOpts, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))...)
	if err != nil {
		return nil, fail(ExitUsage, "hub address %q: %v", conn.hub, err)
	}
	c.client = queryv1.NewQueryClient(cc)
	c.tokens = remoteTokens{c.client}
	return func() { _ = cc.Close() }, nil
}

// remoteTokens is the token calls over a gRPC client.
type remoteTokens struct{ client queryv1.QueryClient }

func (r remoteTokens) CreateToken(ctx context.Context, req *queryv1.CreateTokenRequest) (*queryv1.CreateTokenResponse, error) {
	return r.client.CreateToken(ctx, req)
}

func (r remoteTokens) ListTokens(ctx context.Context, req *queryv1.ListTokensRequest) (*queryv1.ListTokensResponse, error) {
	return r.client.ListTokens(ctx, req)
}

func (r remoteTokens) RevokeToken(ctx context.Context, req *queryv1.RevokeTokenRequest) (*queryv1.RevokeTokenResponse, error) {
	return r.client.RevokeToken(ctx, req)
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
