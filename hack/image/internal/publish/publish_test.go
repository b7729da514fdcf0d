package publish

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// packaged returns a gzip-compressed tar of files, as helm package writes a chart.
func packaged(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for path, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: path, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

const chartYAML = "apiVersion: v2\nname: imperator-spoke\nversion: 0.1.0\nappVersion: v0.1.0\ndescription: The agent\n"

func TestReadChart(t *testing.T) {
	cases := map[string]struct {
		data      func(t *testing.T) []byte
		wantChart Chart
		wantErr   string
	}{
		"a packaged chart": {
			data: func(t *testing.T) []byte {
				return packaged(t, map[string]string{"imperator-spoke/Chart.yaml": chartYAML, "imperator-spoke/values.yaml": "{}"})
			},
			wantChart: Chart{Name: "imperator-spoke", Version: "0.1.0", AppVersion: "v0.1.0", Description: "The agent"},
		},
		"not gzip": {
			data:    func(*testing.T) []byte { return []byte("Chart.yaml") },
			wantErr: "not a gzip-compressed chart",
		},
		"a Chart.yaml of a subchart only": {
			data: func(t *testing.T) []byte {
				return packaged(t, map[string]string{"imperator-spoke/charts/sub/Chart.yaml": chartYAML})
			},
			wantErr: "no Chart.yaml at the top",
		},
		"no version": {
			data: func(t *testing.T) []byte {
				return packaged(t, map[string]string{"imperator-spoke/Chart.yaml": "apiVersion: v2\nname: imperator-spoke\n"})
			},
			wantErr: "name and version are required",
		},
		"not YAML": {
			data: func(t *testing.T) []byte {
				return packaged(t, map[string]string{"imperator-spoke/Chart.yaml": "name: [\n"})
			},
			wantErr: "imperator-spoke/Chart.yaml",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, got, err := ReadChart(tc.data(t))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.wantChart {
				t.Errorf("chart %+v, want %+v", got, tc.wantChart)
			}
		})
	}
}

// TestPushChart pushes a chart to an in-process registry and reads back
// what helm reads: an OCI manifest whose config is Chart.yaml as JSON with
// Helm's config media type and whose one layer is the .tgz with Helm's
// content media type.
func TestPushChart(t *testing.T) {
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	u, err := url.Parse(reg.URL)
	if err != nil {
		t.Fatal(err)
	}
	data := packaged(t, map[string]string{"imperator-spoke/Chart.yaml": chartYAML})
	file := filepath.Join(t.TempDir(), "imperator-spoke-0.1.0.tgz")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tag, digest, err := PushChart(ctx, file, u.Host+"/imperator/charts", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := u.Host + "/imperator/charts/imperator-spoke:0.1.0"; tag.String() != want {
		t.Errorf("pushed to %s, want %s", tag, want)
	}
	desc, err := remote.Get(tag, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != digest || desc.MediaType != types.OCIManifestSchema1 {
		t.Errorf("registry holds %s (%s), want %s (%s)", desc.Digest, desc.MediaType, digest, types.OCIManifestSchema1)
	}
	var m v1.Manifest
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		t.Fatal(err)
	}
	if m.Config.MediaType != HelmConfigMediaType || len(m.Layers) != 1 || m.Layers[0].MediaType != HelmChartContentMediaType {
		t.Fatalf("manifest %s: want config %s and one layer %s", desc.Manifest, HelmConfigMediaType, HelmChartContentMediaType)
	}
	repo := tag.Repository
	for _, c := range []struct {
		digest v1.Hash
		want   string
	}{{m.Config.Digest, `{"apiVersion":"v2","appVersion":"v0.1.0","description":"The agent","name":"imperator-spoke","version":"0.1.0"}`}, {m.Layers[0].Digest, string(data)}} {
		layer, err := remote.Layer(repo.Digest(c.digest.String()), remote.WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		rc, err := layer.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != c.want {
			t.Errorf("blob %s holds %q, want %q", c.digest, got, c.want)
		}
	}
}
