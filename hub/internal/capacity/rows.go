package capacity

import (
	"cmp"
	"slices"
	"strings"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

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
