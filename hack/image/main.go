// Command image writes the container image of one of the project's binaries
// without a Docker daemon: an OCI image layout holding a multi-platform
// index (push it with `crane push --index DIR REF`, or copy it with skopeo
// `oci:DIR`), and for each platform a tarball that `docker load` reads.
//
//	go run . -name hub -binary linux/amd64=../../bin/images/linux_amd64/hub \
//	  -ca-bundle /etc/ssl/certs/ca-certificates.crt -revision $(git rev-parse HEAD) \
//	  -created $(git log -1 --format=%ct) -out ../../bin/images
//
// It prints the digest of the index, so two runs can be compared.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/imperator-federation/imperator/hack/image/internal/ocibuild"
)

// binaries collects repeated -binary platform=path flags.
type binaries map[string]string

func (b binaries) String() string { return fmt.Sprint(map[string]string(b)) }

func (b binaries) Set(v string) error {
	platform, path, ok := strings.Cut(v, "=")
	if !ok || path == "" {
		return fmt.Errorf("%q: want platform=path, e.g. linux/amd64=bin/hub", v)
	}
	if _, err := ocibuild.ParsePlatform(platform); err != nil {
		return err
	}
	if _, dup := b[platform]; dup {
		return fmt.Errorf("platform %s given twice", platform)
	}
	b[platform] = path
	return nil
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	bins := binaries{}
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	nameFlag := fs.String("name", "", "program name: the binary is /NAME in the image and its entrypoint")
	description := fs.String("description", "", "the image's description label")
	fs.Var(bins, "binary", "platform=path of a static binary (repeat for each platform)")
	caBundle := fs.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "PEM CA bundle copied into the image")
	source := fs.String("source", "https://github.com/imperator-federation/imperator", "the source label")
	version := fs.String("version", "", "the version label and the image tag in the tarballs (default: the revision's first 12 characters)")
	revision := fs.String("revision", "", "the commit the binaries were built from")
	created := fs.String("created", "", "creation time, Unix seconds (the commit time keeps images reproducible)")
	repository := fs.String("repository", "ghcr.io/imperator-federation", "repository prefix of the tag written into the docker tarballs")
	out := fs.String("out", "", "output directory: OUT/NAME is the OCI layout, OUT/NAME-OS-ARCH.tar the docker tarballs")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *out == "" {
		return errors.New("-out: required")
	}
	secs, err := strconv.ParseInt(*created, 10, 64)
	if err != nil {
		return fmt.Errorf("-created %q: want Unix seconds: %w", *created, err)
	}
	if *version == "" && len(*revision) >= 12 {
		*version = (*revision)[:12]
	}
	index, images, err := ocibuild.Build(ocibuild.Options{
		Name:        *nameFlag,
		Description: *description,
		Binaries:    bins,
		CABundle:    *caBundle,
		Source:      *source,
		Version:     *version,
		Revision:    *revision,
		Created:     time.Unix(secs, 0).UTC(),
	})
	if err != nil {
		return err
	}
	tag, err := name.NewTag(*repository + "/" + *nameFlag + ":" + *version)
	if err != nil {
		return fmt.Errorf("tag of the docker tarballs: %w", err)
	}

	dir := filepath.Join(*out, *nameFlag)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing %s: %w", dir, err)
	}
	if err := p.AppendIndex(index, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": *version,
	})); err != nil {
		return fmt.Errorf("writing %s: %w", dir, err)
	}
	platforms := make([]string, 0, len(images))
	for pl := range images {
		platforms = append(platforms, pl)
	}
	sort.Strings(platforms)
	for _, pl := range platforms {
		file := filepath.Join(*out, *nameFlag+"-"+strings.ReplaceAll(pl, "/", "-")+".tar")
		if err := tarball.WriteToFile(file, tag, images[pl]); err != nil {
			return fmt.Errorf("writing %s: %w", file, err)
		}
	}
	digest, err := index.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %s (%s)\n", *nameFlag, tag, digest, strings.Join(platforms, ", "))
	return nil
}
