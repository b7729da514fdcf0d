package controller

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// answer builds the hub's answer to d: candidates best first, then exclusions.
type answerBuilder struct{ a Answer }

func makeAnswer(d Demand) *answerBuilder {
	return &answerBuilder{a: Answer{Demand: d, Response: &queryv1.FindCapacityResponse{Count: d.Count}}}
}

func (b *answerBuilder) fits(cluster string, free int32) *answerBuilder {
	b.a.Response.Candidates = append(b.a.Response.Candidates, &queryv1.CapacityCandidate{Cluster: cluster, Free: free})
	b.a.Response.Satisfiable = true
	return b
}

func (b *answerBuilder) excluded(cluster string, reason queryv1.ExclusionReason, free int32, message string) *answerBuilder {
	b.a.Response.Excluded = append(b.a.Response.Excluded, &queryv1.Exclusion{Cluster: cluster, Reason: reason, Free: free, Message: message})
	return b
}

func (b *answerBuilder) obj() Answer { return b.a }

var (
	fourH100 = Demand{Group: "h100", Type: "compute-xlarge", Count: 4}
	oneSmall = Demand{Group: "cpu", Type: "small", Count: 1}
	workers  = []Worker{{Name: "spoke-a", HubCluster: "spoke-a"}, {Name: "spoke-b", HubCluster: "spoke-b"}, {Name: "tokyo", HubCluster: "ap-1"}}
)

func TestDecide(t *testing.T) {
	notEnough := queryv1.ExclusionReason_EXCLUSION_REASON_NOT_ENOUGH
	offline := queryv1.ExclusionReason_EXCLUSION_REASON_OFFLINE
	cases := map[string]struct {
		answers     []Answer
		workers     []Worker
		current     []string
		limit       int
		want        Decision
		wantReasons []string
	}{
		"only spoke-b has room: it alone is nominated": {
			answers: []Answer{makeAnswer(fourH100).fits("spoke-b", 6).excluded("spoke-a", notEnough, 2, "").obj()},
			workers: workers,
			want:    Decision{Nominate: []string{"spoke-b"}, Write: true},
		},
		"best first, by the hub's ranking, with the MultiKueueCluster named by label": {
			answers: []Answer{makeAnswer(fourH100).fits("ap-1", 8).fits("spoke-b", 6).fits("spoke-a", 4).obj()},
			workers: workers,
			want:    Decision{Nominate: []string{"tokyo", "spoke-b", "spoke-a"}, Write: true},
		},
		"within the limit": {
			answers: []Answer{makeAnswer(fourH100).fits("ap-1", 8).fits("spoke-b", 6).fits("spoke-a", 4).obj()},
			workers: workers,
			limit:   1,
			want:    Decision{Nominate: []string{"tokyo"}, Write: true},
		},
		"a cluster must take every demand of the workload": {
			answers: []Answer{
				makeAnswer(fourH100).fits("spoke-a", 8).fits("spoke-b", 6).obj(),
				makeAnswer(oneSmall).fits("spoke-b", 3).excluded("spoke-a", notEnough, 0, "").obj(),
			},
			workers: workers,
			want:    Decision{Nominate: []string{"spoke-b"}, Write: true},
		},
		"a fleet cluster that is no MultiKueueCluster of the config is not nominated": {
			answers: []Answer{makeAnswer(fourH100).fits("eu-1", 8).fits("spoke-a", 4).obj()},
			workers: workers,
			want:    Decision{Nominate: []string{"spoke-a"}, Write: true},
		},
		"a nomination whose clusters all still fit is kept, even when the ranking changed": {
			answers: []Answer{makeAnswer(fourH100).fits("spoke-a", 8).fits("spoke-b", 6).obj()},
			workers: workers,
			current: []string{"spoke-b"},
			want:    Decision{Nominate: []string{"spoke-b"}},
		},
		"a nominated cluster that stopped fitting is replaced": {
			answers: []Answer{makeAnswer(fourH100).fits("spoke-a", 8).excluded("spoke-b", notEnough, 1, "").obj()},
			workers: workers,
			current: []string{"spoke-b"},
			want:    Decision{Nominate: []string{"spoke-a"}, Write: true},
		},
		"a nominated cluster gone offline is withdrawn, and nobody else fits": {
			answers: []Answer{makeAnswer(fourH100).excluded("spoke-a", notEnough, 0, "").excluded("spoke-b", offline, 6, "offline since 3m0s").obj()},
			workers: workers[:2],
			current: []string{"spoke-b"},
			want:    Decision{Write: true},
			wantReasons: []string{"no worker cluster has room for 4 units of h100/compute-xlarge now",
				"spoke-a: 0 free of the 4 wanted", "spoke-b: offline since 3m0s"},
		},
		"no fit and nothing nominated: nothing to write, the reason names each worker": {
			answers: []Answer{makeAnswer(fourH100).excluded("spoke-a", notEnough, 2, "").obj()},
			workers: workers,
			want:    Decision{},
			wantReasons: []string{"spoke-a: 2 free of the 4 wanted (4 units of h100/compute-xlarge)",
				`spoke-b: the hub knows no cluster "spoke-b"`, `tokyo: the hub knows no cluster "ap-1"`},
		},
		"a config without clusters": {
			answers:     []Answer{makeAnswer(fourH100).fits("spoke-a", 4).obj()},
			want:        Decision{},
			wantReasons: []string{"the MultiKueueConfig names no MultiKueueCluster"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Decide(tc.answers, tc.workers, tc.current, tc.limit)
			reason := got.Reason
			got.Reason = ""
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Decide() (-want +got):\n%s", diff)
			}
			if len(tc.want.Nominate) > 0 && reason != "" {
				t.Errorf("Decide() reason %q with a nomination", reason)
			}
			for _, r := range tc.wantReasons {
				if !strings.Contains(reason, r) {
					t.Errorf("Decide() reason %q, want it to contain %q", reason, r)
				}
			}
		})
	}
}

// fitsWith adds a candidate whose free units are those of the given types
// ("group/type" → free), as the hub lists them.
func (b *answerBuilder) fitsWith(cluster string, types ...typeFree) *answerBuilder {
	c := &queryv1.CapacityCandidate{Cluster: cluster}
	for _, t := range types {
		c.Types = append(c.Types, &queryv1.TypeUsage{Group: t.group, Type: t.typ, Free: t.free})
		c.Free += t.free
	}
	b.a.Response.Candidates = append(b.a.Response.Candidates, c)
	b.a.Response.Satisfiable = true
	return b
}

type typeFree struct {
	group, typ string
	free       int32
}

func TestDecideTakesTheDemandsOfOneWorkloadFromTheSameUnits(t *testing.T) {
	xl := func(free int32) typeFree { return typeFree{"h100", "compute-xlarge", free} }
	small := func(free int32) typeFree { return typeFree{"cpu", "small", free} }
	threeXL := Demand{Group: "h100", Type: "compute-xlarge", Count: 3}
	twoGPUShape := func(n int32) Demand {
		return Demand{Shape: &queryv1.ResourceShape{GpuCount: 2}, Count: n}
	}
	twoCPUShape := func(n int32) Demand { return Demand{Shape: &queryv1.ResourceShape{Cpu: "2"}, Count: n} }
	cases := map[string]struct {
		answers []Answer
		want    []string
	}{
		"a type and a shape it satisfies: 3 + 2 of the type do not fit in 4": {
			answers: []Answer{
				makeAnswer(threeXL).fitsWith("spoke-a", xl(4)).fitsWith("spoke-b", xl(5)).obj(),
				makeAnswer(twoGPUShape(2)).fitsWith("spoke-a", xl(4)).fitsWith("spoke-b", xl(5)).obj(),
			},
			want: []string{"spoke-b"},
		},
		"a shape listed first still leaves the type its units": {
			answers: []Answer{
				makeAnswer(twoGPUShape(3)).fitsWith("spoke-a", xl(4)).fitsWith("spoke-b", xl(6)).obj(),
				makeAnswer(Demand{Group: "h100", Type: "compute-xlarge", Count: 2}).fitsWith("spoke-a", xl(4)).fitsWith("spoke-b", xl(6)).obj(),
			},
			want: []string{"spoke-b"},
		},
		"two shapes resolving to the same type": {
			answers: []Answer{
				makeAnswer(twoGPUShape(3)).fitsWith("spoke-b", xl(5)).fitsWith("spoke-a", xl(3)).obj(),
				makeAnswer(twoCPUShape(2)).fitsWith("spoke-b", xl(5)).fitsWith("spoke-a", xl(3)).obj(),
			},
			want: []string{"spoke-b"},
		},
		"a type named with its group and without it": {
			answers: []Answer{
				makeAnswer(threeXL).fitsWith("spoke-a", xl(4)).obj(),
				makeAnswer(Demand{Type: "compute-xlarge", Count: 2}).fitsWith("spoke-a", xl(4)).obj(),
			},
			want: nil,
		},
		"a shape takes another matching type when the type demand used its own": {
			answers: []Answer{
				makeAnswer(threeXL).fitsWith("spoke-a", xl(3)).obj(),
				makeAnswer(twoCPUShape(2)).fitsWith("spoke-a", xl(3), small(2)).obj(),
			},
			want: []string{"spoke-a"},
		},
		"demands of different types do not take from each other": {
			answers: []Answer{
				makeAnswer(threeXL).fitsWith("spoke-a", xl(3)).obj(),
				makeAnswer(Demand{Group: "cpu", Type: "small", Count: 2}).fitsWith("spoke-a", small(2)).obj(),
			},
			want: []string{"spoke-a"},
		},
		"the order of the nomination is still the first demand's ranking": {
			answers: []Answer{
				makeAnswer(twoGPUShape(2)).fitsWith("spoke-b", xl(9)).fitsWith("spoke-a", xl(6)).fitsWith("ap-1", xl(4)).obj(),
				makeAnswer(threeXL).fitsWith("spoke-b", xl(9)).fitsWith("spoke-a", xl(6)).fitsWith("ap-1", xl(4)).obj(),
			},
			want: []string{"spoke-b", "spoke-a"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Decide(tc.answers, workers, nil, 0)
			if diff := cmp.Diff(tc.want, got.Nominate); diff != "" {
				t.Errorf("Decide() nominated (-want +got):\n%s", diff)
			}
			if len(tc.want) == 0 && got.Reason == "" {
				t.Errorf("Decide() nominated nobody without a reason")
			}
		})
	}
}

func TestFitTogetherFindsEveryFit(t *testing.T) {
	x := func(free int32) typeFree { return typeFree{"g", "x", free} }
	y := func(free int32) typeFree { return typeFree{"g", "y", free} }
	z := func(free int32) typeFree { return typeFree{"g", "z", free} }
	shape := func(gpus, n int32) Demand { return Demand{Shape: &queryv1.ResourceShape{GpuCount: gpus}, Count: n} }
	// shapes returns n one-unit shape demands, each served by types on cluster c.
	shapes := func(n int, types ...typeFree) []Answer {
		var out []Answer
		for i := range n {
			out = append(out, makeAnswer(shape(int32(i+1), 1)).fitsWith("c", types...).obj())
		}
		return out
	}
	cases := map[string]struct {
		answers []Answer
		want    bool
	}{
		"the review's case: A (2) on x or y, B (3) only on y; A on x and B on y": {
			answers: []Answer{
				makeAnswer(shape(1, 2)).fitsWith("c", x(2), y(3)).obj(),
				makeAnswer(shape(2, 3)).fitsWith("c", y(3)).obj(),
			},
			want: true,
		},
		"three shapes sharing two types: A and B on x, C on y": {
			answers: []Answer{
				makeAnswer(shape(1, 2)).fitsWith("c", x(3), y(3)).obj(),
				makeAnswer(shape(2, 1)).fitsWith("c", x(3), y(3)).obj(),
				makeAnswer(shape(4, 3)).fitsWith("c", y(3)).obj(),
			},
			want: true,
		},
		"a shape splits across two types to leave another its only type": {
			answers: []Answer{
				makeAnswer(shape(1, 3)).fitsWith("c", x(2), y(3)).obj(),
				makeAnswer(shape(2, 2)).fitsWith("c", y(3)).obj(),
			},
			want: true,
		},
		"a shape alone larger than each of its types fits across them": {
			answers: []Answer{makeAnswer(shape(1, 4)).fitsWith("c", x(2), y(2)).obj()},
			want:    true,
		},
		"enough units in all, but two shapes want more than the types they may use": {
			answers: []Answer{
				makeAnswer(shape(1, 2)).fitsWith("c", x(1), y(2)).obj(),
				makeAnswer(shape(2, 2)).fitsWith("c", x(1), y(2)).obj(),
				makeAnswer(shape(4, 1)).fitsWith("c", x(1), z(5)).obj(),
			},
			want: false,
		},
		"a type demand takes its own type first; the shape takes the rest of it and another": {
			answers: []Answer{
				makeAnswer(shape(1, 2)).fitsWith("c", x(4), y(1)).obj(),
				makeAnswer(Demand{Group: "g", Type: "x", Count: 3}).fitsWith("c", x(4)).obj(),
			},
			want: true,
		},
		"a type demand and a shape wanting one unit more than there is": {
			answers: []Answer{
				makeAnswer(shape(1, 3)).fitsWith("c", x(4), y(1)).obj(),
				makeAnswer(Demand{Group: "g", Type: "x", Count: 3}).fitsWith("c", x(4)).obj(),
			},
			want: false,
		},
		"a cluster missing from one answer does not fit": {
			answers: []Answer{
				makeAnswer(shape(1, 1)).fitsWith("c", x(4)).obj(),
				makeAnswer(shape(2, 1)).fitsWith("d", x(4)).obj(),
			},
			want: false,
		},
		"a duplicate candidate is counted once": {
			answers: []Answer{makeAnswer(shape(1, 3)).fitsWith("c", x(2)).fitsWith("c", x(2)).obj()},
			want:    false,
		},
		"negative free units count as none": {
			answers: []Answer{makeAnswer(shape(1, 1)).fitsWith("c", x(-3), y(1)).obj()},
			want:    true,
		},
		"at the bound (12 shapes), checked exactly: fits": {
			answers: shapes(maxChoiceDemands, x(6), y(6)),
			want:    true,
		},
		"at the bound (12 shapes), checked exactly: one unit short": {
			answers: shapes(maxChoiceDemands, x(6), y(5)),
			want:    false,
		},
		"beyond the bound (13 shapes), taken in turn: fits": {
			answers: shapes(maxChoiceDemands+1, x(7), y(6)),
			want:    true,
		},
		"beyond the bound (13 shapes), taken in turn: one unit short": {
			answers: shapes(maxChoiceDemands+1, x(6), y(6)),
			want:    false,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := fitTogether(tc.answers)["c"]; got != tc.want {
				t.Errorf("fitTogether()[c] = %v, want %v", got, tc.want)
			}
		})
	}
}

// BenchmarkFitTogetherAtTheBound is the most work fitTogether does per
// cluster exactly: maxChoiceDemands shapes over 8 types each, on 20 clusters.
func BenchmarkFitTogetherAtTheBound(b *testing.B) {
	var types []typeFree
	for i := range 8 {
		types = append(types, typeFree{"g", fmt.Sprintf("t%d", i), 2})
	}
	var answers []Answer
	for i := range maxChoiceDemands {
		ab := makeAnswer(Demand{Shape: &queryv1.ResourceShape{GpuCount: int32(i + 1)}, Count: 1})
		for c := range 20 {
			ab.fitsWith(fmt.Sprintf("c%d", c), types...)
		}
		answers = append(answers, ab.obj())
	}
	b.ResetTimer()
	for b.Loop() {
		if fits := fitTogether(answers); len(fits) != 20 {
			b.Fatalf("fitTogether() fits %d clusters, want 20", len(fits))
		}
	}
}
