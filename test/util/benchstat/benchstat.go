// Package benchstat holds the statistics the project's benchmarks report:
// percentiles of measured latencies, and quantiles of Prometheus histograms
// scraped from a process under test (the difference of two scrapes, for a
// window), interpolated as PromQL's histogram_quantile does.
package benchstat

import (
	"math"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// Percentile is the p-th (0 ≤ p ≤ 1) percentile of sorted: the element at
// index ⌊p·n⌋, the last for p = 1; 0 for no samples.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	// Rounded to a millionth first: 0.29·100 is 28.999… in floating point.
	i := int(math.Floor(math.Round(p*float64(len(sorted))*1e6) / 1e6))
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// NearestRank is the p-th (0 < p ≤ 1) percentile of sorted by the nearest
// rank: the smallest sample at or below which a share p of them lie, index
// ⌈p·n⌉-1; 0 for no samples.
func NearestRank(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(math.Round(p*float64(len(sorted))*1e6)/1e6)) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// RoundedRank is the q-quantile (0 < q ≤ 1) of sorted at rank q·n rounded
// half up, index ⌊q·n+½⌋-1; 0 for no samples. It is the nearest rank
// except where q·n has a fraction below ½ (p99 of 60: index 58, where
// NearestRank takes 59): the dispatch benchmark reports it so, and keeps it
// for figures comparable with earlier runs.
func RoundedRank(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Sorted is a sorted copy of samples.
func Sorted(samples []time.Duration) []time.Duration {
	s := slices.Clone(samples)
	slices.Sort(s)
	return s
}

// Milliseconds is d in (fractional) milliseconds, as benchmarks report it.
func Milliseconds(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Histogram is the cumulative counts of a Prometheus histogram by upper
// bound, summed over every series of one metric family.
type Histogram struct {
	Bounds []float64
	Counts []uint64
	Total  uint64
}

// HistogramOf sums the histograms of every series of family (an empty
// Histogram for nil). Series whose buckets differ from the first's are
// summed over the first's bounds.
func HistogramOf(family *dto.MetricFamily) Histogram {
	var out Histogram
	for _, m := range family.GetMetric() {
		h := m.GetHistogram()
		if out.Bounds == nil {
			for _, bk := range h.GetBucket() {
				out.Bounds = append(out.Bounds, bk.GetUpperBound())
			}
			out.Counts = make([]uint64, len(out.Bounds))
		}
		for i, bk := range h.GetBucket() {
			if i < len(out.Counts) {
				out.Counts[i] += bk.GetCumulativeCount()
			}
		}
		out.Total += h.GetSampleCount()
	}
	return out
}

// Since is what h counted after earlier, a scrape of the same histogram
// taken before it.
func (h Histogram) Since(earlier Histogram) Histogram {
	out := Histogram{Bounds: h.Bounds, Counts: make([]uint64, len(h.Counts)), Total: h.Total - earlier.Total}
	for i := range h.Counts {
		out.Counts[i] = h.Counts[i]
		if i < len(earlier.Counts) {
			out.Counts[i] -= earlier.Counts[i]
		}
	}
	return out
}

// Quantile interpolates the q-quantile within its bucket, as PromQL's
// histogram_quantile does, and returns it with the sample count (0, 0
// without samples; the last finite bound for samples beyond it).
func (h Histogram) Quantile(q float64) (float64, uint64) {
	if h.Total == 0 {
		return 0, 0
	}
	rank := q * float64(h.Total)
	lower, below := 0.0, uint64(0)
	for i, bound := range h.Bounds {
		if float64(h.Counts[i]) >= rank {
			in := h.Counts[i] - below
			if in == 0 || math.IsInf(bound, 1) {
				return lower, h.Total
			}
			return lower + (bound-lower)*(rank-float64(below))/float64(in), h.Total
		}
		lower, below = bound, h.Counts[i]
	}
	return lower, h.Total
}
