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
	o, err := parseArgs(args)
	if err != nil || o == nil {
		return err
	}
	opts := []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain), remote.WithContext(ctx)}
	// Every input first: a bad chart must not leave the images pushed
	// alone.
	r, err := o.plan()
	if err != nil {
		return err
	}
	if !o.overwrite {
		if err := r.unpublished(opts); err != nil {
			return err
		}
	}
	return r.push(ctx, o, opts)
}

// options are the command's flags.
type options struct {
	registry, version    string
	plainHTTP, overwrite bool
	images, charts       list
	nameOpts             []name.Option
}

// parseArgs reads the flags and checks each; nil options and no error after
// -help.
func parseArgs(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	fs.StringVar(&o.registry, "registry", "", "repository prefix, host[:port]/path: images go to REGISTRY/NAME:VERSION, charts to REGISTRY/charts/CHART")
	fs.StringVar(&o.version, "version", "", "the release, vX.Y.Z[-pre]: the images' tag and the charts' appVersion")
	fs.BoolVar(&o.plainHTTP, "plain-http", false, "talk HTTP, not HTTPS, to the registry (loopback and private addresses do already)")
	fs.BoolVar(&o.overwrite, "overwrite", false, "replace tags of this release that the registry has already (a release is published once otherwise)")
	fs.Var(&o.images, "image", "NAME=DIR: push the OCI layout DIR as REGISTRY/NAME:VERSION (repeat)")
	fs.Var(&o.charts, "chart", "a packaged chart (.tgz) of the release (repeat)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, nil
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if !semver.MatchString(o.version) {
		return nil, fmt.Errorf("-version %q: want a semantic version vX.Y.Z or vX.Y.Z-PRE", o.version)
	}
	if o.plainHTTP {
		o.nameOpts = append(o.nameOpts, name.Insecure)
	}
	if _, err := name.NewRepository(o.registry, o.nameOpts...); err != nil {
		return nil, fmt.Errorf("-registry %q: want host[:port]/path: %w", o.registry, err)
	}
	if len(o.images) == 0 && len(o.charts) == 0 {
		return nil, errors.New("nothing to push: give -image or -chart")
	}
	return o, nil
}

// release is what one run pushes, every input read and checked.
type release struct {
	images []imagePush
	charts []chartPush
}

type imagePush struct {
	dir string
	ref name.Tag
}

type chartPush struct {
	file    string
	version string
	ref     name.Tag
}

// plan reads and checks every image layout and chart of o.
func (o *options) plan() (*release, error) {
	r := &release{}
	for _, image := range o.images {
		imageName, dir, ok := strings.Cut(image, "=")
		if !ok || imageName == "" || dir == "" {
			return nil, fmt.Errorf("-image %q: want NAME=DIR", image)
		}
		ref, err := name.NewTag(o.registry+"/"+imageName+":"+o.version, o.nameOpts...)
		if err != nil {
			return nil, fmt.Errorf("-image %q: %w", image, err)
		}
		if _, err := publish.LayoutIndex(dir); err != nil {
			return nil, fmt.Errorf("-image %q: %w", image, err)
		}
		r.images = append(r.images, imagePush{dir: dir, ref: ref})
	}
	for _, file := range o.charts {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("-chart: %w", err)
		}
		_, chart, err := publish.ReadChart(data)
		if err != nil {
			return nil, fmt.Errorf("-chart %s: %w", file, err)
		}
		if chart.Version != strings.TrimPrefix(o.version, "v") || chart.AppVersion != o.version {
			return nil, fmt.Errorf("-chart %s: version %q and appVersion %q, want %q and %q: not this release's chart",
				file, chart.Version, chart.AppVersion, strings.TrimPrefix(o.version, "v"), o.version)
		}
		ref, err := name.NewTag(o.registry+"/charts/"+chart.Name+":"+chart.Version, o.nameOpts...)
		if err != nil {
			return nil, fmt.Errorf("-chart %s: %w", file, err)
		}
		r.charts = append(r.charts, chartPush{file: file, version: chart.Version, ref: ref})
	}
	return r, nil
}

// unpublished fails when the registry has any tag of r already: a release
// is published once.
func (r *release) unpublished(opts []remote.Option) error {
	var refs []name.Tag
	for _, p := range r.images {
		refs = append(refs, p.ref)
	}
	for _, p := range r.charts {
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
	return nil
}

// push pushes the images, then the charts, printing each reference.
func (r *release) push(ctx context.Context, o *options, opts []remote.Option) error {
	for _, p := range r.images {
		digest, err := publish.PushIndex(ctx, p.dir, p.ref, opts...)
		if err != nil {
			return err
		}
		fmt.Printf("%s@%s\n", p.ref, digest)
	}
	for _, p := range r.charts {
		ref, digest, err := publish.PushChart(ctx, p.file, o.registry+"/charts", o.nameOpts, opts...)
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
