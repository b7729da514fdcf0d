package version

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFromBuildInfo(t *testing.T) {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	stamped := &debug.BuildInfo{
		Main:     debug.Module{Path: "github.com/imperator-federation/imperator", Version: "v0.0.0-20261123224100-a210121abcde+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "a210121abcdef"}},
	}
	cases := map[string]struct {
		linked, commit string
		bi             *debug.BuildInfo
		want           Info
	}{
		"a release build says the linked version": {
			linked: "v1.2.3", bi: stamped,
			want: Info{Version: "v1.2.3", GitCommit: "a210121abcdef", GoVersion: runtime.Version(), Platform: platform},
		},
		"a source build says Go's pseudo-version of the commit": {
			bi:   stamped,
			want: Info{Version: "v0.0.0-20261123224100-a210121abcde+dirty", GitCommit: "a210121abcdef", GoVersion: runtime.Version(), Platform: platform},
		},
		"a build with -buildvcs=false says the linked commit": {
			linked: "v1.2.3", commit: "0123456789ab", bi: &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			want: Info{Version: "v1.2.3", GitCommit: "0123456789ab", GoVersion: runtime.Version(), Platform: platform},
		},
		"a binary without build information says (devel)": {
			want: Info{Version: "(devel)", GoVersion: runtime.Version(), Platform: platform},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := fromBuildInfo(tc.linked, tc.commit, func() (*debug.BuildInfo, bool) { return tc.bi, tc.bi != nil })
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("version (-want +got):\n%s", diff)
			}
		})
	}
}
