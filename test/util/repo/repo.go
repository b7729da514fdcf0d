// Package repo locates the repository a test runs in, so that suites find
// deploy/, the samples, the binaries and the pinned tools wherever their
// package lives.
package repo

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Root returns the directory of go.mod, found upwards from the working
// directory (a test's working directory is its package directory).
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("finding the repository root: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Tool returns the path of a pinned developer tool (kustomize, …), built into
// the tool cache by hack/tools.sh if it is not there yet: the one way a suite
// finds a tool, so that it works on a machine whose cache is empty.
func Tool(name string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(root, "hack", "tools.sh"), "path", name)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building %s with hack/tools.sh: %w: %s", name, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return string(bytes.TrimSpace(out)), nil
}
