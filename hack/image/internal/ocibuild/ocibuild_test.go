package ocibuild

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

func options(t *testing.T) Options {
	t.Helper()
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return Options{
		Name:        "hub",
		Description: "test image",
		Binaries: map[string]string{
			"linux/amd64": write("hub-amd64", "amd64 binary"),
			"linux/arm64": write("hub-arm64", "arm64 binary"),
		},
		CABundle: write("ca.pem", "-----BEGIN CERTIFICATE-----\n"),
		Source:   "https://example.com/imperator",
		Version:  "v0.1.0",
		Revision: "0123456789abcdef",
		Created:  time.Unix(1795473001, 0).UTC(),
	}
}

func indexDigest(t *testing.T, o Options) v1.Hash {
	t.Helper()
	index, _, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	d, err := index.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestSameInputsGiveTheSameDigest(t *testing.T) {
	o := options(t)
	first, second := indexDigest(t, o), indexDigest(t, o)
	if first != second {
		t.Fatalf("two builds of the same binaries differ: %s vs %s", first, second)
	}
	o.Created = o.Created.Add(time.Second)
	if later := indexDigest(t, o); later == first {
		t.Fatalf("a different creation time gave the same digest %s: the time is not in the image", first)
	}
}

func TestImageRunsTheBinaryAsNonRootWithoutAShell(t *testing.T) {
	o := options(t)
	index, images, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(manifest.Manifests) != 2 {
		t.Fatalf("index lists %d images, want one per platform (2)", len(manifest.Manifests))
	}
	for _, d := range manifest.Manifests {
		if d.Platform == nil || d.Platform.OS != "linux" {
			t.Errorf("index entry %s has platform %v, want linux/*", d.Digest, d.Platform)
		}
	}
	for platform, img := range images {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if want := strings.Split(platform, "/")[1]; cf.Architecture != want {
			t.Errorf("%s: architecture %q, want %q", platform, cf.Architecture, want)
		}
		if cf.Config.User != User {
			t.Errorf("%s: user %q, want %q", platform, cf.Config.User, User)
		}
		if got := strings.Join(cf.Config.Entrypoint, " "); got != "/hub" {
			t.Errorf("%s: entrypoint %q, want /hub", platform, got)
		}
		if cf.Config.Labels[LabelRevision] != o.Revision || cf.Config.Labels[LabelVersion] != o.Version ||
			cf.Config.Labels[LabelCreated] != "2026-11-23T22:30:01Z" {
			t.Errorf("%s: labels %v do not carry the revision, version and creation time", platform, cf.Config.Labels)
		}
		files := contents(t, img)
		bin, ok := files["hub"]
		if !ok || bin.Mode != 0o755 || bin.Uid != 0 {
			t.Errorf("%s: /hub is %+v, want a root-owned 0755 file", platform, bin)
		}
		if !strings.Contains(files[PasswdPath].body, "nonroot:x:65532:65532:") {
			t.Errorf("%s: /etc/passwd has no nonroot user: %q", platform, files[PasswdPath].body)
		}
		if _, ok := files[CABundlePath]; !ok {
			t.Errorf("%s: no CA bundle at /%s", platform, CABundlePath)
		}
		for name := range files {
			if strings.HasPrefix(name, "bin/") || strings.HasSuffix(name, "/sh") {
				t.Errorf("%s: image contains %s; it must have no shell", platform, name)
			}
		}
		for name, f := range files {
			if !f.ModTime.Equal(o.Created) {
				t.Errorf("%s: %s has time %s, want the creation time", platform, name, f.ModTime)
			}
		}
	}
}

func TestBadOptionsNameTheField(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(*Options)
		want string
	}{
		"no name":           {func(o *Options) { o.Name = "" }, "name"},
		"name with a slash": {func(o *Options) { o.Name = "a/b" }, "plain file name"},
		"no binaries":       {func(o *Options) { o.Binaries = nil }, "binaries"},
		"bad platform":      {func(o *Options) { o.Binaries = map[string]string{"amd64": "x"} }, `binaries["amd64"]`},
		"no revision":       {func(o *Options) { o.Revision = "" }, "revision"},
		"no time":           {func(o *Options) { o.Created = time.Time{} }, "created"},
		"missing binary":    {func(o *Options) { o.Binaries = map[string]string{"linux/amd64": "/nonexistent/hub"} }, "/nonexistent/hub"},
		"missing ca":        {func(o *Options) { o.CABundle = "/nonexistent/ca.pem" }, "ca bundle"},
	} {
		t.Run(name, func(t *testing.T) {
			o := options(t)
			tc.edit(&o)
			_, _, err := Build(o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Build: %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

type entry struct {
	*tar.Header
	body string
}

// contents reads the image's flattened file system.
func contents(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	files := map[string]entry{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimSuffix(h.Name, "/")] = entry{Header: h, body: string(body)}
	}
}
