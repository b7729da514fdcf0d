// Package publish pushes a release to an OCI registry with
// go-containerregistry (make push): the multi-platform image index of an OCI
// image layout that hack/images.sh wrote, and a packaged Helm chart as the
// OCI artifact `helm push` would make of it, so that `helm pull oci://...`
// and `helm install oci://...` take it.
package publish

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"
)

// The media types of a Helm chart in an OCI registry (helm.sh/helm/v3/pkg/registry).
const (
	HelmConfigMediaType       types.MediaType = "application/vnd.cncf.helm.config.v1+json"
	HelmChartContentMediaType types.MediaType = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

// LayoutIndex returns the one multi-platform index of the OCI image layout in
// dir, as hack/image writes it.
func LayoutIndex(dir string) (v1.ImageIndex, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("opening the OCI layout %s: %w", dir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("reading the OCI layout %s: %w", dir, err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("reading the OCI layout %s: %w", dir, err)
	}
	if len(m.Manifests) != 1 || !m.Manifests[0].MediaType.IsIndex() {
		return nil, fmt.Errorf("the OCI layout %s holds %d entries, want exactly one image index (hack/images.sh writes one)", dir, len(m.Manifests))
	}
	return top.ImageIndex(m.Manifests[0].Digest)
}

// PushIndex pushes the image index of the OCI layout in dir, with every
// platform's image, to ref and returns the index's digest.
func PushIndex(ctx context.Context, dir string, ref name.Reference, opts ...remote.Option) (v1.Hash, error) {
	index, err := LayoutIndex(dir)
	if err != nil {
		return v1.Hash{}, err
	}
	digest, err := index.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	if err := remote.WriteIndex(ref, index, append(opts, remote.WithContext(ctx))...); err != nil {
		return v1.Hash{}, fmt.Errorf("pushing %s to %s: %w", dir, ref, err)
	}
	return digest, nil
}

// Chart is what a packaged chart's Chart.yaml says of it.
type Chart struct {
	Name        string `json:"name"`
	Version     string `json:"version"`
	AppVersion  string `json:"appVersion"`
	Description string `json:"description"`
	Home        string `json:"home"`
}

// ReadChart reads the Chart.yaml of a packaged chart (NAME/Chart.yaml in the
// .tgz) and returns it raw and decoded.
func ReadChart(data []byte) ([]byte, Chart, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, Chart{}, fmt.Errorf("not a gzip-compressed chart: %w", err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, Chart{}, errors.New("no Chart.yaml at the top of the chart's directory")
		}
		if err != nil {
			return nil, Chart{}, fmt.Errorf("reading the chart archive: %w", err)
		}
		dir, file := path.Split(path.Clean(h.Name))
		if file != "Chart.yaml" || strings.Count(dir, "/") != 1 {
			continue
		}
		raw, err := io.ReadAll(io.LimitReader(tr, 1<<20))
		if err != nil {
			return nil, Chart{}, fmt.Errorf("reading %s: %w", h.Name, err)
		}
		var c Chart
		if err := yaml.Unmarshal(raw, &c); err != nil {
			return nil, Chart{}, fmt.Errorf("%s: %w", h.Name, err)
		}
		if c.Name == "" || c.Version == "" {
			return nil, Chart{}, fmt.Errorf("%s: name and version are required", h.Name)
		}
		return raw, c, nil
	}
}

// chartManifest is a chart's OCI manifest, pushed with Put once its blobs are
// in the repository.
type chartManifest []byte

func (m chartManifest) RawManifest() ([]byte, error)        { return m, nil }
func (m chartManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

// PushChart pushes the packaged chart in file to REPOSITORY/NAME:VERSION, as
// `helm push file oci://REPOSITORY` does: a config blob holding Chart.yaml as
// JSON, one layer holding the .tgz. It returns the reference and the
// manifest's digest.
func PushChart(ctx context.Context, file string, repository string, nameOpts []name.Option, opts ...remote.Option) (name.Tag, v1.Hash, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return name.Tag{}, v1.Hash{}, err
	}
	chartYAML, chart, err := ReadChart(data)
	if err != nil {
		return name.Tag{}, v1.Hash{}, fmt.Errorf("%s: %w", file, err)
	}
	config, err := yaml.YAMLToJSON(chartYAML)
	if err != nil {
		return name.Tag{}, v1.Hash{}, fmt.Errorf("%s: Chart.yaml: %w", file, err)
	}
	// OCI tags have no "+": Helm writes build metadata with "_".
	tag, err := name.NewTag(repository+"/"+chart.Name+":"+strings.ReplaceAll(chart.Version, "+", "_"), nameOpts...)
	if err != nil {
		return name.Tag{}, v1.Hash{}, fmt.Errorf("%s: the chart's reference: %w", file, err)
	}
	opts = append(opts, remote.WithContext(ctx))
	configBlob, content := static.NewLayer(config, HelmConfigMediaType), static.NewLayer(data, HelmChartContentMediaType)
	var descriptors []v1.Descriptor
	for _, blob := range []v1.Layer{configBlob, content} {
		if err := remote.WriteLayer(tag.Repository, blob, opts...); err != nil {
			return name.Tag{}, v1.Hash{}, fmt.Errorf("pushing %s to %s: %w", file, tag, err)
		}
		d, err := blob.Digest()
		if err != nil {
			return name.Tag{}, v1.Hash{}, err
		}
		size, err := blob.Size()
		if err != nil {
			return name.Tag{}, v1.Hash{}, err
		}
		mt, err := blob.MediaType()
		if err != nil {
			return name.Tag{}, v1.Hash{}, err
		}
		descriptors = append(descriptors, v1.Descriptor{MediaType: mt, Size: size, Digest: d})
	}
	annotations := map[string]string{
		"org.opencontainers.image.title":   chart.Name,
		"org.opencontainers.image.version": chart.Version,
	}
	if chart.Description != "" {
		annotations["org.opencontainers.image.description"] = chart.Description
	}
	if chart.Home != "" {
		annotations["org.opencontainers.image.url"] = chart.Home
	}
	manifest, err := json.Marshal(v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        descriptors[0],
		Layers:        descriptors[1:],
		Annotations:   annotations,
	})
	if err != nil {
		return name.Tag{}, v1.Hash{}, err
	}
	if err := remote.Put(tag, chartManifest(manifest), opts...); err != nil {
		return name.Tag{}, v1.Hash{}, fmt.Errorf("pushing %s to %s: %w", file, tag, err)
	}
	digest, _, err := v1.SHA256(bytes.NewReader(manifest))
	return tag, digest, err
}
