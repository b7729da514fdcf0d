package holds

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/imperator-federation/imperator/internal/text"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/store"
)

// avoidFor is how long a new hold avoids a spoke after it refused a part
// or did not answer in time: a spoke that reports free units but cannot
// hold them (its API refuses, its agent is stuck) would otherwise fail
// every hold that the ranking puts it in. It is read from the FleetHolds
// themselves (their creation and their parts' results), so every replica
// avoids the same spokes.
const avoidFor = 5 * time.Minute

// notAvoidedReasons are refusals that say nothing about the spoke: the
// name is another booking's there, or the request was bad.
var notAvoidedReasons = []string{"NameTaken", "InvalidRequest"}

// avoided names the clusters that refused a part or did not answer in time
// in a hold created less than avoidFor before now, each with why (the
// latest such part).
func avoided(list []imperatorv1alpha1.FleetHold, now time.Time) map[string]string {
	out := map[string]string{}
	latest := map[string]time.Time{}
	for i := range list {
		fh := &list[i]
		at := fh.CreationTimestamp.Time
		if now.Sub(at) >= avoidFor {
			continue
		}
		for _, cl := range fh.Status.Clusters {
			if cl.Result != ResultRefused && cl.Result != ResultTimedOut || slices.Contains(notAvoidedReasons, cl.Reason) {
				continue
			}
			if at.Before(latest[cl.Cluster]) {
				continue
			}
			latest[cl.Cluster] = at
			out[cl.Cluster] = fmt.Sprintf("%s %s in fleet hold %q %s ago", cl.Result, cl.Reason, fh.Name, now.Sub(at).Round(time.Second))
		}
	}
	return out
}

// without is clusters less the avoided ones.
func without(clusters []*store.Cluster, avoid map[string]string) []*store.Cluster {
	return slices.DeleteFunc(slices.Clone(clusters), func(c *store.Cluster) bool { _, ok := avoid[c.Name]; return ok })
}

// avoidanceNote says which clusters a plan avoided, or that it could not.
func avoidanceNote(avoid map[string]string, fell bool) string {
	if len(avoid) == 0 {
		return ""
	}
	names := make([]string, 0, len(avoid))
	for name := range avoid {
		names = append(names, name)
	}
	slices.Sort(names)
	var parts []string
	for _, name := range names {
		parts = append(parts, name+" ("+avoid[name]+")")
	}
	if fell {
		return text.Truncate("the units fit only with clusters that recently refused or did not answer, so they were asked again: "+strings.Join(parts, "; "), 4096)
	}
	return text.Truncate(fmt.Sprintf("avoiding for %s after a refusal or no answer: ", avoidFor)+strings.Join(parts, "; "), 4096)
}
