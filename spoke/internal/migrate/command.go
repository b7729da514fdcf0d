package migrate

import (
	"context"
	"flag"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Command runs `spoke migrate preflight [--kubeconfig FILE] [--namespace NS]`:
// it prints the preflight's report for the cluster and answers 1 when
// something blocks the agent (the original still runs, say) or a check could
// not be made, 0 when the agent can be installed, 2 for a bad command line.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "preflight" {
		_, _ = fmt.Fprintln(stderr, "spoke migrate: usage: spoke migrate preflight [--kubeconfig FILE] [--namespace NAMESPACE]")
		return 2
	}
	fs := flag.NewFlagSet("spoke migrate preflight", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the cluster to check (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	namespace := fs.String("namespace", "imperator-system", "the agent's namespace (where it keeps its reservations)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		_, _ = fmt.Fprintf(stderr, "spoke migrate preflight: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *namespace == "" {
		_, _ = fmt.Fprintln(stderr, "spoke migrate preflight: --namespace must not be empty")
		return 2
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	config, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "spoke migrate preflight: loading kubeconfig: %v\n", err)
		return 1
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		_, _ = fmt.Fprintf(stderr, "spoke migrate preflight: %v\n", err)
		return 1
	}
	c, err := client.New(config, client.Options{Scheme: scheme})
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "spoke migrate preflight: creating client: %v\n", err)
		return 1
	}
	report, checkErr := Preflight(ctx, c, *namespace)
	if err := report.Print(stdout); err != nil {
		return 1
	}
	if checkErr != nil {
		_, _ = fmt.Fprintf(stderr, "spoke migrate preflight: some checks could not be made: %v\n", checkErr)
		return 1
	}
	if len(report.Blocking()) > 0 {
		return 1
	}
	return 0
}
