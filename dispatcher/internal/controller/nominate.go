package controller

import (
	"fmt"
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

// fitTogether returns the hub clusters where all the demands fit at the same
// time. Each demand is a separate FindCapacity answer, and every answer
// shows a cluster's free units as if nothing else of the workload took any:
// two demands served by the same machine type (a type and a shape it
// satisfies, two shapes, a type named with and without its group) would
// each be checked against the same units. So the demands are taken in turn
// from one pool per cluster of free units per machine type (the candidate's
// types, group/type as the hub sums them), each taking what it uses before
// the next is checked; a shape takes from its matching types with the most
// units left first, as the hub places it. Type demands go first: they can
// use only their own type, while a shape may use what they leave. A
// candidate without its types (a hub that does not send them) counts as a
// pool of its own for that demand's target.
func fitTogether(answers []Answer) map[string]bool {
	order := make([]int, len(answers))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int {
		return boolRank(answers[x].Demand.Type == "") - boolRank(answers[y].Demand.Type == "")
	})
	left := map[string]map[string]int32{} // hub cluster -> type key -> free units left
	met := map[string]int{}               // hub cluster -> demands taken so far
	for n, i := range order {
		a := answers[i]
		for _, c := range a.Response.GetCandidates() {
			cluster := c.GetCluster()
			if met[cluster] != n {
				continue // an earlier demand did not fit (or a duplicate candidate)
			}
			pool := left[cluster]
			if pool == nil {
				pool = map[string]int32{}
				left[cluster] = pool
			}
			keys := poolKeys(a.Demand, c, pool)
			var total int64
			for _, k := range keys {
				total += int64(pool[k])
			}
			if total < int64(a.Demand.Count) {
				continue
			}
			slices.SortStableFunc(keys, func(x, y string) int { return int(pool[y]) - int(pool[x]) })
			need := a.Demand.Count
			for _, k := range keys {
				take := min(pool[k], need)
				pool[k] -= take
				need -= take
			}
			met[cluster] = n + 1
		}
	}
	fits := map[string]bool{}
	for cluster, n := range met {
		if n == len(answers) {
			fits[cluster] = true
		}
	}
	return fits
}

// poolKeys are the keys of pool that candidate c offers demand d, adding
// those seen for the first time with the candidate's free units.
func poolKeys(d Demand, c *queryv1.CapacityCandidate, pool map[string]int32) []string {
	if len(c.GetTypes()) == 0 {
		k := d.key()
		if _, ok := pool[k]; !ok {
			pool[k] = max(c.GetFree(), 0)
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
			pool[k] = max(t.GetFree(), 0)
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
