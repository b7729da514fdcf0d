// Command push publishes a release built by hack/release.sh to an OCI
// registry (make push), with go-containerregistry instead of Docker or
// crane: each image's multi-platform index from its OCI layout to
// REGISTRY/NAME:VERSION, and each packaged chart to
// REGISTRY/charts/CHART:CHART-VERSION as a Helm OCI artifact.
//
//	go run ./push -registry registry.example.com/imperator -version v0.1.0 \
//	  -image hub=../../bin/release/v0.1.0/images/hub \
//	  -chart ../../bin/release/v0.1.0/charts/imperator-hub-0.1.0.tgz
//
// Credentials come from the Docker configuration (~/.docker/config.json,
// credential helpers), as crane and helm read them. A release is published
// once: every input is checked, and no tag of it may exist in the registry
// (-overwrite to replace one), before anything is pushed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/imperator-federation/imperator/hack/image/internal/publish"
)

// list collects a repeated flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

// semver is a release version as hack/release.sh accepts it.
var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "push:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	var images, charts list
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	registry := fs.String("registry", "", "repository prefix, host[:port]/path: images go to REGISTRY/NAME:VERSION, charts to REGISTRY/charts/CHART")
	version := fs.String("version", "", "the release, vX.Y.Z[-pre]: the images' tag and the charts' appVersion")
	plainHTTP := fs.Bool("plain-http", false, "talk HTTP, not HTTPS, to the registry (loopback and private addresses do already)")
	overwrite := fs.Bool("overwrite", false, "replace tags of this release that the registry has already (a release is published once otherwise)")
	fs.Var(&images, "image", "NAME=DIR: push the OCI layout DIR as REGISTRY/NAME:VERSION (repeat)")
	fs.Var(&charts, "chart", "a packaged chart (.tgz) of the release (repeat)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if !semver.MatchString(*version) {
		return fmt.Errorf("-version %q: want a semantic version vX.Y.Z or vX.Y.Z-PRE", *version)
	}
	var nameOpts []name.Option
	if *plainHTTP {
		nameOpts = append(nameOpts, name.Insecure)
	}
	if _, err := name.NewRepository(*registry, nameOpts...); err != nil {
		return fmt.Errorf("-registry %q: want host[:port]/path: %w", *registry, err)
	}
	if len(images) == 0 && len(charts) == 0 {
		return errors.New("nothing to push: give -image or -chart")
	}
	opts := []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain), remote.WithContext(ctx)}

	// Every input first: a bad chart must not leave the images pushed
	// alone.
	type imagePush struct {
		dir string
		ref name.Tag
	}
	type chartPush struct {
		file    string
		version string
		ref     name.Tag
	}
	var imagePushes []imagePush
	var chartPushes []chartPush
	for _, image := range images {
		imageName, dir, ok := strings.Cut(image, "=")
		if !ok || imageName == "" || dir == "" {
			return fmt.Errorf("-image %q: want NAME=DIR", image)
		}
		ref, err := name.NewTag(*registry+"/"+imageName+":"+*version, nameOpts...)
		if err != nil {
			return fmt.Errorf("-image %q: %w", image, err)
		}
		if _, err := publish.LayoutIndex(dir); err != nil {
			return fmt.Errorf("-image %q: %w", image, err)
		}
		imagePushes = append(imagePushes, imagePush{dir: dir, ref: ref})
	}
	for _, file := range charts {
		data, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("-chart: %w", err)
		}
		_, chart, err := publish.ReadChart(data)
		if err != nil {
			return fmt.Errorf("-chart %s: %w", file, err)
		}
		if chart.Version != strings.TrimPrefix(*version, "v") || chart.AppVersion != *version {
			return fmt.Errorf("-chart %s: version %q and appVersion %q, want %q and %q: not this release's chart",
				file, chart.Version, chart.AppVersion, strings.TrimPrefix(*version, "v"), *version)
		}
		ref, err := name.NewTag(*registry+"/charts/"+chart.Name+":"+chart.Version, nameOpts...)
		if err != nil {
			return fmt.Errorf("-chart %s: %w", file, err)
		}
		chartPushes = append(chartPushes, chartPush{file: file, version: chart.Version, ref: ref})
	}
	if !*overwrite {
		var refs []name.Tag
		for _, p := range imagePushes {
			refs = append(refs, p.ref)
		}
		for _, p := range chartPushes {
			refs = append(refs, p.ref)
		}
		for _, ref := range refs {
			exists, err := tagExists(ref, opts)
			if err != nil {
				return fmt.Errorf("checking %s in the registry: %w", ref, err)
			}
			if exists {
				return fmt.Errorf("%s exists already: a release is published once (give -overwrite to replace it)", ref)
			}
		}
	}

	for _, p := range imagePushes {
		digest, err := publish.PushIndex(ctx, p.dir, p.ref, opts...)
		if err != nil {
			return err
		}
		fmt.Printf("%s@%s\n", p.ref, digest)
	}
	for _, p := range chartPushes {
		ref, digest, err := publish.PushChart(ctx, p.file, *registry+"/charts", nameOpts, opts...)
		if err != nil {
			return err
		}
		fmt.Printf("%s@%s (helm pull oci://%s --version %s)\n", ref, digest, ref.Repository, p.version)
	}
	return nil
}

// tagExists tells whether the registry has ref.
func tagExists(ref name.Tag, opts []remote.Option) (bool, error) {
	_, err := remote.Head(ref, opts...)
	var terr *transport.Error
	if errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, nil
}
