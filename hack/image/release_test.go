package main

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"

	"github.com/imperator-federation/imperator/hack/image/internal/publish"
)

// releaseVersion is the version the test releases: a pre-release, so that
// the "-PRE" part of the tag and the chart version is exercised too.
const releaseVersion = "v0.0.1-test.1"

// TestRelease runs the release steps that cost seconds (hack/release.sh
// charts and imperatorctl for this machine's platform) and pushes them, with
// the images `make images` built (IMAGES_DIR), to a registry on 127.0.0.1
// through hack/release.sh push, as `make release` and `make push` do; then
// checks what a user would: the packaged charts render the released tag in
// every image reference, imperatorctl reports the version, the pushed
// indexes are the layouts' and helm pulls the charts back.
func TestRelease(t *testing.T) {
	imagesDir := os.Getenv("IMAGES_DIR")
	if imagesDir == "" {
		t.Skip("IMAGES_DIR is not set: run `make images`, which builds the images and runs this test")
	}
	images := strings.Fields(os.Getenv("IMAGES"))
	if len(images) == 0 {
		t.Fatal("IMAGES lists no image names")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	u, err := url.Parse(reg.URL)
	if err != nil {
		t.Fatal(err)
	}
	registryPath := u.Host + "/imperator"

	out := t.TempDir()
	env := []string{"RELEASE_OUT=" + out, "IMAGE_REGISTRY=" + registryPath, "REGISTRY=" + registryPath,
		"CTL_PLATFORMS=" + runtime.GOOS + "/" + runtime.GOARCH}
	release := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "release.sh"), args...)
		cmd.Env = append(os.Environ(), env...)
		b, err := cmd.CombinedOutput()
		return string(b), err
	}

	t.Run("refuses a version that is not semver", func(t *testing.T) {
		for _, bad := range []string{"", "0.1.0", "v0.1", "v0.1.0+build.1", "v01.0.0", "latest"} {
			msg, err := release(bad)
			if err == nil || !strings.Contains(msg, "VERSION") {
				t.Errorf("hack/release.sh %q: err %v, output %q; want a refusal naming VERSION", bad, err, msg)
			}
		}
		if msg, err := release(releaseVersion, "sign"); err == nil || !strings.Contains(msg, "unknown step sign") {
			t.Errorf("an unknown step: err %v, output %q", err, msg)
		}
		for _, bad := range []string{"ghcr.io/x|y", "GHCR.io/Upper", "ghcr.io/a b"} {
			cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "release.sh"), releaseVersion, "checksums")
			cmd.Env = append(append(os.Environ(), env...), "IMAGE_REGISTRY="+bad)
			if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), "IMAGE_REGISTRY") {
				t.Errorf("IMAGE_REGISTRY=%q: err %v, output %q; want a refusal naming IMAGE_REGISTRY", bad, err, b)
			}
		}
	})

	// What an earlier run into a reused directory left: another platform's
	// imperatorctl, an older chart, a file no step writes. None of them may
	// be shipped with a checksum.
	stale := []string{"imperatorctl-plan9-386", "charts/imperator-hub-0.0.0-old.tgz", "notes.txt"}
	for _, f := range stale {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(out, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, f), []byte("stale"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if msg, err := release(releaseVersion, "charts", "imperatorctl", "checksums"); err != nil {
		t.Fatalf("hack/release.sh %s charts imperatorctl checksums: %v\n%s", releaseVersion, err, msg)
	}
	helm := tool(t, root, "helm")
	chartVersion := strings.TrimPrefix(releaseVersion, "v")
	charts := map[string]string{"imperator-hub": "hub", "imperator-spoke": "spoke", "imperator-dispatcher": "dispatcher"}

	t.Run("the packaged charts render the released images", func(t *testing.T) {
		for chart, image := range charts {
			file := filepath.Join(out, "charts", chart+"-"+chartVersion+".tgz")
			// Into imperator-system: the charts refuse the shared default.
			args := []string{"template", chart, file, "--kube-version", "v1.30.0", "--namespace", "imperator-system"}
			if chart == "imperator-spoke" {
				args = append(args, "--set", "hub.standalone=true")
			}
			rendered := runHelm(t, ctx, helm, args...)
			refs := imageRefs(t, rendered)
			if len(refs) == 0 {
				t.Errorf("%s renders no image", chart)
			}
			for _, ref := range refs {
				if want := registryPath + "/" + image + ":" + releaseVersion; ref != want {
					t.Errorf("%s renders image %s, want %s", chart, ref, want)
				}
			}
		}
	})

	t.Run("imperatorctl reports the version", func(t *testing.T) {
		ctl := filepath.Join(out, "imperatorctl-"+runtime.GOOS+"-"+runtime.GOARCH)
		b, err := exec.CommandContext(ctx, ctl, "version", "--client").CombinedOutput()
		if err != nil {
			t.Fatalf("%s version --client: %v\n%s", ctl, err, b)
		}
		if !strings.Contains(string(b), "Client Version: "+releaseVersion+"\n") {
			t.Errorf("imperatorctl version --client printed %q, want Client Version: %s", b, releaseVersion)
		}
		sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{filepath.Base(ctl), "charts/imperator-hub-" + chartVersion + ".tgz"} {
			if !strings.Contains(string(sums), "  "+f+"\n") {
				t.Errorf("SHA256SUMS has no line for %s:\n%s", f, sums)
			}
		}
		for _, f := range stale {
			if strings.Contains(string(sums), f) {
				t.Errorf("SHA256SUMS lists %s, which this release did not write:\n%s", f, sums)
			}
		}
		cmd := exec.CommandContext(ctx, "sha256sum", "--check", "--strict", "SHA256SUMS")
		cmd.Dir = out
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("sha256sum --check SHA256SUMS: %v\n%s", err, b)
		}
	})

	t.Run("the appversion step sets the released version in the repository's charts", func(t *testing.T) {
		sources := t.TempDir()
		for chart := range charts {
			data, err := os.ReadFile(filepath.Join(root, "deploy", "charts", chart, "Chart.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(sources, chart), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(sources, chart, "Chart.yaml"), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "release.sh"), releaseVersion, "appversion")
		cmd.Env = append(append(os.Environ(), env...), "CHART_SOURCES="+sources)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hack/release.sh %s appversion: %v\n%s", releaseVersion, err, b)
		}
		for chart := range charts {
			data, err := os.ReadFile(filepath.Join(sources, chart, "Chart.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			var meta struct{ AppVersion, Version string }
			if err := yaml.Unmarshal(data, &meta); err != nil {
				t.Fatal(err)
			}
			if meta.AppVersion != releaseVersion {
				t.Errorf("%s: appVersion %q after the appversion step, want %s", chart, meta.AppVersion, releaseVersion)
			}
			if meta.Version == "" {
				t.Errorf("%s: the step lost the chart's version", chart)
			}
		}
	})

	t.Run("make push publishes the indexes and charts, and helm pulls the charts back", func(t *testing.T) {
		if err := os.Symlink(imagesDir, filepath.Join(out, "images")); err != nil {
			t.Fatal(err)
		}
		if msg, err := release("push", releaseVersion); err != nil {
			t.Fatalf("hack/release.sh push %s: %v\n%s", releaseVersion, err, msg)
		}
		for _, image := range images {
			index, err := publish.LayoutIndex(filepath.Join(imagesDir, image))
			if err != nil {
				t.Fatal(err)
			}
			want, err := index.Digest()
			if err != nil {
				t.Fatal(err)
			}
			ref, err := name.NewTag(registryPath + "/" + image + ":" + releaseVersion)
			if err != nil {
				t.Fatal(err)
			}
			pulled, err := remote.Index(ref, remote.WithContext(ctx))
			if err != nil {
				t.Fatalf("pulling %s back: %v", image, err)
			}
			got, err := pulled.Digest()
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s: the registry's index is %s, the OCI layout's %s", image, got, want)
			}
		}
		for chart := range charts {
			dest := t.TempDir()
			runHelm(t, ctx, helm, "pull", "oci://"+registryPath+"/charts/"+chart, "--version", chartVersion, "--plain-http", "-d", dest)
			data, err := os.ReadFile(filepath.Join(dest, chart+"-"+chartVersion+".tgz"))
			if err != nil {
				t.Fatalf("helm pull left no chart: %v", err)
			}
			_, c, err := publish.ReadChart(data)
			if err != nil {
				t.Fatal(err)
			}
			if c.Name != chart || c.Version != chartVersion || c.AppVersion != releaseVersion {
				t.Errorf("pulled %s %s (appVersion %s), want %s %s (appVersion %s)", c.Name, c.Version, c.AppVersion, chart, chartVersion, releaseVersion)
			}
		}
		// A release is published once: pushing it again replaces nothing.
		msg, err := release("push", releaseVersion)
		if err == nil || !strings.Contains(msg, "exists already") || !strings.Contains(msg, "-overwrite") {
			t.Errorf("pushing %s a second time: %v, want a refusal naming the existing tag and -overwrite:\n%s", releaseVersion, err, msg)
		}
	})
}

// tool returns the path of a tool of hack/tools.sh, built if missing.
func tool(t *testing.T, root, toolName string) string {
	t.Helper()
	b, err := exec.Command(filepath.Join(root, "hack", "tools.sh"), "path", toolName).Output()
	if err != nil {
		t.Fatalf("hack/tools.sh path %s: %v", toolName, err)
	}
	return strings.TrimSpace(string(b))
}

// runHelm runs helm without the machine's configuration, cache or plugins and
// returns its standard output.
func runHelm(t *testing.T, ctx context.Context, helm string, args ...string) string {
	t.Helper()
	home := t.TempDir()
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// imageRefs returns the image of every container and init container of every
// object in a multi-document YAML stream.
func imageRefs(t *testing.T, stream string) []string {
	t.Helper()
	var refs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, child := range v {
				if k == "containers" || k == "initContainers" {
					for _, c := range asSlice(child) {
						if c, ok := c.(map[string]any); ok {
							if image, ok := c["image"].(string); ok {
								refs = append(refs, image)
							}
						}
					}
				}
				walk(child)
			}
		case []any:
			for _, child := range v {
				walk(child)
			}
		}
	}
	for _, doc := range strings.Split(stream, "\n---") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("decoding helm template's output: %v\n%s", err, doc)
		}
		walk(obj)
	}
	return refs
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}
