package benchstat

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/utils/ptr"
)

// ms is 1..n milliseconds, sorted.
func ms(n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i+1) * time.Millisecond
	}
	return out
}

func TestPercentiles(t *testing.T) {
	cases := map[string]struct {
		samples         []time.Duration
		p               float64
		wantPercentile  time.Duration
		wantNearestRank time.Duration
	}{
		"no samples":               {samples: nil, p: 0.99, wantPercentile: 0, wantNearestRank: 0},
		"one sample":               {samples: ms(1), p: 0.5, wantPercentile: time.Millisecond, wantNearestRank: time.Millisecond},
		"median of 10":             {samples: ms(10), p: 0.5, wantPercentile: 6 * time.Millisecond, wantNearestRank: 5 * time.Millisecond},
		"p90 of 10":                {samples: ms(10), p: 0.9, wantPercentile: 10 * time.Millisecond, wantNearestRank: 9 * time.Millisecond},
		"p99 of 100":               {samples: ms(100), p: 0.99, wantPercentile: 100 * time.Millisecond, wantNearestRank: 99 * time.Millisecond},
		"p99 of 50":                {samples: ms(50), p: 0.99, wantPercentile: 50 * time.Millisecond, wantNearestRank: 50 * time.Millisecond},
		"p29 of 100 (float 28.9…)": {samples: ms(100), p: 0.29, wantPercentile: 30 * time.Millisecond, wantNearestRank: 29 * time.Millisecond},
		"p99 of 1000":              {samples: ms(1000), p: 0.99, wantPercentile: 991 * time.Millisecond, wantNearestRank: 990 * time.Millisecond},
		"p100 is the maximum":      {samples: ms(7), p: 1, wantPercentile: 7 * time.Millisecond, wantNearestRank: 7 * time.Millisecond},
		"p0 is the minimum":        {samples: ms(7), p: 0, wantPercentile: time.Millisecond, wantNearestRank: time.Millisecond},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Percentile(tc.samples, tc.p); got != tc.wantPercentile {
				t.Errorf("Percentile(%d samples, %v) = %v, want %v", len(tc.samples), tc.p, got, tc.wantPercentile)
			}
			if got := NearestRank(tc.samples, tc.p); got != tc.wantNearestRank {
				t.Errorf("NearestRank(%d samples, %v) = %v, want %v", len(tc.samples), tc.p, got, tc.wantNearestRank)
			}
		})
	}
}

// The integer formulas the benchmarks used before agree with the functions
// for every size up to 2,000.
func TestPercentilesMatchIntegerRanks(t *testing.T) {
	for n := 1; n <= 2000; n++ {
		s := ms(n)
		if got, want := Percentile(s, 0.99), s[n*99/100]; got != want {
			t.Fatalf("n=%d: Percentile(0.99) = %v, want s[n*99/100] = %v", n, got, want)
		}
		if got, want := Percentile(s, 0.9), s[n*9/10]; got != want {
			t.Fatalf("n=%d: Percentile(0.9) = %v, want s[n*9/10] = %v", n, got, want)
		}
		if got, want := NearestRank(s, 0.99), s[(n*99+99)/100-1]; got != want {
			t.Fatalf("n=%d: NearestRank(0.99) = %v, want s[(n*99+99)/100-1] = %v", n, got, want)
		}
	}
}

func TestRoundedRank(t *testing.T) {
	cases := map[string]struct {
		samples []time.Duration
		q       float64
		want    time.Duration
	}{
		"no samples":   {samples: nil, q: 0.99, want: 0},
		"one sample":   {samples: ms(1), q: 0.5, want: time.Millisecond},
		"median of 20": {samples: ms(20), q: 0.5, want: 10 * time.Millisecond},
		"p99 of 20":    {samples: ms(20), q: 0.99, want: 20 * time.Millisecond},
		// 59.4 rounds down to rank 59, where the nearest rank is 60.
		"p99 of 60":           {samples: ms(60), q: 0.99, want: 59 * time.Millisecond},
		"p99 of 200":          {samples: ms(200), q: 0.99, want: 198 * time.Millisecond},
		"p100 is the maximum": {samples: ms(7), q: 1, want: 7 * time.Millisecond},
		"p0 is the minimum":   {samples: ms(7), q: 0, want: time.Millisecond},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := RoundedRank(tc.samples, tc.q); got != tc.want {
				t.Errorf("RoundedRank(%d samples, %v) = %v, want %v", len(tc.samples), tc.q, got, tc.want)
			}
		})
	}
}

// The dispatch benchmark's integer rank, q·n rounded half up, agrees with
// RoundedRank for every size up to 2,000, and with NearestRank for the
// median.
func TestRoundedRankMatchesIntegerRanks(t *testing.T) {
	for n := 1; n <= 2000; n++ {
		s := ms(n)
		if got, want := RoundedRank(s, 0.99), s[max((n*99+50)/100-1, 0)]; got != want {
			t.Fatalf("n=%d: RoundedRank(0.99) = %v, want s[(n*99+50)/100-1] = %v", n, got, want)
		}
		if got, want := RoundedRank(s, 0.5), NearestRank(s, 0.5); got != want {
			t.Fatalf("n=%d: RoundedRank(0.5) = %v, NearestRank(0.5) = %v", n, got, want)
		}
	}
}

func TestSortedLeavesItsInputAlone(t *testing.T) {
	in := []time.Duration{3, 1, 2}
	if diff := cmp.Diff([]time.Duration{1, 2, 3}, Sorted(in)); diff != "" {
		t.Errorf("Sorted (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]time.Duration{3, 1, 2}, in); diff != "" {
		t.Errorf("Sorted changed its input (-want +got):\n%s", diff)
	}
}

// histogram is a histogram series with cumulative counts by bound.
func histogram(bounds []float64, cumulative []uint64, total uint64) *dto.Metric {
	h := &dto.Histogram{SampleCount: ptr.To(total)}
	for i, b := range bounds {
		h.Bucket = append(h.Bucket, &dto.Bucket{UpperBound: ptr.To(b), CumulativeCount: ptr.To(cumulative[i])})
	}
	return &dto.Metric{Histogram: h}
}

func TestHistogramQuantile(t *testing.T) {
	bounds := []float64{0.1, 0.2, 0.4, math.Inf(1)}
	cases := map[string]struct {
		hist      Histogram
		q         float64
		want      float64
		wantCount uint64
	}{
		"no samples": {hist: Histogram{Bounds: bounds, Counts: make([]uint64, 4)}, q: 0.99, want: 0, wantCount: 0},
		// 100 samples, all in (0.1, 0.2]: the median is halfway through it.
		"median inside a bucket": {hist: Histogram{Bounds: bounds, Counts: []uint64{0, 100, 100, 100}, Total: 100}, q: 0.5, want: 0.15, wantCount: 100},
		// 10 in the first bucket, 90 in (0.2, 0.4]: p99 is 0.2 + 0.2·89/90.
		"p99 in a later bucket": {hist: Histogram{Bounds: bounds, Counts: []uint64{10, 10, 100, 100}, Total: 100}, q: 0.99, want: 0.2 + 0.2*89.0/90.0, wantCount: 100},
		// Beyond the last finite bound: that bound.
		"p99 beyond the last finite bound": {hist: Histogram{Bounds: bounds, Counts: []uint64{0, 0, 50, 100}, Total: 100}, q: 0.99, want: 0.4, wantCount: 100},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, count := tc.hist.Quantile(tc.q)
			if math.Abs(got-tc.want) > 1e-12 || count != tc.wantCount {
				t.Errorf("Quantile(%v) = %v, %d; want %v, %d", tc.q, got, count, tc.want, tc.wantCount)
			}
		})
	}
}

// Two scrapes of two series: the window is the difference of their sums.
func TestHistogramOfAndSince(t *testing.T) {
	bounds := []float64{0.1, 0.2, math.Inf(1)}
	before := HistogramOf(&dto.MetricFamily{Metric: []*dto.Metric{
		histogram(bounds, []uint64{1, 2, 2}, 2),
		histogram(bounds, []uint64{0, 1, 3}, 3),
	}})
	after := HistogramOf(&dto.MetricFamily{Metric: []*dto.Metric{
		histogram(bounds, []uint64{5, 6, 6}, 6),
		histogram(bounds, []uint64{0, 3, 5}, 5),
	}})
	if diff := cmp.Diff(Histogram{Bounds: bounds, Counts: []uint64{1, 3, 5}, Total: 5}, before); diff != "" {
		t.Errorf("HistogramOf before (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(Histogram{Bounds: bounds, Counts: []uint64{4, 6, 6}, Total: 6}, after.Since(before)); diff != "" {
		t.Errorf("Since (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(Histogram{}, HistogramOf(nil)); diff != "" {
		t.Errorf("HistogramOf(nil) (-want +got):\n%s", diff)
	}
}
