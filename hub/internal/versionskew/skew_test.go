package versionskew

import (
	"strings"
	"testing"
)

// TestUnsupported: the skew policy of docs/upgrading.md, which the hub
// logs when a spoke's Hello is outside it and shows in ListClusters.
func TestUnsupported(t *testing.T) {
	for _, c := range []struct {
		hub, agent string
		// want is a part of the warning; "" for none.
		want string
	}{
		{"v0.2.0", "v0.2.0", ""},
		{"v0.2.3", "v0.2.0", ""},
		{"v0.2.0", "v0.2.5", ""},
		{"v0.2.0", "v0.1.4", ""},
		{"v0.3.0-rc.1", "v0.2.0", ""},
		{"v0.2.0", "v0.3.0", "upgrade the hub first"},
		{"v0.2.0", "v0.3.0-rc.1", "upgrade the hub first"},
		{"v0.3.0", "v0.1.9", "more than one minor version older than hub v0.3.0; upgrade the agent to v0.2 or v0.3"},
		{"v1.0.0", "v0.9.0", "different major versions"},
		{"v1.0.0", "v2.0.0", "different major versions"},
		// Not releases: development builds are not held to the policy.
		{"(devel)", "v0.1.0", ""},
		{"v0.3.0", "", ""},
		{"v0.3.0", "my-build", ""},
		{"v0.3.0", "0.1.0", ""},
		{"v0.0.0-20260101120000-0123456789ab", "v0.9.0", ""},
		{"v0.5.0", "v0.1.1-0.20260101120000-0123456789ab", ""},
		{"v0.5.0", "v0.1.1-0.20260101120000-0123456789ab+dirty", ""},
	} {
		got := Unsupported(c.hub, c.agent)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("hub %q, agent %q: %q, want %q", c.hub, c.agent, got, c.want)
		}
	}
}
