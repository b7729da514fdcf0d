// Command dispatcher is the MultiKueue dispatcher imperator.tenzen-y.io/dispatcher.
// It runs beside Kueue's manager, against the MultiKueue manager cluster, and
// writes each pending MultiKueue Workload's status.nominatedClusterNames from
// the hub's capacity ranking (dispatcher/internal/controller), so that Kueue
// copies the workload only to the worker clusters where all of it fits now.
//
//	dispatcher --hub-address HOST:PORT --hub-ca-file CA.pem \
//	    (--hub-token-file TOKEN | --hub-client-cert CRT --hub-client-key KEY) [flags]
//
// The hub identity needs two read-only calls, FindCapacity and Watch: for a
// token, a hub-cluster role of get on capacity and watch on clusters
// (fleet.imperator.tenzen-y.io); otherwise a viewer certificate, the hub's
// narrowest certificate role (docs/multikueue.md says what it can see).
// Exit codes: 0 stopped by a signal, 1 failed, 2 a bad command line.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/imperator-federation/imperator/dispatcher/internal/controller"
	"github.com/imperator-federation/imperator/internal/apiready"
	"github.com/imperator-federation/imperator/internal/identity"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// options are the command line.
type options struct {
	hubAddress, hubCAFile, hubServerName string
	tokenFile, certFile, keyFile         string
	maxClusters                          int
	callTimeout, placementGrace          time.Duration
	probeAddress, metricsAddress         string
	leaderElect, withoutClaims           bool
	leaderElectionNamespace              string
}

func main() {
	fs := flag.NewFlagSet("dispatcher", flag.ContinueOnError)
	o := &options{}
	fs.StringVar(&o.hubAddress, "hub-address", "", "the hub's query API, host:port (required)")
	fs.StringVar(&o.hubCAFile, "hub-ca-file", "", "the hub CA bundle, PEM, as `hub ca print` prints it (required)")
	fs.StringVar(&o.hubServerName, "hub-server-name", "", "the name to verify the hub's certificate for; the address's host when empty")
	fs.StringVar(&o.tokenFile, "hub-token-file", "", "a bearer token for the hub (e.g. a projected ServiceAccount token), read again at each call")
	fs.StringVar(&o.certFile, "hub-client-cert", "", "a hub client certificate (PEM), with --hub-client-key, instead of a token")
	fs.StringVar(&o.keyFile, "hub-client-key", "", "the key of --hub-client-cert (PEM)")
	fs.IntVar(&o.maxClusters, "max-clusters", 1, "the most worker clusters nominated for one workload, best first, 1 to 20 (Kueue's limit); above 1 Kueue copies the workload to each and keeps the first that admits it")
	fs.DurationVar(&o.placementGrace, "placement-grace", 10*time.Second, "how long a placed workload's units still count as taken, until the hub's figures show its pods")
	fs.BoolVar(&o.withoutClaims, "without-claims", false, "decide on the hub's figures alone, not counting the units of nominations whose pods do not run yet (for comparison)")
	fs.DurationVar(&o.callTimeout, "call-timeout", 5*time.Second, "deadline of each FindCapacity call")
	fs.StringVar(&o.probeAddress, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.StringVar(&o.metricsAddress, "metrics-bind-address", "0", "address of /metrics; 0 disables it")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "elect a leader among replicas (a Lease in --leader-election-namespace)")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "kueue-system", "namespace of the leader Lease")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the MultiKueue manager cluster; in-cluster or $KUBECONFIG when empty")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if err := o.validate(); err != nil {
		fmt.Fprintf(os.Stderr, "dispatcher: %v\n", err)
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	if *kubeconfig != "" {
		_ = os.Setenv("KUBECONFIG", *kubeconfig) // read by ctrl.GetConfig
	}
	if err := run(ctrl.SetupSignalHandler(), o); err != nil {
		fmt.Fprintf(os.Stderr, "dispatcher: %v\n", err)
		os.Exit(1)
	}
}

// validate names the flag of every bad value.
func (o *options) validate() error {
	var errs []error
	if o.hubAddress == "" {
		errs = append(errs, errors.New("--hub-address is required"))
	}
	if o.hubCAFile == "" {
		errs = append(errs, errors.New("--hub-ca-file is required"))
	}
	withCert := o.certFile != "" || o.keyFile != ""
	switch {
	case o.tokenFile != "" && withCert:
		errs = append(errs, errors.New("--hub-token-file and --hub-client-cert/--hub-client-key exclude each other"))
	case o.tokenFile == "" && !withCert:
		errs = append(errs, errors.New("one of --hub-token-file or --hub-client-cert with --hub-client-key is required"))
	case withCert && (o.certFile == "" || o.keyFile == ""):
		errs = append(errs, errors.New("--hub-client-cert and --hub-client-key go together"))
	}
	if o.maxClusters < 1 || o.maxClusters > controller.MaxNominated {
		errs = append(errs, fmt.Errorf("--max-clusters %d: want 1 to %d", o.maxClusters, controller.MaxNominated))
	}
	if o.placementGrace < 0 {
		errs = append(errs, fmt.Errorf("--placement-grace %s: want 0 or more", o.placementGrace))
	}
	if o.callTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--call-timeout %s: want a positive duration", o.callTimeout))
	}
	return errors.Join(errs...)
}

// run dials the hub and runs the manager until ctx ends.
func run(ctx context.Context, o *options) error {
	conn, err := dialHub(o)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	hub := queryv1.NewQueryClient(conn)

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("the manager cluster's kubeconfig: %w", err)
	}
	// A start during the manager cluster's API-server outage waits for it
	// instead of exiting (apiready).
	if err := apiready.Wait(ctx, cfg, apiready.DefaultTimeout, ctrl.Log.WithName("dispatcher")); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Client:                  client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		HealthProbeBindAddress:  o.probeAddress,
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddress},
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "imperator-dispatcher",
		LeaderElectionNamespace: o.leaderElectionNamespace,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	changes := make(chan event.GenericEvent, 1024)
	r := &controller.Reconciler{Client: mgr.GetClient(), Hub: hub, Recorder: mgr.GetEventRecorder("imperator-dispatcher"),
		Limit: o.maxClusters, CallTimeout: o.callTimeout, PlacementGrace: o.placementGrace, WithoutClaims: o.withoutClaims}
	if err := r.SetupWithManager(mgr, changes); err != nil {
		return fmt.Errorf("setting up the dispatcher: %w", err)
	}
	if err := mgr.Add(&controller.HubWatch{Hub: hub, Client: mgr.GetClient(), Out: changes}); err != nil {
		return err
	}
	if err := errors.Join(mgr.AddHealthzCheck("ping", healthz.Ping), mgr.AddReadyzCheck("ping", healthz.Ping)); err != nil {
		return err
	}
	ctrl.Log.Info("Dispatching MultiKueue workloads by capacity", "dispatcherName", controller.Name, "hub", o.hubAddress)
	return mgr.Start(ctx)
}

// dialHub opens the connection to the hub's query API with the token or
// the certificate of o.
func dialHub(o *options) (*grpc.ClientConn, error) {
	caPEM, err := os.ReadFile(o.hubCAFile)
	if err != nil {
		return nil, fmt.Errorf("--hub-ca-file: %w", err)
	}
	var pair *tls.Certificate
	var opts []grpc.DialOption
	if o.tokenFile != "" {
		if _, err := readToken(o.tokenFile); err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithPerRPCCredentials(tokenFile(o.tokenFile)))
	} else {
		loaded, err := tls.LoadX509KeyPair(o.certFile, o.keyFile)
		if err != nil {
			return nil, fmt.Errorf("--hub-client-cert/--hub-client-key: %w", err)
		}
		pair = &loaded
	}
	tlsCfg, err := identity.ClientTLS(caPEM, pair, o.hubServerName)
	if err != nil {
		return nil, fmt.Errorf("--hub-ca-file: %w", err)
	}
	if pair == nil {
		// As imperatorctl's: a token caller's connections count against
		// the hub's budget for them (--max-token-connections), not the
		// joining spokes' anonymous one, which a flood of joins fills.
		tlsCfg.NextProtos = []string{"h2", identity.TokenCallerProtocol}
	}
	conn, err := grpc.NewClient(o.hubAddress, append(opts, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))...)
	if err != nil {
		return nil, fmt.Errorf("--hub-address %q: %w", o.hubAddress, err)
	}
	return conn, nil
}

// tokenFile sends the token of a file, read at each call: a projected
// ServiceAccount token is rotated in place by the kubelet.
type tokenFile string

func (t tokenFile) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	token, err := readToken(string(t))
	if err != nil {
		return nil, err
	}
	return map[string]string{"authorization": "Bearer " + token}, nil
}

func (tokenFile) RequireTransportSecurity() bool { return true }

func readToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--hub-token-file: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("--hub-token-file %s is empty", path)
	}
	return token, nil
}
