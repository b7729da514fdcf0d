package main

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/imperator-federation/imperator/hack/image/internal/ocibuild"
)

// TestBuiltImages opens the images `make images` wrote (hack/images.sh sets
// IMAGES_DIR, IMAGES and IMAGES_REVISION) and checks each as a user pulling
// it would see it: a multi-platform index, a non-root user, the binary as
// entrypoint, the OCI labels, two layers, no shell, a docker tarball with the
// same image, and a binary that runs.
func TestBuiltImages(t *testing.T) {
	dir := os.Getenv("IMAGES_DIR")
	if dir == "" {
		t.Skip("IMAGES_DIR is not set: run `make images`, which builds the images and runs this test")
	}
	names := strings.Fields(os.Getenv("IMAGES"))
	if len(names) == 0 {
		t.Fatal("IMAGES lists no image names")
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) { checkImage(t, dir, name, os.Getenv("IMAGES_REVISION")) })
	}
}

func checkImage(t *testing.T, dir, name, revision string) {
	p, err := layout.FromPath(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("opening the OCI layout: %v", err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	topManifest, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(topManifest.Manifests) != 1 {
		t.Fatalf("layout lists %d entries, want the one multi-platform index", len(topManifest.Manifests))
	}
	index, err := top.ImageIndex(topManifest.Manifests[0].Digest)
	if err != nil {
		t.Fatalf("the layout's entry is not an image index: %v", err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	ranHost := false
	for _, d := range manifest.Manifests {
		platform := d.Platform.OS + "/" + d.Platform.Architecture
		img, err := index.Image(d.Digest)
		if err != nil {
			t.Fatalf("%s: %v", platform, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Config.User != ocibuild.User {
			t.Errorf("%s: runs as %q, want %q", platform, cf.Config.User, ocibuild.User)
		}
		if got := strings.Join(cf.Config.Entrypoint, " "); got != "/"+name {
			t.Errorf("%s: entrypoint %q, want /%s", platform, got, name)
		}
		if got := cf.Config.Labels[ocibuild.LabelRevision]; got != revision || revision == "" {
			t.Errorf("%s: revision label %q, want %q", platform, got, revision)
		}
		for _, l := range []string{ocibuild.LabelTitle, ocibuild.LabelSource, ocibuild.LabelVersion, ocibuild.LabelCreated} {
			if cf.Config.Labels[l] == "" {
				t.Errorf("%s: label %s is empty", platform, l)
			}
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		if len(layers) != 2 {
			t.Errorf("%s: %d layers, want 2 (base files, binary)", platform, len(layers))
		}
		binary := checkFiles(t, img, platform, name)
		checkDockerTarball(t, dir, name, d.Platform, img)
		if d.Platform.OS == runtime.GOOS && d.Platform.Architecture == runtime.GOARCH {
			runHelp(t, name, binary)
			ranHost = true
		}
	}
	if !ranHost {
		t.Errorf("no image for this machine's platform %s/%s: the binary inside was not run", runtime.GOOS, runtime.GOARCH)
	}
}

// checkFiles checks the file system and returns the binary's bytes.
func checkFiles(t *testing.T, img v1.Image, platform, name string) []byte {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	var binary []byte
	seen := map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		path := strings.TrimSuffix(h.Name, "/")
		seen[path] = true
		if strings.HasPrefix(path, "bin") || strings.HasSuffix(path, "/sh") {
			t.Errorf("%s: image contains %s; it must have no shell", platform, path)
		}
		if path == name {
			if h.Mode != 0o755 || h.Uid != 0 {
				t.Errorf("%s: /%s has mode %o owner %d, want 0755 root", platform, name, h.Mode, h.Uid)
			}
			if binary, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, want := range []string{ocibuild.PasswdPath, ocibuild.GroupPath, ocibuild.CABundlePath, "tmp"} {
		if !seen[want] {
			t.Errorf("%s: /%s is missing", platform, want)
		}
	}
	if binary == nil {
		t.Fatalf("%s: /%s is missing", platform, name)
	}
	return binary
}

func checkDockerTarball(t *testing.T, dir, name string, platform *v1.Platform, want v1.Image) {
	file := filepath.Join(dir, name+"-"+platform.OS+"-"+platform.Architecture+".tar")
	img, err := tarball.ImageFromPath(file, nil)
	if err != nil {
		t.Errorf("docker tarball: %v", err)
		return
	}
	got, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	wantConfig, err := want.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if got != wantConfig {
		t.Errorf("%s holds config %s, the OCI layout %s: not the same image", file, got, wantConfig)
	}
}

// runHelp runs the binary taken out of the image with --help: it must start
// (static, right architecture) and print its flags.
func runHelp(t *testing.T, name string, binary []byte) {
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, binary, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--help").CombinedOutput()
	if err != nil {
		t.Errorf("/%s --help from the image: %v\n%s", name, err, out)
	}
	if !strings.Contains(string(out), "-kubeconfig") {
		t.Errorf("/%s --help printed no flags:\n%s", name, out)
	}
}
