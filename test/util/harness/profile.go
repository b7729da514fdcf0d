package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// ProfileDirEnv names the environment variable a benchmark reads to decide
// whether to profile: the directory ProfileWindow writes its profiles to.
const ProfileDirEnv = "IMPERATOR_BENCH_PROFILE_DIR"

// ProfileWindow runs work for d while the API server behind cfg and this
// process each record a CPU profile, and writes them to
// <dir>/<name>.apiserver.pprof and <dir>/<name>.process.pprof (read them
// with `go tool pprof -top -cum FILE`; two windows compare with
// `-diff_base`). work gets a context that ends with the window and should
// repeat the operation under study until then.
//
// The API server's profile comes from its /debug/pprof/profile, which needs
// profiling on (the kube-apiserver default, and envtest's; a harness cluster
// runs with --profiling=false, so start it with
// APIServerFlags: []string{"--profiling=true"}) and a user allowed the
// non-resource URL (system:masters, as the admin configs of envtest and the
// harness). The endpoint profiles whole seconds, so d is rounded up to one.
// When this process is already profiled (go test -cpuprofile) its own
// profile is left to that and only the API server's is written.
func ProfileWindow(ctx context.Context, cfg *rest.Config, dir, name string, d time.Duration, work func(ctx context.Context) error) error {
	seconds := max(1, int((d+time.Second-1)/time.Second))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating the profile directory: %w", err)
	}
	apiCfg := rest.CopyConfig(cfg)
	apiCfg.Timeout = time.Duration(seconds)*time.Second + time.Minute
	kube, err := kubernetes.NewForConfig(apiCfg)
	if err != nil {
		return fmt.Errorf("creating the API server profile client: %w", err)
	}
	profileRequest := kube.Discovery().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(seconds))

	process, err := os.Create(filepath.Join(dir, name+".process.pprof"))
	if err != nil {
		return fmt.Errorf("creating the process profile: %w", err)
	}
	processProfiled := pprof.StartCPUProfile(process) == nil
	if !processProfiled {
		_ = process.Close()
		_ = os.Remove(process.Name())
	}

	apiDone := make(chan error, 1)
	go func() { apiDone <- fetchProfile(ctx, profileRequest, filepath.Join(dir, name+".apiserver.pprof")) }()
	workCtx, cancel := context.WithTimeout(ctx, time.Duration(seconds)*time.Second)
	workErr := work(workCtx)
	cancel()
	var errs []error
	if workErr != nil {
		errs = append(errs, fmt.Errorf("profiled work: %w", workErr))
	}
	if processProfiled {
		pprof.StopCPUProfile()
		if err := process.Close(); err != nil {
			errs = append(errs, fmt.Errorf("writing the process profile: %w", err))
		}
	}
	if err := <-apiDone; err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// fetchProfile writes the body of req to path.
func fetchProfile(ctx context.Context, req *rest.Request, path string) error {
	raw, err := req.DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("requesting the API server profile (is --profiling off, or the user not allowed /debug/pprof?): %w", err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		return fmt.Errorf("writing the API server profile: %w", err)
	}
	return nil
}

// APIServerMetrics reads the metrics of the API server behind cfg (its
// /metrics, which the admin configs of envtest and the harness may read).
func APIServerMetrics(ctx context.Context, cfg *rest.Config) (map[string]*dto.MetricFamily, error) {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the API server metrics client: %w", err)
	}
	raw, err := kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parsing the API server's metrics: %w", err)
	}
	return families, nil
}

// HistogramTotals sums the sample count and sum of the series of histogram
// family name in families whose labels include every label of match.
func HistogramTotals(families map[string]*dto.MetricFamily, name string, match map[string]string) (count uint64, sum float64) {
	family, ok := families[name]
	if !ok {
		return 0, 0
	}
series:
	for _, m := range family.GetMetric() {
		labels := make(map[string]string, len(m.GetLabel()))
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range match {
			if labels[k] != v {
				continue series
			}
		}
		count += m.GetHistogram().GetSampleCount()
		sum += m.GetHistogram().GetSampleSum()
	}
	return count, sum
}

// Stage is a histogram that times one stage of an operation: the API
// server's (from its /metrics) or, InProcess, one of controller-runtime's
// registry in this process (a webhook server's request, a controller's
// reconcile or queue wait, client-go's requests).
type Stage struct {
	// Label names the stage in Means' lines.
	Label string
	// Family is the histogram's name; Match the labels its series must have.
	Family    string
	Match     map[string]string
	InProcess bool
}

// StageTotals are the sample counts and sums of some Stages at one moment.
type StageTotals []struct {
	count uint64
	sum   float64
}

// ReadStages reads the totals of stages now, from the API server behind cfg
// and from this process.
func ReadStages(ctx context.Context, cfg *rest.Config, stages []Stage) (StageTotals, error) {
	api, err := APIServerMetrics(ctx, cfg)
	if err != nil {
		return nil, err
	}
	gathered, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return nil, fmt.Errorf("gathering this process's metrics: %w", err)
	}
	local := make(map[string]*dto.MetricFamily, len(gathered))
	for _, f := range gathered {
		local[f.GetName()] = f
	}
	totals := make(StageTotals, len(stages))
	for i, stage := range stages {
		families := api
		if stage.InProcess {
			families = local
		}
		totals[i].count, totals[i].sum = HistogramTotals(families, stage.Family, stage.Match)
	}
	return totals, nil
}

// StageMeans are lines "<label> <mean> µs (<n> samples)", one per stage, of
// the samples taken between before and after (ReadStages of the same
// stages).
func StageMeans(stages []Stage, before, after StageTotals) []string {
	lines := make([]string, 0, len(stages))
	for i, stage := range stages {
		if i >= len(before) || i >= len(after) {
			break
		}
		count, sum := after[i].count-before[i].count, after[i].sum-before[i].sum
		if count == 0 {
			lines = append(lines, fmt.Sprintf("%-72s no samples", stage.Label))
			continue
		}
		lines = append(lines, fmt.Sprintf("%-72s %8.0f µs (%d samples)", stage.Label, sum/float64(count)*1e6, count))
	}
	return lines
}
