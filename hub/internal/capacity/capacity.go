// Package capacity builds the hub's query answers from the in-memory index:
// the clusters, machine types and usage views, and the FindCapacity ranking
// (which clusters can take N more units of a machine type or resource shape,
// which were excluded and why). Its functions are pure: they read immutable
// store.Cluster snapshots and a caller-supplied time, and never block.
//
// Free units. A unit of a machine type is free when a reservation pod holds
// it (reserved) and no guest is about to claim it: free = min(reserved,
// maximum − used − (waiting − unplaceable)), never negative. At steady state
// the spoke keeps reserved = maximum − used − (waiting − unplaceable), so
// free equals reserved; during a handover (a waiting guest whose reservation
// pod has not stopped yet) the minimum keeps the slot the guest will take
// from being offered twice. Queued guests (held at the agent's slot gate, in
// line for a unit) are part of waiting, so a slot a queued guest is about to
// take is never free either; queued is carried beside waiting for users to
// see the line. Unplaceable guests (queued guests no ready node of the type
// can take, part of queued) are about to take nothing: the spoke keeps their
// units reserved, and they stay free, so that guests nobody can place (a
// nodeSelector matching no node costs its creator nothing) cannot make a
// type look full.
// Held units (reserved slots set aside for a capacity hold that no guest of
// the hold claimed yet) are free for nobody else: free = max(0, min(reserved,
// maximum − used − waiting) − held).
// Offline and stale clusters never count as free capacity.
//
// Sums. Figures are int32 on the wire; sums over types and clusters are
// taken in int64 and saturate at math.MaxInt32 when they go back into int32
// fields, so that one cluster reporting huge counts can never wrap a total
// negative. Aggregation is linear: entries are found through maps.
package capacity

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/imperator-federation/imperator/hub/internal/store"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// Request is a validated FindCapacity request.
type Request struct {
	// Group (optional) and Type name a machine type; used when Shape is nil.
	Group string
	Type  string
	// Shape, when set, matches every machine type whose unit offers at least
	// the shape.
	Shape *Shape
	// Count is the number of units wanted (at least 1).
	Count int32
	// Spread allows the units to be placed across clusters.
	Spread bool
}

// Shape is what one unit must offer at least; zero fields match anything.
type Shape struct {
	MilliCPU    int64
	MemoryBytes int64
	GPUs        int32
	// GPUProduct and GPUFamily match the type's GPU selectors
	// case-insensitively.
	GPUProduct string
	GPUFamily  string
}

// StateOf is the query-API state of a cluster.
func StateOf(c *store.Cluster) queryv1.ClusterState {
	switch {
	case c.State != store.StateAvailable:
		return queryv1.ClusterState_CLUSTER_STATE_OFFLINE
	case c.Stale():
		return queryv1.ClusterState_CLUSTER_STATE_STALE
	default:
		return queryv1.ClusterState_CLUSTER_STATE_AVAILABLE
	}
}

// Free is the number of units of t a new guest can get now (see the package
// documentation).
func Free(t *federationv1.MachineType) int32 {
	u := t.GetUsage()
	if u == nil {
		return 0
	}
	// In int64: maximum − used − waiting of int32 counts can leave int32.
	// Ingest keeps unplaceable within waiting.
	claiming := int64(u.GetWaiting()) - int64(u.GetUnplaceable())
	return int32(max(0, min(int64(u.GetReserved()), int64(u.GetMaximum())-int64(u.GetUsed())-claiming)-int64(u.GetHeld())))
}

// saturate is v in int32, clamped at its bounds.
func saturate(v int64) int32 {
	return int32(min(max(v, math.MinInt32), math.MaxInt32))
}

// matches reports whether the type t of Machine m is one the request asks for.
func (r *Request) matches(m *federationv1.Machine, t *federationv1.MachineType) bool {
	s := r.Shape
	if s == nil {
		return t.GetName() == r.Type && (r.Group == "" || m.GetGroup() == r.Group)
	}
	// The GPU first: it rules out most types of a fleet without looking up
	// a parsed quantity.
	g := t.GetGpu()
	if s.GPUs > 0 && g.GetNum() < s.GPUs {
		return false
	}
	if s.GPUProduct != "" && !strings.EqualFold(g.GetProduct(), s.GPUProduct) {
		return false
	}
	if s.GPUFamily != "" && !strings.EqualFold(g.GetFamily(), s.GPUFamily) {
		return false
	}
	if s.MilliCPU > 0 && milliCPU(t.GetCpu()) < s.MilliCPU {
		return false
	}
	if s.MemoryBytes > 0 && memoryBytes(t.GetMemory()) < s.MemoryBytes {
		return false
	}
	return true
}

// describe names what was asked for, for exclusion messages.
func (r *Request) describe() string {
	if r.Shape != nil {
		return "no machine type offers the requested shape"
	}
	if r.Group != "" {
		return fmt.Sprintf("no machine type %q in group %q", r.Type, r.Group)
	}
	return fmt.Sprintf("no machine type %q", r.Type)
}

// Find answers a capacity request over clusters (as Store.List returns them)
// at now.
func Find(clusters []*store.Cluster, req Request, now time.Time) *queryv1.FindCapacityResponse {
	resp := &queryv1.FindCapacityResponse{Count: req.Count}
	for _, c := range clusters {
		free, matched := freeMatching(c, &req)
		ex := func(reason queryv1.ExclusionReason, msg string) { exclude(resp, c, free, reason, msg) }
		switch {
		case c.State != store.StateAvailable:
			ex(queryv1.ExclusionReason_EXCLUSION_REASON_OFFLINE, OfflineMessage(c, now))
		case c.Restored:
			ex(queryv1.ExclusionReason_EXCLUSION_REASON_STALE, fmt.Sprintf("figures observed %s ago were read back from the hub cluster and are not confirmed yet (the hub restarted or this replica just started)", age(c.ObservedAt, now)))
		case c.Outdated != "":
			ex(queryv1.ExclusionReason_EXCLUSION_REASON_STALE, fmt.Sprintf("figures observed %s ago are older than the cluster's: %s", age(c.ObservedAt, now), c.Outdated))
		case c.APIServerUnreachable():
			ex(queryv1.ExclusionReason_EXCLUSION_REASON_STALE, c.APIServerUnreachableMessage())
		case !matched:
			ex(queryv1.ExclusionReason_EXCLUSION_REASON_NO_SUCH_TYPE, req.describe())
		case free == 0:
			ex(queryv1.ExclusionReason_EXCLUSION_REASON_NOT_ENOUGH, "no free units")
		case !req.Spread && free < req.Count:
			ex(queryv1.ExclusionReason_EXCLUSION_REASON_NOT_ENOUGH, fmt.Sprintf("%d free, %d wanted in one cluster", free, req.Count))
		default:
			resp.Candidates = append(resp.Candidates, &queryv1.CapacityCandidate{
				Cluster:    c.Name,
				Free:       free,
				Types:      matchingTypes(c, &req),
				ObservedAt: timestamp(c.ObservedAt),
			})
		}
	}
	slices.SortFunc(resp.Excluded, func(a, b *queryv1.Exclusion) int { return strings.Compare(a.Cluster, b.Cluster) })
	slices.SortFunc(resp.Candidates, func(a, b *queryv1.CapacityCandidate) int {
		return cmp.Or(cmp.Compare(b.Free, a.Free), strings.Compare(a.Cluster, b.Cluster))
	})
	remaining := req.Count
	for _, cand := range resp.Candidates {
		if remaining == 0 {
			break
		}
		cand.Take = min(cand.Free, remaining)
		remaining -= cand.Take
		if !req.Spread {
			break
		}
	}
	resp.Placed = req.Count - remaining
	resp.Satisfiable = remaining == 0
	return resp
}

// exclude adds c to the excluded clusters of resp.
func exclude(resp *queryv1.FindCapacityResponse, c *store.Cluster, free int32, reason queryv1.ExclusionReason, msg string) {
	resp.Excluded = append(resp.Excluded, &queryv1.Exclusion{
		Cluster:       c.Name,
		Reason:        reason,
		Message:       msg,
		Free:          free,
		ObservedAt:    timestamp(c.ObservedAt),
		LastHeartbeat: timestamp(c.LastHeartbeat),
	})
}

// freeMatching sums the free units of the cluster's matching types
// (saturating) and says whether any type matched, without allocating.
func freeMatching(c *store.Cluster, req *Request) (free int32, matched bool) {
	var sum int64
	for _, m := range c.Machines {
		for _, t := range m.GetTypes() {
			if req.matches(m, t) {
				matched = true
				sum += int64(Free(t))
			}
		}
	}
	return saturate(sum), matched
}

// matchingTypes lists the matching types with free units, summed per group
// and type, most free first.
func matchingTypes(c *store.Cluster, req *Request) []*queryv1.TypeUsage {
	var rows []typeRow
	for _, m := range c.Machines {
		for _, t := range m.GetTypes() {
			if !req.matches(m, t) || Free(t) == 0 {
				continue
			}
			rows = append(rows, rowOfType(m.GetGroup(), t))
		}
	}
	out := sumRows(rows)
	slices.SortStableFunc(out, func(a, b *queryv1.TypeUsage) int { return cmp.Compare(b.Free, a.Free) })
	return out
}

// typeRow is the usage of one (group, type), summed in int64.
type typeRow struct {
	group, typ                                                        string
	maximum, reserved, used, waiting, queued, unplaceable, held, free int64
}

// rowOfType is the row of type t of a Machine of group.
func rowOfType(group string, t *federationv1.MachineType) typeRow {
	u := t.GetUsage()
	return typeRow{
		group: group, typ: t.GetName(),
		maximum: int64(u.GetMaximum()), reserved: int64(u.GetReserved()), used: int64(u.GetUsed()),
		waiting: int64(u.GetWaiting()), queued: int64(u.GetQueued()), unplaceable: int64(u.GetUnplaceable()), held: int64(u.GetHeld()),
		free: int64(Free(t)),
	}
}

// rowOfUsage is the row of an already summed entry (a cluster's, for the fleet).
func rowOfUsage(u *queryv1.TypeUsage) typeRow {
	return typeRow{
		group: u.Group, typ: u.Type,
		maximum: int64(u.Maximum), reserved: int64(u.Reserved), used: int64(u.Used),
		waiting: int64(u.Waiting), queued: int64(u.Queued), unplaceable: int64(u.Unplaceable), held: int64(u.Held), free: int64(u.Free),
	}
}

// sumRows sums the rows of each (group, type) and returns them sorted by
// group and type, saturated into int32. One sort gives both the grouping
// and the order, in O(n log n) for n rows, with no per-entry lookups: groups
// are few, so they are ranked first and rows compare by rank, then by type
// name.
func sumRows(rows []typeRow) []*queryv1.TypeUsage {
	if len(rows) == 0 {
		return nil
	}
	if len(rows) <= smallRows {
		return sumFewRows(rows)
	}
	return sumRankedRows(rows)
}

// sumRankedRows is sumRows for many rows.
func sumRankedRows(rows []typeRow) []*queryv1.TypeUsage {
	rank := groupRanks(rows)
	type sortKey struct {
		rank int
		typ  string
		row  *typeRow
	}
	keys := make([]sortKey, len(rows))
	last, lastRank := rows[0].group, rank[rows[0].group]
	for i := range rows {
		r := &rows[i]
		if r.group != last {
			last, lastRank = r.group, rank[r.group]
		}
		keys[i] = sortKey{rank: lastRank, typ: r.typ, row: r}
	}
	slices.SortFunc(keys, func(a, b sortKey) int {
		if a.rank != b.rank {
			return cmp.Compare(a.rank, b.rank)
		}
		return strings.Compare(a.typ, b.typ)
	})
	out := make([]*queryv1.TypeUsage, 0, len(rows))
	backing := make([]queryv1.TypeUsage, len(rows))
	for i := 0; i < len(keys); {
		sum := *keys[i].row
		j := i + 1
		for ; j < len(keys) && keys[j].rank == keys[i].rank && keys[j].typ == keys[i].typ; j++ {
			sum.add(keys[j].row)
		}
		u := &backing[len(out)]
		sum.fill(u)
		out = append(out, u)
		i = j
	}
	return out
}

// smallRows is the most rows sumFewRows sums: a cluster's matching types,
// a handful, are sorted by name without ranking their groups in a map.
const smallRows = 32

// sumFewRows is sumRows for a few rows: the same sums in the same order
// (group, then type, by name).
func sumFewRows(rows []typeRow) []*queryv1.TypeUsage {
	var buf [smallRows]*typeRow
	sorted := buf[:0]
	for i := range rows {
		sorted = append(sorted, &rows[i])
	}
	slices.SortFunc(sorted, func(a, b *typeRow) int { return compareRows(*a, *b) })
	out := make([]*queryv1.TypeUsage, 0, len(rows))
	backing := make([]queryv1.TypeUsage, len(rows))
	for i := 0; i < len(sorted); {
		sum := *sorted[i]
		j := i + 1
		for ; j < len(sorted) && sorted[j].group == sum.group && sorted[j].typ == sum.typ; j++ {
			sum.add(sorted[j])
		}
		u := &backing[len(out)]
		sum.fill(u)
		out = append(out, u)
		i = j
	}
	return out
}

func compareRows(a, b typeRow) int {
	return cmp.Or(strings.Compare(a.group, b.group), strings.Compare(a.typ, b.typ))
}

// mergeRows merges two lists sorted by group and type, with one row per
// key, summing the rows of a key both hold.
func mergeRows(a, b []typeRow) []typeRow {
	out := make([]typeRow, 0, max(len(a), len(b)))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch c := compareRows(a[i], b[j]); {
		case c < 0:
			out = append(out, a[i])
			i++
		case c > 0:
			out = append(out, b[j])
			j++
		default:
			sum := a[i]
			sum.maximum += b[j].maximum
			sum.reserved += b[j].reserved
			sum.used += b[j].used
			sum.waiting += b[j].waiting
			sum.queued += b[j].queued
			sum.held += b[j].held
			sum.free += b[j].free
			out = append(out, sum)
			i++
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// rowsOfUsage is the rows of a summed list.
func rowsOfUsage(list []*queryv1.TypeUsage) []typeRow {
	rows := make([]typeRow, len(list))
	for i, u := range list {
		rows[i] = rowOfUsage(u)
	}
	return rows
}

// usageOfRows turns rows with one row per key into TypeUsages, saturated
// into int32, with one allocation for all of them: a cluster may have tens
// of thousands of types.
func usageOfRows(rows []typeRow) []*queryv1.TypeUsage {
	out := make([]*queryv1.TypeUsage, len(rows))
	backing := make([]queryv1.TypeUsage, len(rows))
	for i := range rows {
		rows[i].fill(&backing[i])
		out[i] = &backing[i]
	}
	return out
}

// fill sets u to the row's figures, saturated into int32.
// add adds o's units to r's.
func (r *typeRow) add(o *typeRow) {
	r.maximum += o.maximum
	r.reserved += o.reserved
	r.used += o.used
	r.waiting += o.waiting
	r.queued += o.queued
	r.unplaceable += o.unplaceable
	r.held += o.held
	r.free += o.free
}

// fill writes r into u, each figure saturated to the protocol's int32.
func (r *typeRow) fill(u *queryv1.TypeUsage) {
	u.Group, u.Type = r.group, r.typ
	u.Maximum, u.Reserved, u.Used = saturate(r.maximum), saturate(r.reserved), saturate(r.used)
	u.Waiting, u.Queued, u.Held, u.Free = saturate(r.waiting), saturate(r.queued), saturate(r.held), saturate(r.free)
	u.Unplaceable = saturate(r.unplaceable)
}

// groupRanks numbers the distinct groups of rows in name order.
func groupRanks(rows []typeRow) map[string]int {
	rank := map[string]int{}
	last := ""
	for i, r := range rows {
		if i > 0 && r.group == last {
			continue
		}
		last = r.group
		rank[r.group] = 0
	}
	groups := make([]string, 0, len(rank))
	for g := range rank {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	for i, g := range groups {
		rank[g] = i
	}
	return rank
}

// StateMessage says why c is not Available in the query API: empty when it
// is.
func StateMessage(c *store.Cluster, now time.Time) string {
	switch {
	case c.State != store.StateAvailable:
		return OfflineMessage(c, now)
	case c.Restored:
		return "figures read back from the hub cluster, not confirmed by the spoke since this hub replica started"
	case c.Outdated != "":
		return "figures older than the cluster's: " + c.Outdated
	default:
		return c.APIServerUnreachableMessage()
	}
}

// OfflineMessage says since when a cluster is offline, e.g. "offline since
// 3m (last heartbeat 2024-05-01T10:00:00Z)".
func OfflineMessage(c *store.Cluster, now time.Time) string {
	if c.LastHeartbeat.IsZero() {
		return "offline: has not reported to this hub since it started"
	}
	return fmt.Sprintf("offline since %s (last heartbeat %s)", age(c.LastHeartbeat, now), c.LastHeartbeat.UTC().Format(time.RFC3339))
}

func age(t, now time.Time) string {
	if t.IsZero() {
		return "an unknown time"
	}
	return duration.HumanDuration(now.Sub(t))
}

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
