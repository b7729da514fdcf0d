// Package ocibuild assembles the container image of one static Go binary the
// way ko and apko do, without a Docker daemon or a base image: an empty base,
// one layer with the files every Go program expects (/etc/passwd and
// /etc/group with a non-root user, a CA bundle, /tmp), one layer with the
// binary, and a config that runs it as that user with no shell.
//
// The build is reproducible: every timestamp is Options.Created, tar entries
// are written in a fixed order with fixed owners, so the same binaries and
// options give the same digests.
package ocibuild

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The user the image runs as: distroless's "nonroot", so that manifests
// written for those images (runAsNonRoot, runAsUser 65532) fit this one too.
const (
	UserID   = 65532
	UserName = "nonroot"
	// User is the image config's User field.
	User = "65532:65532"
)

// Paths inside the image.
const (
	PasswdPath   = "etc/passwd"
	GroupPath    = "etc/group"
	CABundlePath = "etc/ssl/certs/ca-certificates.crt"
)

// OCI annotation keys the image config carries as labels.
const (
	LabelTitle       = "org.opencontainers.image.title"
	LabelDescription = "org.opencontainers.image.description"
	LabelSource      = "org.opencontainers.image.source"
	LabelVersion     = "org.opencontainers.image.version"
	LabelRevision    = "org.opencontainers.image.revision"
	LabelCreated     = "org.opencontainers.image.created"
)

// Options describe one image: a program built for one or more platforms.
type Options struct {
	// Name is the program's name: the binary is /<Name> and the entrypoint.
	Name string
	// Description goes in the image's description label.
	Description string
	// Binaries maps a platform ("linux/amd64") to the path of the static
	// binary built for it.
	Binaries map[string]string
	// CABundle is the PEM file copied to /etc/ssl/certs/ca-certificates.crt.
	CABundle string
	// Source, Version and Revision go in the OCI labels.
	Source, Version, Revision string
	// Created is the time every file, layer and config carries.
	Created time.Time
}

func (o Options) validate() error {
	var errs []error
	if o.Name == "" || strings.ContainsAny(o.Name, "/ \t\n") {
		errs = append(errs, fmt.Errorf("name %q: must be a plain file name", o.Name))
	}
	if len(o.Binaries) == 0 {
		errs = append(errs, errors.New("binaries: at least one platform is required"))
	}
	for p, bin := range o.Binaries {
		if _, err := ParsePlatform(p); err != nil {
			errs = append(errs, fmt.Errorf("binaries[%q]: %w", p, err))
		}
		if bin == "" {
			errs = append(errs, fmt.Errorf("binaries[%q]: no path", p))
		}
	}
	if o.CABundle == "" {
		errs = append(errs, errors.New("ca bundle: no path"))
	}
	if o.Revision == "" {
		errs = append(errs, errors.New("revision: required (the commit the binaries were built from)"))
	}
	if o.Created.IsZero() {
		errs = append(errs, errors.New("created: required (e.g. the commit time, for reproducible images)"))
	}
	return errors.Join(errs...)
}

// ParsePlatform parses "os/arch" or "os/arch/variant".
func ParsePlatform(s string) (v1.Platform, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return v1.Platform{}, fmt.Errorf("platform %q: want os/arch or os/arch/variant", s)
	}
	p := v1.Platform{OS: parts[0], Architecture: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	return p, nil
}

// Build returns the multi-platform index of the image and its images per
// platform, in the order of the sorted platform names.
func Build(o Options) (v1.ImageIndex, map[string]v1.Image, error) {
	if err := o.validate(); err != nil {
		return nil, nil, fmt.Errorf("image %s: %w", o.Name, err)
	}
	ca, err := os.ReadFile(o.CABundle)
	if err != nil {
		return nil, nil, fmt.Errorf("image %s: ca bundle: %w", o.Name, err)
	}
	base, err := layer(o.Created, baseFiles(ca))
	if err != nil {
		return nil, nil, fmt.Errorf("image %s: base layer: %w", o.Name, err)
	}
	platforms := make([]string, 0, len(o.Binaries))
	for p := range o.Binaries {
		platforms = append(platforms, p)
	}
	sort.Strings(platforms)

	index := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	images := make(map[string]v1.Image, len(platforms))
	for _, p := range platforms {
		platform, _ := ParsePlatform(p) // validated above
		img, err := image(o, platform, base, o.Binaries[p])
		if err != nil {
			return nil, nil, fmt.Errorf("image %s for %s: %w", o.Name, p, err)
		}
		images[p] = img
		index = mutate.AppendManifests(index, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &platform},
		})
	}
	return index, images, nil
}

func image(o Options, platform v1.Platform, base v1.Layer, binary string) (v1.Image, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return nil, fmt.Errorf("binary: %w", err)
	}
	bin, err := layer(o.Created, []file{{name: o.Name, mode: 0o755, data: data}})
	if err != nil {
		return nil, fmt.Errorf("binary layer: %w", err)
	}
	created := v1.Time{Time: o.Created}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "ocibuild: /etc/passwd, /etc/group, CA bundle, /tmp", Comment: "base",
		}},
		mutate.Addendum{Layer: bin, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "ocibuild: /" + o.Name, Comment: "binary",
		}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = platform.OS, platform.Architecture, platform.Variant
	cf.Created = created
	cf.Author = "" // nothing that varies between builders
	cf.Config.User = User
	cf.Config.Entrypoint = []string{"/" + o.Name}
	cf.Config.Cmd = nil
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/"} // there is nothing else to run
	cf.Config.Labels = map[string]string{
		LabelTitle:       "imperator-" + o.Name,
		LabelDescription: o.Description,
		LabelSource:      o.Source,
		LabelVersion:     o.Version,
		LabelRevision:    o.Revision,
		LabelCreated:     o.Created.UTC().Format(time.RFC3339),
	}
	return mutate.ConfigFile(img, cf)
}

type file struct {
	name string
	mode int64
	uid  int
	dir  bool
	data []byte
}

func baseFiles(ca []byte) []file {
	return []file{
		{name: "etc", mode: 0o755, dir: true},
		{name: GroupPath, mode: 0o644, data: []byte("root:x:0:\n" + UserName + ":x:65532:\n")},
		{name: PasswdPath, mode: 0o644, data: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\n" +
				UserName + ":x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/ssl", mode: 0o755, dir: true},
		{name: "etc/ssl/certs", mode: 0o755, dir: true},
		{name: CABundlePath, mode: 0o644, data: ca},
		{name: "home", mode: 0o755, dir: true},
		{name: "home/nonroot", mode: 0o700, uid: UserID, dir: true},
		{name: "tmp", mode: 0o1777, dir: true},
	}
}

// layer writes files into an uncompressed tar in the given order, every
// entry owned by files' uid, stamped with created, and wraps it as a layer
// (gzip, as registries expect).
func layer(created time.Time, files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{
			Name:    f.name,
			Mode:    f.mode,
			Uid:     f.uid,
			Gid:     f.uid,
			ModTime: created,
			Format:  tar.FormatPAX,
		}
		if f.dir {
			h.Typeflag, h.Name = tar.TypeDir, f.name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("%s: %w", path.Clean(f.name), err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
