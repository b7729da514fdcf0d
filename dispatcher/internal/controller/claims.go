package controller

import (
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/types"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// Claim is what a nomination takes from the hub's figures until they show
// it: the demands of a workload on the hub clusters it was nominated to.
// Between the nomination and the moment the remote copy's pods hold their
// units the hub still shows those units free; without claims a burst of
// workloads is nominated to the same last units.
type Claim struct {
	HubClusters []string
	Demands     []Demand
}

// ApplyClaims returns answers with the units of claims taken from the
// candidates' free units (for the same target only): a candidate left with
// fewer free units than its demand counts moves to the exclusions as
// NOT_ENOUGH, and the candidates are ranked again, most free first.
func ApplyClaims(answers []Answer, claims []Claim) []Answer {
	if len(claims) == 0 {
		return answers
	}
	out := make([]Answer, len(answers))
	for i, a := range answers {
		taken := map[string]int32{}
		for _, c := range claims {
			for _, d := range c.Demands {
				if d.key() != a.Demand.key() {
					continue
				}
				for _, hub := range c.HubClusters {
					taken[hub] += d.Count
				}
			}
		}
		resp := &queryv1.FindCapacityResponse{Count: a.Response.GetCount(), Excluded: slices.Clone(a.Response.GetExcluded())}
		for _, cand := range a.Response.GetCandidates() {
			free := cand.GetFree() - taken[cand.GetCluster()]
			if free < a.Demand.Count {
				resp.Excluded = append(resp.Excluded, &queryv1.Exclusion{Cluster: cand.GetCluster(),
					Reason: queryv1.ExclusionReason_EXCLUSION_REASON_NOT_ENOUGH, Free: max(free, 0),
					Message: "units nominated to other workloads not running yet", ObservedAt: cand.GetObservedAt()})
				continue
			}
			resp.Candidates = append(resp.Candidates, &queryv1.CapacityCandidate{Cluster: cand.GetCluster(), Free: free,
				Take: cand.GetTake(), Types: takeFromTypes(cand.GetTypes(), taken[cand.GetCluster()]), ObservedAt: cand.GetObservedAt()})
		}
		slices.SortStableFunc(resp.Candidates, func(x, y *queryv1.CapacityCandidate) int {
			if x.GetFree() != y.GetFree() {
				return int(y.GetFree()) - int(x.GetFree())
			}
			return strings.Compare(x.GetCluster(), y.GetCluster())
		})
		resp.Satisfiable = len(resp.Candidates) > 0
		out[i] = Answer{Demand: a.Demand, Response: resp}
	}
	return out
}

// takeFromTypes returns copies of a candidate's types with n units taken,
// from the types with the most free units first (as the hub places them),
// so that the types still add up to the candidate's free units; types left
// with none are dropped, as the hub lists only types with free units.
func takeFromTypes(types []*queryv1.TypeUsage, n int32) []*queryv1.TypeUsage {
	if n <= 0 || len(types) == 0 {
		return types
	}
	out := make([]*queryv1.TypeUsage, 0, len(types))
	for _, t := range types {
		out = append(out, proto.CloneOf(t))
	}
	slices.SortStableFunc(out, func(x, y *queryv1.TypeUsage) int { return int(y.GetFree()) - int(x.GetFree()) })
	for _, t := range out {
		take := min(t.GetFree(), n)
		t.Free -= take
		n -= take
	}
	return slices.DeleteFunc(out, func(t *queryv1.TypeUsage) bool { return t.GetFree() <= 0 })
}

// claims are the dispatcher's nominations whose units the hub may not show
// taken yet: a workload's claim lasts while it is nominated and not placed,
// and for the placement grace after Kueue placed it (its pods take the
// units within it); it ends at once when the workload finishes or goes.
type claims struct {
	grace time.Duration
	mu    sync.Mutex
	m     map[types.NamespacedName]*heldClaim
}

type heldClaim struct {
	Claim
	placedAt time.Time // zero while not placed
}

func newClaims(grace time.Duration) *claims {
	return &claims{grace: grace, m: map[types.NamespacedName]*heldClaim{}}
}

// set records key's claim (replacing any).
func (c *claims) set(key types.NamespacedName, claim Claim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[key] = &heldClaim{Claim: claim}
}

// placed starts the grace of key's claim, once.
func (c *claims) placed(key types.NamespacedName, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, ok := c.m[key]; ok && h.placedAt.IsZero() {
		h.placedAt = now
	}
}

// drop ends key's claim.
func (c *claims) drop(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}

// others are the live claims of every workload but key, and when the
// earliest of them ends (zero when none is placed); expired claims are
// forgotten.
func (c *claims) others(key types.NamespacedName, now time.Time) ([]Claim, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Claim
	var next time.Time
	for k, h := range c.m {
		if !h.placedAt.IsZero() {
			end := h.placedAt.Add(c.grace)
			if !now.Before(end) {
				delete(c.m, k)
				continue
			}
			if next.IsZero() || end.Before(next) {
				next = end
			}
		}
		if k != key {
			out = append(out, h.Claim)
		}
	}
	return out, next
}
