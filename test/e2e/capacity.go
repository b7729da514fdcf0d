package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// CapacityInput configures CapacitySpec.
type CapacityInput struct {
	Env *Env
	// Type is the machine type asked for, Count the units, all in one cluster.
	Type  string
	Count int32
	// WantCluster is the only cluster with Count free units.
	WantCluster string
	// WantExcluded are clusters the answer must leave out, with the reason.
	WantExcluded map[string]queryv1.ExclusionReason
	// TooMany is a count no cluster can take.
	TooMany int32
}

// CapacitySpec is journey 5: `imperatorctl capacity TYPE --count N
// --same-cluster` picks the cluster that has room, says why it left the
// others out, and exits 1 when nothing fits.
func CapacitySpec(ctx context.Context, in CapacityInput) {
	ctl := in.Env.Ctl
	args := []string{in.Type, "--count", strconv.Itoa(int(in.Count)), "--same-cluster"}

	By(fmt.Sprintf("imperatorctl capacity %s", strings.Join(args, " ")))
	Eventually(ctx, func(g Gomega) {
		answer, code, err := ctl.Capacity(ctx, args...)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(BeZero(), "exit code of capacity %v: %v", args, answer)
		g.Expect(answer.GetSatisfiable()).To(BeTrue())
		g.Expect(CandidateNames(answer)).To(HaveExactElements(in.WantCluster), "candidates")
		best := answer.GetCandidates()[0]
		g.Expect(best.GetTake()).To(Equal(in.Count), "units placed in %s", best.GetCluster())
		g.Expect(best.GetFree()).To(BeNumerically(">=", in.Count))
		g.Expect(answer.GetPlaced()).To(Equal(in.Count))
		for cluster, reason := range in.WantExcluded {
			e := ExclusionOf(answer, cluster)
			g.Expect(e).NotTo(BeNil(), "%s is excluded", cluster)
			g.Expect(e.GetReason()).To(Equal(reason), "why %s is excluded: %s", cluster, e.GetMessage())
		}
	}).WithTimeout(joinTimeout).WithPolling(poll).Should(Succeed())

	By(fmt.Sprintf("%d units fit nowhere: capacity exits 1", in.TooMany))
	answer, code, err := ctl.Capacity(ctx, in.Type, "--count", strconv.Itoa(int(in.TooMany)), "--same-cluster")
	Expect(err).NotTo(HaveOccurred())
	Expect(code).To(Equal(1), "exit code when %d × %s fit nowhere", in.TooMany, in.Type)
	Expect(answer.GetSatisfiable()).To(BeFalse())
	Expect(CandidateNames(answer)).To(BeEmpty())
	Expect(ExclusionOf(answer, in.WantCluster).GetReason()).To(Equal(queryv1.ExclusionReason_EXCLUSION_REASON_NOT_ENOUGH))
}
