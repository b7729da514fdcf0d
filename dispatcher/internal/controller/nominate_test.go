package controller

import (
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
