package holds

import (
	"fmt"
	"strings"
	"time"

	"github.com/imperator-federation/imperator/internal/text"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// A part's life, as FleetHoldCluster.Result says it:
//
//	""        asked, not answered yet (the Deliverer of the replica holding
//	          the spoke's stream sends it, again after a reconnect)
//	Held      the spoke holds it
//	Refused   the spoke holds nothing (it said why, or cannot hold at all)
//	TimedOut  no answer by the deadline: the spoke may hold it, so it is
//	          released like a held part
//	Released  the spoke confirmed that it holds nothing of this booking
//
// A part is released (asked to release until a spoke confirms it, or until
// validUntil, when the spoke's own CapacityHold ends anyway) while its
// hold is Failed or Released and the part is Held, TimedOut or unanswered.

// decide moves a Pending hold to Held when every part is Held, to Failed as
// soon as a part is Refused or TimedOut, or when the deadline passed with
// parts unanswered (those become TimedOut; NotConnected when no replica has
// the spoke's stream). It reports whether the hold is decided (a hold
// already past Pending is); undecided holds are left as they were.
func decide(fh *imperatorv1alpha1.FleetHold, deadlinePassed bool, connectedNowhere func(cluster string) bool) bool {
	if fh.Status.Phase != imperatorv1alpha1.FleetHoldPending && fh.Status.Phase != "" {
		return true
	}
	held, failed := 0, false
	for _, cl := range fh.Status.Clusters {
		switch cl.Result {
		case ResultHeld:
			held++
		case ResultRefused, ResultTimedOut, ResultReleased:
			failed = true
		}
	}
	switch {
	case held == len(fh.Status.Clusters) && held > 0:
		fh.Status.Phase = imperatorv1alpha1.FleetHoldHeld
		return true
	case !failed && !deadlinePassed:
		return false
	}
	var reasons []string
	for i := range fh.Status.Clusters {
		cl := &fh.Status.Clusters[i]
		if cl.Result == "" && deadlinePassed {
			cl.Result, cl.Reason, cl.Message = ResultTimedOut, ReasonNoAnswer, "the spoke did not answer in time"
			if connectedNowhere(cl.Cluster) {
				cl.Reason, cl.Message = ReasonNotConnected, "no hub replica has the spoke's Report stream"
			}
		}
		switch cl.Result {
		case ResultHeld:
			cl.Reason, cl.Message = ReasonOtherFailed, "held, then released because another cluster could not hold its part"
		case ResultRefused, ResultTimedOut:
			reasons = append(reasons, fmt.Sprintf("%s: %s: %s", cl.Cluster, cl.Reason, cl.Message))
		}
	}
	fh.Status.Phase = imperatorv1alpha1.FleetHoldFailed
	fh.Status.Message = text.Truncate("not every cluster could hold its part, nothing is held: "+strings.Join(reasons, "; "), 4096)
	return true
}

// delivery is what a part needs sent to its spoke now.
type delivery int

const (
	deliverNothing delivery = iota
	deliverHold
	deliverRelease
)

// deliveryOf says what cl, a part of fh, needs sent at now.
func deliveryOf(fh *imperatorv1alpha1.FleetHold, cl imperatorv1alpha1.FleetHoldCluster, now time.Time) delivery {
	switch fh.Status.Phase {
	case imperatorv1alpha1.FleetHoldPending:
		if cl.Result == "" {
			return deliverHold
		}
	case imperatorv1alpha1.FleetHoldFailed, imperatorv1alpha1.FleetHoldReleased:
		if releasable(cl) && now.Before(fh.Spec.ValidUntil.Time) {
			return deliverRelease
		}
	}
	return deliverNothing
}

// releasable: the spoke may hold the part.
func releasable(cl imperatorv1alpha1.FleetHoldCluster) bool {
	return cl.Result == "" || cl.Result == ResultHeld || cl.Result == ResultTimedOut
}

// unreleased names the clusters that may still hold a part of an ended
// hold fh at now (none once validUntil passed: their CapacityHolds ended).
func unreleased(fh *imperatorv1alpha1.FleetHold, now time.Time) []string {
	var out []string
	for _, cl := range fh.Status.Clusters {
		if deliveryOf(fh, cl, now) == deliverRelease {
			out = append(out, cl.Cluster)
		}
	}
	return out
}
