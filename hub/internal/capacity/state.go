package capacity

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/imperator-federation/imperator/hub/internal/store"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// StateOf is the query-API state of a cluster.
func StateOf(c *store.Cluster) queryv1.ClusterState {
	switch {
	case c.Liveness != store.LivenessAvailable:
		return queryv1.ClusterState_CLUSTER_STATE_OFFLINE
	case c.Stale():
		return queryv1.ClusterState_CLUSTER_STATE_STALE
	default:
		return queryv1.ClusterState_CLUSTER_STATE_AVAILABLE
	}
}

// StateMessage says why c is not Available in the query API: empty when it
// is.
func StateMessage(c *store.Cluster, now time.Time) string {
	switch {
	case c.Liveness != store.LivenessAvailable:
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
