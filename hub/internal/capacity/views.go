package capacity

import (
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
		Name:                 c.Name,
		State:                StateOf(c),
		StateMessage:         StateMessage(c, now),
		AgentVersion:         c.AgentVersion,
		AgentMode:            c.AgentMode,
		InjectionUnavailable: c.InjectionUnavailable,
		LastHeartbeat:        timestamp(c.LastHeartbeat),
		ObservedAt:           timestamp(c.ObservedAt),
		MachineCount:         saturate(int64(len(c.Machines))),
		Connected:            c.Connected,
		Generation:           c.Generation,
	}
	if !c.LastHeartbeat.IsZero() {
		out.HeartbeatAge = durationpb.New(now.Sub(c.LastHeartbeat).Truncate(time.Second))
	}
	types := 0
	for _, m := range c.Machines {
		types += len(m.GetTypes())
	}
	out.MachineTypeCount = saturate(int64(types))
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

// ClusterUsageOf is the usage of c per group and type, in time linear in
// its types. Sums saturate at math.MaxInt32.
func ClusterUsageOf(c *store.Cluster) *queryv1.ClusterUsage {
	out := &queryv1.ClusterUsage{Cluster: c.Name, State: StateOf(c), ObservedAt: timestamp(c.ObservedAt)}
	types := 0
	for _, m := range c.Machines {
		types += len(m.GetTypes())
	}
	rows := make([]typeRow, 0, types)
	for _, m := range c.Machines {
		for _, t := range m.GetTypes() {
			rows = append(rows, rowOfType(m.GetGroup(), t))
		}
	}
	out.Types = sumRows(rows)
	return out
}

// Usage is the usage of every cluster and the fleet totals over clusters
// that are neither offline nor stale. usageOf gives a cluster's usage
// (ClusterUsageOf when nil; a UsageCache's Of shares it between callers).
// The fleet's sums saturate at math.MaxInt32.
func Usage(clusters []*store.Cluster, usageOf func(*store.Cluster) *queryv1.ClusterUsage) *queryv1.GetUsageResponse {
	if usageOf == nil {
		usageOf = ClusterUsageOf
	}
	resp := &queryv1.GetUsageResponse{}
	var lists [][]typeRow
	for _, c := range clusters {
		cu := usageOf(c)
		resp.Clusters = append(resp.Clusters, cu)
		if cu.State != queryv1.ClusterState_CLUSTER_STATE_AVAILABLE || len(cu.Types) == 0 {
			continue
		}
		rows := make([]typeRow, len(cu.Types))
		for i, t := range cu.Types {
			rows[i] = rowOfUsage(t)
		}
		if !slices.IsSortedFunc(rows, compareRows) {
			// Not from ClusterUsageOf: sum and sort it first.
			rows = rowsOfUsage(sumRows(rows))
		}
		lists = append(lists, rows)
	}
	// Every cluster's list is sorted by group and type: merging them pairwise
	// sums the fleet in O(n log k) for n entries of k clusters.
	for len(lists) > 1 {
		merged := make([][]typeRow, 0, (len(lists)+1)/2)
		for i := 0; i < len(lists); i += 2 {
			if i+1 == len(lists) {
				merged = append(merged, lists[i])
				continue
			}
			merged = append(merged, mergeRows(lists[i], lists[i+1]))
		}
		lists = merged
	}
	if len(lists) == 1 {
		resp.Fleet = usageOfRows(lists[0])
	}
	return resp
}

func byTypeName(a, b *federationv1.MachineType) int { return strings.Compare(a.GetName(), b.GetName()) }
