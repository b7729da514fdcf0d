package capacity

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/imperator-federation/imperator/hub/internal/store"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// ClusterInfo summarises c at now.
func ClusterInfo(c *store.Cluster, now time.Time) *queryv1.Cluster {
	out := &queryv1.Cluster{
		Name:          c.Name,
		State:         StateOf(c),
		AgentVersion:  c.AgentVersion,
		LastHeartbeat: timestamp(c.LastHeartbeat),
		ObservedAt:    timestamp(c.ObservedAt),
		MachineCount:  int32(len(c.Machines)),
		Connected:     c.Connected,
		Generation:    c.Generation,
	}
	if !c.LastHeartbeat.IsZero() {
		out.HeartbeatAge = durationpb.New(now.Sub(c.LastHeartbeat).Truncate(time.Second))
	}
	for _, m := range c.Machines {
		out.MachineTypeCount += int32(len(m.GetTypes()))
	}
	return out
}

// Filter narrows ListMachines; empty fields match everything.
type Filter struct {
	Cluster    string
	Group      string
	Type       string
	GPUProduct string
	GPUFamily  string
}

func (f *Filter) matches(m *federationv1.Machine, t *federationv1.MachineType) bool {
	return (f.Group == "" || m.GetGroup() == f.Group) &&
		(f.Type == "" || t.GetName() == f.Type) &&
		(f.GPUProduct == "" || strings.EqualFold(t.GetGpu().GetProduct(), f.GPUProduct)) &&
		(f.GPUFamily == "" || strings.EqualFold(t.GetGpu().GetFamily(), f.GPUFamily))
}

// Machines lists the machine types of clusters (sorted by name, as
// Store.List returns them) that match f, sorted by cluster, Machine and type.
func Machines(clusters []*store.Cluster, f Filter) []*queryv1.MachineTypeInfo {
	var out []*queryv1.MachineTypeInfo
	for _, c := range clusters {
		if f.Cluster != "" && c.Name != f.Cluster {
			continue
		}
		state := StateOf(c)
		observedAt := timestamp(c.ObservedAt)
		for _, m := range c.Machines {
			types := m.GetTypes()
			if !slices.IsSortedFunc(types, byTypeName) {
				types = slices.Clone(types)
				slices.SortFunc(types, byTypeName)
			}
			for _, t := range types {
				if !f.matches(m, t) {
					continue
				}
				usage := t.GetUsage()
				if usage == nil {
					usage = &federationv1.Usage{}
				}
				out = append(out, &queryv1.MachineTypeInfo{
					Cluster:      c.Name,
					ClusterState: state,
					Machine:      m.GetName(),
					Group:        m.GetGroup(),
					Type:         t.GetName(),
					Cpu:          t.GetCpu(),
					Memory:       t.GetMemory(),
					Gpu:          t.GetGpu(),
					Usage:        usage,
					Free:         Free(t),
					Nodes:        t.GetNodes(),
					MachineReady: m.GetReady(),
					ObservedAt:   observedAt,
				})
			}
		}
	}
	return out
}

// ClusterUsageOf is the usage of c per group and type.
func ClusterUsageOf(c *store.Cluster) *queryv1.ClusterUsage {
	out := &queryv1.ClusterUsage{Cluster: c.Name, State: StateOf(c), ObservedAt: timestamp(c.ObservedAt)}
	for _, m := range c.Machines {
		for _, t := range m.GetTypes() {
			out.Types = addUsage(out.Types, m.GetGroup(), t)
		}
	}
	sortUsage(out.Types)
	return out
}

// Usage is the usage of every cluster and the fleet totals over clusters
// that are neither offline nor stale.
func Usage(clusters []*store.Cluster) *queryv1.GetUsageResponse {
	resp := &queryv1.GetUsageResponse{}
	type key struct{ group, typ string }
	fleet := map[key]*queryv1.TypeUsage{}
	for _, c := range clusters {
		cu := ClusterUsageOf(c)
		resp.Clusters = append(resp.Clusters, cu)
		if cu.State != queryv1.ClusterState_CLUSTER_STATE_AVAILABLE {
			continue
		}
		for _, t := range cu.Types {
			k := key{t.Group, t.Type}
			sum, ok := fleet[k]
			if !ok {
				sum = &queryv1.TypeUsage{Group: t.Group, Type: t.Type}
				fleet[k] = sum
				resp.Fleet = append(resp.Fleet, sum)
			}
			sum.Maximum += t.Maximum
			sum.Reserved += t.Reserved
			sum.Used += t.Used
			sum.Waiting += t.Waiting
			sum.Free += t.Free
		}
	}
	sortUsage(resp.Fleet)
	return resp
}

func sortUsage(list []*queryv1.TypeUsage) {
	slices.SortFunc(list, func(a, b *queryv1.TypeUsage) int {
		return cmp.Or(strings.Compare(a.Group, b.Group), strings.Compare(a.Type, b.Type))
	})
}

func byTypeName(a, b *federationv1.MachineType) int { return strings.Compare(a.GetName(), b.GetName()) }
