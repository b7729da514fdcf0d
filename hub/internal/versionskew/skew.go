// Package versionskew is the hub↔agent version skew policy of
// docs/upgrading.md: which agent releases a hub release supports. The hub
// server logs an agent outside it when its Hello arrives; the query API
// shows it per cluster (Cluster.version_skew), and imperatorctl flags it.
package versionskew

import (
	"fmt"
	"regexp"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// Unsupported says why an agent of version agent reporting to a hub of
// version hub is outside the skew policy of docs/upgrading.md, or "" when
// it is inside or either is not a release (a development build, a Go
// pseudo-version, free-form text): the policy is about releases. Inside: the
// same major version, the agent's minor equal to the hub's or one below
// (upgrade the hub first, then the agents). The hub logs it when a spoke's
// Hello is outside the policy and ListClusters, Watch and imperatorctl show
// it as the cluster's version_skew.
func Unsupported(hub, agent string) string {
	h, a := releaseVersion(hub), releaseVersion(agent)
	if h == nil || a == nil {
		return ""
	}
	switch {
	case a.Major() != h.Major():
		return fmt.Sprintf("agent %s and hub %s are of different major versions; upgrade both to the same one", agent, hub)
	case a.Minor() > h.Minor():
		return fmt.Sprintf("agent %s is newer than hub %s; upgrade the hub first (an agent may be as new as its hub, not newer)", agent, hub)
	case a.Minor()+1 < h.Minor():
		return fmt.Sprintf("agent %s is more than one minor version older than hub %s; upgrade the agent to v%d.%d or v%d.%d", agent, hub, h.Major(), h.Minor()-1, h.Major(), h.Minor())
	}
	return ""
}

// releaseVersion parses v as a release version vX.Y.Z[-pre], nil for
// anything else, Go pseudo-versions (v0.0.0-20260101120000-0123456789ab)
// included.
func releaseVersion(v string) *utilversion.Version {
	parsed, err := utilversion.ParseSemantic(v)
	if err != nil || len(v) == 0 || v[0] != 'v' {
		return nil
	}
	if pre := parsed.PreRelease(); pseudoVersion.MatchString(pre) {
		return nil
	}
	return parsed
}

// pseudoVersion matches the pre-release part of a Go pseudo-version: a
// timestamp and a commit.
var pseudoVersion = regexp.MustCompile(`(^|\.)[0-9]{14}-[0-9a-f]{12}`)
