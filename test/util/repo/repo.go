// Package repo locates the repository a test runs in, so that suites find
// deploy/, the samples and the binaries wherever their package lives.
package repo

import (
	"errors"
	"fmt"
	"os"
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
