// Package version says which build of Imperator a binary is: the version
// (set at link time, else the module version Go stamped into the binary),
// the source commit, the Go toolchain and the platform. imperatorctl prints
// its own and, through the hub's GetVersion call, the hub's.
package version

import (
	"runtime"
	"runtime/debug"
)

// version is set at build time with
// -ldflags "-X github.com/imperator-federation/imperator/internal/version.version=v1.2.3";
// when empty, the module version from the binary's build information is used.
var version string

// commit is set at build time like version (make build and make images set
// both); when empty, the revision Go stamped into the binary is used.
var commit string

// Info describes one build.
type Info struct {
	// Version is the release (v1.2.3), a Go pseudo-version of the commit
	// (v0.0.0-20260101120000-0123456789ab, with +dirty for uncommitted
	// changes) or "(devel)" when Go recorded none.
	Version string `json:"version"`
	// GitCommit is the source revision, when the build recorded it.
	GitCommit string `json:"gitCommit,omitempty"`
	// GoVersion is the toolchain that built the binary.
	GoVersion string `json:"goVersion"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Get returns the build information of the running binary.
func Get() Info {
	return fromBuildInfo(version, commit, debug.ReadBuildInfo)
}

func fromBuildInfo(linked, linkedCommit string, read func() (*debug.BuildInfo, bool)) Info {
	info := Info{Version: linked, GitCommit: linkedCommit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := read()
	if ok {
		if info.Version == "" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && info.GitCommit == "" {
				info.GitCommit = s.Value
			}
		}
	}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	return info
}
