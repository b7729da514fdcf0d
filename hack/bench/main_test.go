package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkFleet/spokes=1000-2         	      20	  51234567 ns/op	       136.0 propagation-p50-ms	       388.0 propagation-p99-ms	       402.5 rss-MiB
BenchmarkHandle-2   	    2000	    242012 ns/op	   51700 B/op	     789 allocs/op
BenchmarkPodCreate/with-webhook-2    	     300	   8100 p50-µs
BenchmarkPodCreate/without-webhook-2 	     300	   3600 p50-µs
--- FAIL: BenchmarkBroken
BenchmarkFleetHold-2   	I1125 22:23:52.997457   15204 leaderelection.go:258] "Attempting to acquire leader lease..."
I1125 22:23:53.100000   15204 leaderelection.go:272] "Successfully acquired lease"
      50	        28.23 p50-ms	       124.7 p99-ms	  236041 B/op	    3188 allocs/op
PASS
`

func TestParseReadsEveryFigureOfEveryResultLine(t *testing.T) {
	figures := parse(strings.NewReader(sample))
	want := map[string]float64{
		"BenchmarkFleet/spokes=1000 propagation-p99-ms": 388,
		"BenchmarkFleet/spokes=1000 rss-MiB":            402.5,
		"BenchmarkFleet/spokes=1000 ns/op":              51234567,
		"BenchmarkHandle allocs/op":                     789,
		"BenchmarkHandle B/op":                          51700,
		"BenchmarkPodCreate/with-webhook p50-µs":        8100,
		"BenchmarkFleetHold p99-ms":                     124.7,
	}
	got := map[string]float64{}
	for _, f := range figures {
		got[f.Bench+" "+f.Unit] = f.Value
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (parsed %v)", k, got[k], v, figures)
		}
	}
	if len(figures) != 13 {
		t.Errorf("parsed %d figures, want 13: %v", len(figures), figures)
	}
}

func TestJudgeSaysPassFailMissingAndSkipped(t *testing.T) {
	figures := parse(strings.NewReader(sample))
	goals := []goal{
		{metric: "p99 met", bench: "BenchmarkFleet/spokes=1000", unit: "propagation-p99-ms", max: 1000},
		{metric: "allocs missed", bench: "BenchmarkHandle", unit: "allocs/op", max: 100},
		{metric: "ratio missed", bench: "BenchmarkPodCreate/with-webhook", over: "BenchmarkPodCreate/without-webhook", unit: "p50-µs", max: 1.3},
		{metric: "no benchmark", bench: "BenchmarkSpokeAtScale", unit: "converge-s", max: 30},
		{metric: "full only", bench: "BenchmarkFleet/spokes=10000", unit: "rss-MiB", max: 2048, full: true},
	}
	want := []string{"PASS", "FAIL", "FAIL", "MISSING", "SKIPPED"}
	verdicts := judge(goals, figures, false)
	for i, v := range verdicts {
		if v.Status != want[i] {
			t.Errorf("%s: %s, want %s", v.Metric, v.Status, want[i])
		}
	}
	if r := verdicts[2]; r.Figure == nil || *r.Figure != 2.25 {
		t.Errorf("ratio figure = %v, want 8100/3600 = 2.25", r.Figure)
	}
	if v := judge(goals[4:], figures, true)[0]; v.Status != "MISSING" {
		t.Errorf("a full-only goal without its figure in a full run: %s, want MISSING", v.Status)
	}
}

func TestEveryGoalIsComplete(t *testing.T) {
	for _, g := range goals {
		if g.max <= 0 || g.unit == "" || !strings.HasPrefix(g.bench, "Benchmark") || g.issue == "" {
			t.Errorf("goal %q is incomplete: %+v", g.metric, g)
		}
	}
}

func TestReadableFiguresHaveNoExponents(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		unit string
		want string
	}{
		{3.181e7, "p99-ns", "31.8 p99-ms"},
		{160600, "ns/op", "161 µs/op"},
		{792, "allocs/op", "792 allocs/op"},
		{2.745, "× p50-µs", "2.75 × p50-µs"},
		{50e6, "p99-ns", "50.0 p99-ms"},
		{400, "connections/s", "400 connections/s"},
	} {
		if got := readable(tc.v, tc.unit); got != tc.want {
			t.Errorf("readable(%v, %q) = %q, want %q", tc.v, tc.unit, got, tc.want)
		}
	}
}
