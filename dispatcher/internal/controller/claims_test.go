package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

func TestApplyClaimsSpreadsABurst(t *testing.T) {
	oneH100 := Demand{Group: "h100", Type: "compute-xlarge", Count: 1}
	answer := makeAnswer(oneH100).fits("spoke-b", 2).fits("spoke-a", 1).obj()
	workers := workers[:2]
	var claimed []Claim
	var got []string
	for range 4 {
		d := Decide(ApplyClaims([]Answer{answer}, claimed), workers, nil, 1)
		got = append(got, d.Nominate...)
		if len(d.Nominate) == 0 {
			got = append(got, "-")
			continue
		}
		claimed = append(claimed, Claim{HubClusters: d.Nominate, Demands: []Demand{oneH100}})
	}
	// 2 free on spoke-b and 1 on spoke-a: the burst of 4 takes them in
	// turn, most free first, and the 4th waits.
	if diff := cmp.Diff([]string{"spoke-b", "spoke-a", "spoke-b", "-"}, got); diff != "" {
		t.Errorf("nominations of a burst (-want +got):\n%s", diff)
	}
}

func TestApplyClaimsCountsTheSameTargetOnly(t *testing.T) {
	other := Claim{HubClusters: []string{"spoke-b"}, Demands: []Demand{oneSmall}}
	answer := makeAnswer(fourH100).fits("spoke-b", 4).obj()
	d := Decide(ApplyClaims([]Answer{answer}, []Claim{other}), workers, nil, 1)
	if diff := cmp.Diff([]string{"spoke-b"}, d.Nominate); diff != "" {
		t.Errorf("a claim of another type took units (-want +got):\n%s", diff)
	}
}

func TestClaimsEndAfterThePlacementGrace(t *testing.T) {
	c := newClaims(10 * time.Second)
	a, b := types.NamespacedName{Name: "a"}, types.NamespacedName{Name: "b"}
	now := time.Now()
	c.set(a, Claim{HubClusters: []string{"spoke-b"}})
	if others, _ := c.others(b, now); len(others) != 1 {
		t.Fatalf("a nominated workload's claim: got %d claims, want 1", len(others))
	}
	if others, _ := c.others(a, now); len(others) != 0 {
		t.Errorf("a workload's own claim counted against it")
	}
	c.placed(a, now)
	if others, next := c.others(b, now.Add(9*time.Second)); len(others) != 1 || !next.Equal(now.Add(10*time.Second)) {
		t.Errorf("within the grace: %d claims ending %s, want 1 ending %s", len(others), next, now.Add(10*time.Second))
	}
	if others, _ := c.others(b, now.Add(10*time.Second)); len(others) != 0 {
		t.Errorf("after the grace: %d claims, want none", len(others))
	}
	c.set(a, Claim{HubClusters: []string{"spoke-a"}})
	c.drop(a)
	if others, _ := c.others(b, now); len(others) != 0 {
		t.Errorf("a dropped claim still counts")
	}
}

func TestApplyClaimsTakesFromTheCandidatesTypes(t *testing.T) {
	oneXL := Demand{Group: "h100", Type: "compute-xlarge", Count: 1}
	shape := Demand{Shape: &queryv1.ResourceShape{GpuCount: 2}, Count: 2}
	// spoke-a has 3 free units of compute-xlarge; another workload's
	// nomination claims 1, so a workload of 1 unit and 2 of a shape that
	// type satisfies no longer fits there.
	answers := []Answer{
		makeAnswer(shape).fitsWith("spoke-a", typeFree{"h100", "compute-xlarge", 3}).obj(),
		makeAnswer(oneXL).fitsWith("spoke-a", typeFree{"h100", "compute-xlarge", 3}).obj(),
	}
	claimed := []Claim{{HubClusters: []string{"spoke-a"}, Demands: []Demand{oneXL}}}
	if d := Decide(answers, workers, nil, 1); len(d.Nominate) != 1 {
		t.Fatalf("without the claim: nominated %q, want spoke-a", d.Nominate)
	}
	if d := Decide(ApplyClaims(answers, claimed), workers, nil, 1); len(d.Nominate) != 0 {
		t.Errorf("with the claim: nominated %q, want nobody", d.Nominate)
	}
}
