package repo

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// BinDirEnv names the directory of binaries already built (make build's
// bin/) that Binaries takes instead of building them again.
const BinDirEnv = "IMPERATOR_BIN_DIR"

// binaryPackages maps each binary a suite may run to its main package.
var binaryPackages = map[string]string{
	"hub":          "./hub",
	"spoke":        "./spoke",
	"imperatorctl": "./cmd/imperatorctl",
	"dispatcher":   "./dispatcher",
}

// versionVariable is the variable internal/version reads a release from.
const versionVariable = "github.com/imperator-federation/imperator/internal/version.version"

// Binaries returns the directory holding the named binaries (hub, spoke,
// imperatorctl, dispatcher): $IMPERATOR_BIN_DIR when it holds every one of
// them, otherwise dir, into which one `go build` puts them all. The one way a
// suite gets our binaries.
func Binaries(ctx context.Context, dir string, names ...string) (string, error) {
	packages, err := mainPackages(names)
	if err != nil {
		return "", err
	}
	if prebuilt := os.Getenv(BinDirEnv); prebuilt != "" && holdsAll(prebuilt, names) {
		// Said on every use: binaries older than the checkout would test
		// old code without a word.
		fmt.Fprintf(os.Stderr, "repo: %s from %s=%s, not built from this checkout\n", strings.Join(names, ", "), BinDirEnv, prebuilt)
		return prebuilt, nil
	}
	return dir, build(ctx, dir, nil, packages)
}

// BinariesOfVersion builds the named binaries into dir as release version
// (what `imperatorctl version` and the hub's Hello report), for a suite that
// runs a release other than the one under test. It never takes
// $IMPERATOR_BIN_DIR's binaries, which carry make build's version.
func BinariesOfVersion(ctx context.Context, dir, version string, names ...string) (string, error) {
	if version == "" {
		return "", fmt.Errorf("building %s: empty version", strings.Join(names, ", "))
	}
	packages, err := mainPackages(names)
	if err != nil {
		return "", err
	}
	return dir, build(ctx, dir, []string{"-ldflags", "-X " + versionVariable + "=" + version}, packages)
}

// mainPackages returns the main packages of names, or an error naming the
// first unknown one.
func mainPackages(names []string) ([]string, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("building binaries: no binary named (known: %s)", knownBinaries())
	}
	packages := make([]string, 0, len(names))
	for _, name := range names {
		pkg, ok := binaryPackages[name]
		if !ok {
			return nil, fmt.Errorf("building binaries: unknown binary %q (known: %s)", name, knownBinaries())
		}
		packages = append(packages, pkg)
	}
	return packages, nil
}

func knownBinaries() string {
	known := make([]string, 0, len(binaryPackages))
	for name := range binaryPackages {
		known = append(known, name)
	}
	sort.Strings(known)
	return strings.Join(known, ", ")
}

// holdsAll reports whether dir holds an executable regular file for every
// name.
func holdsAll(dir string, names []string) bool {
	for _, name := range names {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

// build runs one `go build` of packages into dir, from the repository root.
func build(ctx context.Context, dir string, flags, packages []string) error {
	root, err := Root()
	if err != nil {
		return err
	}
	args := append([]string{"build"}, flags...)
	args = append(args, "-o", dir+string(filepath.Separator))
	args = append(args, packages...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building %s: %w: %s", strings.Join(packages, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}
