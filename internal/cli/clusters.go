package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// statePrefix is the prefix of ClusterState names, left out of tables.
const statePrefix = "CLUSTER_STATE_"

var clusterColumns = []column{
	{name: "NAME"}, {name: "STATE"}, {name: "AGENT"}, {name: "HEARTBEAT"}, {name: "MACHINES"}, {name: "TYPES"},
	{name: "OBSERVED", wide: true}, {name: "CONNECTED", wide: true}, {name: "GENERATION", wide: true},
	{name: "MODE", wide: true}, {name: "MESSAGE", wide: true},
}

func (p *printer) clusterRow(t *table, c *queryv1.Cluster) {
	mode := c.GetAgentMode()
	if mode == "" {
		mode = "-" // an agent that predates agent modes
	}
	t.add(c.GetName(), enumName(c.GetState().String(), statePrefix), agentCell(c), p.age(c.GetLastHeartbeat()),
		itoa(c.GetMachineCount()), itoa(c.GetMachineTypeCount()), p.age(c.GetObservedAt()), fmt.Sprint(c.GetConnected()), fmt.Sprint(c.GetGeneration()),
		mode, clusterMessage(c))
}

// agentCell is the agent's version, flagged when it is outside the hub's
// version skew policy (the MESSAGE column and describe cluster say why).
func agentCell(c *queryv1.Cluster) string {
	if c.GetVersionSkew() == "" {
		return c.GetAgentVersion()
	}
	return c.GetAgentVersion() + " " + skewFlag
}

// skewFlag marks an agent version outside the skew policy.
const skewFlag = "(unsupported skew)"

// clusterMessage is why the cluster is not Available, why its agent's
// version is outside the skew policy and, when its API server cannot reach
// the agent's webhooks, that guests cannot be injected.
func clusterMessage(c *queryv1.Cluster) string {
	var parts []string
	if m := c.GetStateMessage(); m != "" {
		parts = append(parts, m)
	}
	if m := c.GetVersionSkew(); m != "" {
		parts = append(parts, "unsupported version skew: "+m)
	}
	if m := c.GetInjectionUnavailable(); m != "" {
		parts = append(parts, "injection unavailable: "+m)
	}
	return strings.Join(parts, "; ")
}

func (p *program) clustersCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "clusters [NAME...]",
		Short: "List the clusters (or the named ones): state, agent version, heartbeat age, machines",
		Example: `  imperatorctl clusters
  imperatorctl clusters spoke-a -o yaml
  imperatorctl clusters -o custom-columns=NAME:.name,STATE:.state --no-headers`,
		ValidArgsFunction: p.completeClusters,
	}
	p.g.bindWatch(cmd.Flags())
	return p.leaf(cmd, subcommand{objects: true, validate: clusterNames, run: func(c *command) error {
		if c.g.watch {
			return c.watch(func(t *table, ev *queryv1.ClusterEvent) error {
				c.printer.clusterRow(t, ev.GetCluster())
				return nil
			}, clusterColumns, c.args...)
		}
		ctx, cancel := c.unary()
		defer cancel()
		resp, err := c.client.ListClusters(ctx, &queryv1.ListClustersRequest{})
		if err != nil {
			return c.callError(err)
		}
		if len(c.args) > 0 {
			named, err := namedClusters(resp.GetClusters(), c.args)
			if err != nil {
				return err
			}
			resp = &queryv1.ListClustersResponse{Clusters: named}
		}
		if c.printer.structured() {
			if len(c.args) == 1 {
				// One named object is printed itself, as kubectl get NAME.
				return c.printer.message(resp.GetClusters()[0])
			}
			return c.printer.message(resp)
		}
		if c.printer.objectFormat() {
			var whole proto.Message = resp
			if len(c.args) == 1 {
				whole = resp.GetClusters()[0]
			}
			return c.printer.objects(whole, asMessages(resp.GetClusters()), namesOf("cluster", resp.GetClusters(), (*queryv1.Cluster).GetName), true)
		}
		t := &table{columns: clusterColumns}
		for _, cl := range resp.GetClusters() {
			c.printer.clusterRow(t, cl)
		}
		return c.printer.table(t, true)
	}})
}

// clusterNames checks the cluster names of a command's arguments.
func clusterNames(c *command) error {
	for _, name := range c.args {
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			return fail(ExitUsage, "cluster name %q: %s", name, strings.Join(msgs, "; "))
		}
	}
	return nil
}

// namedClusters are the clusters of all with the given names, in the order
// named; a name the hub does not know fails the command, as kubectl get
// does for a missing object.
func namedClusters(all []*queryv1.Cluster, names []string) ([]*queryv1.Cluster, error) {
	byName := make(map[string]*queryv1.Cluster, len(all))
	for _, cl := range all {
		byName[cl.GetName()] = cl
	}
	var out []*queryv1.Cluster
	var missing []string
	for _, name := range names {
		if cl, ok := byName[name]; ok {
			out = append(out, cl)
		} else {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return nil, fail(ExitFailure, "cluster %s not found: the hub knows no such cluster (imperatorctl clusters lists them)", strings.Join(missing, ", "))
	}
	return out, nil
}
