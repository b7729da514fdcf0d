package controller

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"strings"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// MaxNominated is the most names Kueue v0.17.0 accepts in
// status.nominatedClusterNames (MaxItems=20).
const MaxNominated = 20

// Worker is a MultiKueueCluster of the workload's MultiKueueConfig and the
// name the hub knows its cluster by.
type Worker struct {
	// Name is the MultiKueueCluster's name, what Kueue reads in the list.
	Name string
	// HubCluster is the cluster's name in the hub.
	HubCluster string
}

// Answer is the hub's FindCapacity answer to one demand.
type Answer struct {
	Demand   Demand
	Response *queryv1.FindCapacityResponse
}

// Decision is what the dispatcher writes for a workload.
type Decision struct {
	// Nominate are the MultiKueueClusters to nominate, best first; empty
	// when the workload fits nowhere now.
	Nominate []string
	// Write is true when Nominate differs from the current list.
	Write bool
	// Reason says, when Nominate is empty, why no worker fits.
	Reason string
}

// Decide nominates the workers where every demand fits now, all at once
// (fitTogether), in the order of the hub's ranking of the first (largest)
// demand, at most limit of them.
// A current nomination is kept as long as each of its workers still fits,
// so that Kueue does not delete and recreate remote copies for a change of
// rank; it is replaced as soon as one of them stops fitting (full, Offline,
// Stale, gone from the fleet).
func Decide(answers []Answer, workers []Worker, current []string, limit int) Decision {
	if limit < 1 || limit > MaxNominated {
		limit = MaxNominated
	}
	fitsAll := fitTogether(answers)
	var ranked []string // hub clusters, best first
	if len(answers) > 0 {
		for _, c := range answers[0].Response.GetCandidates() {
			ranked = append(ranked, c.GetCluster())
		}
	}
	byHub := map[string][]string{}
	for _, w := range workers {
		byHub[w.HubCluster] = append(byHub[w.HubCluster], w.Name)
	}
	var fitting []string
	for _, hub := range ranked {
		if !fitsAll[hub] {
			continue
		}
		names := slices.Clone(byHub[hub])
		slices.Sort(names)
		fitting = append(fitting, names...)
	}
	if len(current) > 0 && allIn(current, fitting) {
		return Decision{Nominate: current}
	}
	if len(fitting) > limit {
		fitting = fitting[:limit]
	}
	d := Decision{Nominate: fitting, Write: !slices.Equal(fitting, current)}
	if len(fitting) == 0 {
		d.Reason = noFitReason(answers, workers)
	}
	return d
}

// maxChoiceDemands bounds the demands of one workload that have a choice of
// machine types in a cluster (shapes, a type the hub matches in several
// groups) and that fitTogether checks exactly: it looks at every subset of
// them, 2^n. Kueue allows at most 8 pod sets per workload, so a workload
// never has more; beyond it, fitTogether falls back to taking them in turn,
// each from its matching types with the most units left (never wrong when it
// says "fits", but it may miss a fit).
const maxChoiceDemands = 12

// fitTogether returns the hub clusters where all the demands fit at the same
// time. Each demand is a separate FindCapacity answer, and every answer
// shows a cluster's free units as if nothing else of the workload took any:
// two demands served by the same machine type (a type and a shape it
// satisfies, two shapes, a type named with and without its group) would
// each be checked against the same units. So a cluster fits when its free
// units per machine type (the candidates' types, group/type as the hub sums
// them, each type counted once) can serve every demand at once, a demand
// taking its units from any of the types its candidate lists, split across
// several if need be (see fitsCluster). A candidate without its types (a
// hub that does not send them) counts as a pool of its own for that
// demand's target. A cluster missing from any answer does not fit.
func fitTogether(answers []Answer) map[string]bool {
	order := make([]int, len(answers))
	for i := range order {
		order[i] = i
	}
	// Type demands first: the greedy fallback must let them take their own
	// type before a shape that may use others does.
	slices.SortStableFunc(order, func(x, y int) int {
		return boolRank(answers[x].Demand.Type == "") - boolRank(answers[y].Demand.Type == "")
	})
	demands := make([]Demand, len(order))
	for n, i := range order {
		demands[n] = answers[i].Demand
	}
	cands := map[string][]*queryv1.CapacityCandidate{} // hub cluster -> its candidate per demand, in order
	for n, i := range order {
		for _, c := range answers[i].Response.GetCandidates() {
			cluster := c.GetCluster()
			if len(cands[cluster]) != n {
				continue // missing from an earlier answer, or a duplicate candidate
			}
			cands[cluster] = append(cands[cluster], c)
		}
	}
	fits := map[string]bool{}
	for cluster, cs := range cands {
		if len(cs) == len(demands) && fitsCluster(demands, cs) {
			fits[cluster] = true
		}
	}
	return fits
}

// fitsCluster says whether demands fit together in one cluster, demand i
// served by the types of candidate cs[i]. A demand with a single type takes
// its units from it; the demands with a choice of types then fit exactly
// when, for every set S of them, the units S wants are at most the free
// units left of all the types S may use (Hall's condition, which is exact
// for demands that may split across types: a transportation problem), at
// most 2^maxChoiceDemands sets. With more, they are taken in turn instead,
// each from its types with the most units left first.
func fitsCluster(demands []Demand, cs []*queryv1.CapacityCandidate) bool {
	pool := map[string]int64{} // type key -> free units left
	keys := make([][]string, len(demands))
	for i, d := range demands {
		keys[i] = poolKeys(d, cs[i], pool)
	}
	var choice []int
	for i, d := range demands {
		need := int64(max(d.Count, 0))
		switch len(keys[i]) {
		case 0:
			if need > 0 {
				return false
			}
		case 1:
			pool[keys[i][0]] -= need
			if pool[keys[i][0]] < 0 {
				return false
			}
		default:
			choice = append(choice, i)
		}
	}
	if len(choice) > maxChoiceDemands {
		return takeInTurn(demands, keys, choice, pool)
	}
	index := map[string]int{} // type key -> position in free
	var free []int64
	uses := make([][]int, len(choice)) // choice demand -> positions of its types
	for j, i := range choice {
		for _, k := range keys[i] {
			p, ok := index[k]
			if !ok {
				p = len(free)
				index[k] = p
				free = append(free, pool[k])
			}
			uses[j] = append(uses[j], p)
		}
	}
	// Each set is the set without its lowest member plus that member: its
	// units wanted, its types (a bit set) and their free units follow from
	// the smaller set's.
	words := (len(free) + 63) / 64
	sets := 1 << len(choice)
	want := make([]int64, sets)
	have := make([]int64, sets)
	types := make([]uint64, sets*words)
	for set := 1; set < sets; set++ {
		j := bits.TrailingZeros(uint(set))
		prev := set &^ (1 << j)
		want[set] = want[prev] + int64(max(demands[choice[j]].Count, 0))
		have[set] = have[prev]
		mask := types[set*words : (set+1)*words]
		copy(mask, types[prev*words:(prev+1)*words])
		for _, p := range uses[j] {
			if mask[p/64]&(1<<(p%64)) == 0 {
				mask[p/64] |= 1 << (p % 64)
				have[set] += free[p]
			}
		}
		if want[set] > have[set] {
			return false
		}
	}
	return true
}

// takeInTurn takes the choice demands in order, each from its types with the
// most units left first, and says whether each found its units.
func takeInTurn(demands []Demand, keys [][]string, choice []int, pool map[string]int64) bool {
	for _, i := range choice {
		ks := slices.Clone(keys[i])
		var total int64
		for _, k := range ks {
			total += pool[k]
		}
		need := int64(max(demands[i].Count, 0))
		if total < need {
			return false
		}
		slices.SortStableFunc(ks, func(x, y string) int { return cmp.Compare(pool[y], pool[x]) })
		for _, k := range ks {
			take := min(pool[k], need)
			pool[k] -= take
			need -= take
		}
	}
	return true
}

// poolKeys are the keys of pool that candidate c offers demand d, adding
// those seen for the first time with the candidate's free units.
func poolKeys(d Demand, c *queryv1.CapacityCandidate, pool map[string]int64) []string {
	if len(c.GetTypes()) == 0 {
		k := d.key()
		if _, ok := pool[k]; !ok {
			pool[k] = int64(max(c.GetFree(), 0))
		}
		return []string{k}
	}
	var keys []string
	for _, t := range c.GetTypes() {
		k := Demand{Group: t.GetGroup(), Type: t.GetType()}.key()
		if slices.Contains(keys, k) {
			continue
		}
		if _, ok := pool[k]; !ok {
			pool[k] = int64(max(t.GetFree(), 0))
		}
		keys = append(keys, k)
	}
	return keys
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

func allIn(names, set []string) bool {
	for _, n := range names {
		if !slices.Contains(set, n) {
			return false
		}
	}
	return true
}

// noFitReason says, worker by worker, why the workload fits on none:
// "no worker cluster has room for 4 units of h100/compute-xlarge now:
// spoke-a: only 2 free; spoke-b: offline since 3m0s".
func noFitReason(answers []Answer, workers []Worker) string {
	var demands []Demand
	for _, a := range answers {
		demands = append(demands, a.Demand)
	}
	head := "no worker cluster has room for " + describe(demands) + " now"
	if len(workers) == 0 {
		return head + ": the MultiKueueConfig names no MultiKueueCluster"
	}
	var parts []string
	for _, w := range workers {
		parts = append(parts, w.Name+": "+whyNot(answers, w.HubCluster))
	}
	return head + ": " + strings.Join(parts, "; ")
}

// whyNot is why hubCluster cannot take every demand.
func whyNot(answers []Answer, hubCluster string) string {
	for _, a := range answers {
		if slices.ContainsFunc(a.Response.GetCandidates(), func(c *queryv1.CapacityCandidate) bool { return c.GetCluster() == hubCluster }) {
			continue
		}
		i := slices.IndexFunc(a.Response.GetExcluded(), func(e *queryv1.Exclusion) bool { return e.GetCluster() == hubCluster })
		if i < 0 {
			return fmt.Sprintf("the hub knows no cluster %q", hubCluster)
		}
		e := a.Response.GetExcluded()[i]
		switch e.GetReason() {
		case queryv1.ExclusionReason_EXCLUSION_REASON_NOT_ENOUGH:
			return fmt.Sprintf("%d free of the %d wanted (%s)", e.GetFree(), a.Demand.Count, a.Demand)
		case queryv1.ExclusionReason_EXCLUSION_REASON_NO_SUCH_TYPE:
			return "no machine type for " + a.Demand.String()
		}
		if e.GetMessage() != "" {
			return e.GetMessage()
		}
		return strings.ToLower(strings.TrimPrefix(e.GetReason().String(), "EXCLUSION_REASON_"))
	}
	return "fits"
}
