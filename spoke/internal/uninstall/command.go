package uninstall

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/imperator-federation/imperator/internal/schemes"
)

// DefaultTimeout bounds a run when --timeout is not given.
const DefaultTimeout = 2 * time.Minute

// Main is `spoke uninstall [flags]`: it parses args, runs Run against the
// cluster of --kubeconfig (in a pod: its ServiceAccount) and returns the exit
// code: 0 done, 1 failed (the error on stderr), 2 a usage error.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("spoke uninstall", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		_, _ = fmt.Fprintf(stderr, "Usage: spoke uninstall [flags]\n\n"+
			"Run after the agent is removed (the spoke chart does it as a post-delete hook): removes the\n"+
			"imperator.tenzen-y.io/ labels, taints and annotation from every node, the MachineNodePools'\n"+
			"finalizer and the reservation StatefulSets and Services, and tells every guest still waiting at\n"+
			"the scheduling gate imperator.tenzen-y.io/slot why it stays there. Idempotent.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	namespace := fs.String("namespace", envOr("POD_NAMESPACE", "imperator-system"), "the namespace the agent ran in (default: $POD_NAMESPACE, else imperator-system)")
	timeout := fs.Duration("timeout", DefaultTimeout, "how long the whole run may take, waiting for the agent's pods to go included")
	kubeconfig := fs.String("kubeconfig", "", "path to a kubeconfig; empty: $KUBECONFIG, the in-cluster ServiceAccount, ~/.kube/config")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		_, _ = fmt.Fprintf(stderr, "spoke uninstall: unexpected argument %q: it takes only flags\n", fs.Arg(0))
		return 2
	}
	if *timeout <= 0 {
		_, _ = fmt.Fprintf(stderr, "spoke uninstall: --timeout=%s: must be positive\n", *timeout)
		return 2
	}
	if *namespace == "" {
		_, _ = fmt.Fprintln(stderr, "spoke uninstall: --namespace: must not be empty")
		return 2
	}
	if err := run(*kubeconfig, *namespace, *timeout, stdout); err != nil {
		_, _ = fmt.Fprintln(stderr, "spoke uninstall:", err)
		return 1
	}
	return 0
}

func run(kubeconfig, namespace string, timeout time.Duration, out io.Writer) error {
	restConfig, err := loadConfig(kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	scheme, err := schemes.Spoke()
	if err != nil {
		return err
	}
	c, err := client.New(restConfig, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := Run(ctx, c, Options{Namespace: namespace}, out)
	_, _ = fmt.Fprint(out, res.String())
	return err
}

func loadConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return config.GetConfig()
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
