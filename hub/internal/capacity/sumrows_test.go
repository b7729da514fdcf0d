package capacity

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
)

// TestSumFewRowsSumsAsTheRankedSum compares the fast sum of a cluster's few
// matching types with the ranked sum used for many rows, on random rows:
// repeated (group, type) pairs, groups and types out of order, counts up to
// the int32 bounds. A difference would show users other usage figures or
// another order in a FindCapacity candidate than in the fleet's usage.
func TestSumFewRowsSumsAsTheRankedSum(t *testing.T) {
	random := rand.New(rand.NewPCG(21, 2026))
	groups := []string{"gpu", "cpu", "a", "zz", ""}
	types := []string{"t1", "t0", "big", "b", ""}
	count := func() int64 { return random.Int64N(1 << 32) }
	cases := map[string]int{"one row": 1, "two rows": 2, "a cluster's types": 10, "the most rows summed fast": smallRows}
	for name, n := range cases {
		t.Run(name, func(t *testing.T) {
			for round := range 200 {
				rows := make([]typeRow, n)
				for i := range rows {
					rows[i] = typeRow{
						group: groups[random.IntN(len(groups))], typ: types[random.IntN(len(types))],
						maximum: count(), reserved: count(), used: count(), waiting: count(), queued: count(), held: count(), free: count(),
					}
				}
				want := sumRankedRows(rows)
				got := sumFewRows(rows)
				if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
					t.Fatalf("round %d, rows %v: sums differ (-ranked +fast):\n%s", round, fmt.Sprint(rows), diff)
				}
			}
		})
	}
}
