package holds

import (
	"fmt"
	"strings"
	"time"

	"github.com/imperator-federation/imperator/hub/internal/capacity"
	"github.com/imperator-federation/imperator/hub/internal/store"
)

// part is what one cluster is asked to hold: count units of one machine
// type. A CapacityHold names one type, and its name (the fleet hold's) is
// unique in its cluster, so a cluster holds at most one type of a fleet hold.
type part struct {
	cluster, group, typ string
	count               int32
}

// plan places req.Count units with FindCapacity's ranking: candidates most
// free first, each taking units of its matching type with the most free
// units. SAME_CLUSTER takes the first cluster whose best type has count free
// units; SPREAD takes from each cluster in order until count is covered. It
// returns the parts, or why the units do not fit.
func plan(clusters []*store.Cluster, req capacity.Request, now time.Time) ([]part, string) {
	found := capacity.Find(clusters, req, now)
	remaining := req.Count
	var parts []part
	for _, cand := range found.Candidates {
		if remaining == 0 {
			break
		}
		if len(cand.GetTypes()) == 0 {
			continue
		}
		best := cand.GetTypes()[0]
		if !req.Spread {
			if best.GetFree() < req.Count {
				continue
			}
			return []part{{cluster: cand.GetCluster(), group: best.GetGroup(), typ: best.GetType(), count: req.Count}}, ""
		}
		take := min(best.GetFree(), remaining)
		parts = append(parts, part{cluster: cand.GetCluster(), group: best.GetGroup(), typ: best.GetType(), count: take})
		remaining -= take
	}
	if remaining == 0 && len(parts) > 0 {
		return parts, ""
	}
	var why []string
	if req.Spread {
		why = append(why, fmt.Sprintf("%d of %d units fit across the fleet", req.Count-remaining, req.Count))
	} else {
		why = append(why, fmt.Sprintf("no cluster has %d free units of one machine type", req.Count))
	}
	for _, ex := range found.GetExcluded() {
		why = append(why, fmt.Sprintf("%s: %s", ex.GetCluster(), ex.GetMessage()))
	}
	return nil, strings.Join(why, "; ")
}
