package capacity

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

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
		case c.Liveness != store.LivenessAvailable:
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
