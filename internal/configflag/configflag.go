// Package configflag holds what the hub's and the agent's configurations
// read the same way: the namespace they run in, from the downward API, and
// comma-separated flag values.
package configflag

import (
	"os"
	"strings"
)

// DefaultNamespace is the namespace of the deploy/ manifests.
const DefaultNamespace = "imperator-system"

// PodNamespace is $POD_NAMESPACE (the downward API sets it in the
// manifests), else DefaultNamespace.
func PodNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return DefaultNamespace
}

// SplitList splits a comma-separated flag value, trimming spaces and
// dropping empty items: "a, b,,c" is [a b c].
func SplitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
