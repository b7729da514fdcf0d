package capacity

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/imperator-federation/imperator/hub/internal/store"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// fleet builds n clusters with 2 Machines of 5 machine types each (10 types
// per cluster, as the federation load benchmark); one cluster in 20 is
// offline and the free units vary from cluster to cluster.
func fleet(n int) []*store.Cluster {
	products := []string{"NVIDIA-GeForce-RTX-3090", "NVIDIA-A100", "NVIDIA-H100"}
	families := []string{"ampere", "ampere", "hopper"}
	out := make([]*store.Cluster, 0, n)
	for i := range n {
		w := makeCluster(fmt.Sprintf("cluster-%05d", i))
		if i%20 == 7 {
			w.Offline(10 * time.Minute)
		}
		for _, group := range []string{"gpu", "cpu"} {
			var types []*federationv1.MachineType
			for j := range 5 {
				t := makeType(fmt.Sprintf("%s-%d", group, j)).Shape(fmt.Sprint(4*(j+1)), fmt.Sprintf("%dGi", 16*(j+1)))
				if group == "gpu" {
					t.GPU(int32(j%4+1), products[(i+j)%3], families[(i+j)%3])
				}
				maximum := int32(8)
				types = append(types, t.Usage(maximum, int32((i+j)%9)%maximum, 0).Obj())
			}
			w.Machine(group, group+"-team", types...)
		}
		out = append(out, w.Obj())
	}
	return out
}

var sizes = []int{10, 1000, 10000}

func BenchmarkFindCapacity(b *testing.B) {
	requests := map[string]Request{
		"type-same-cluster": {Type: "gpu-2", Count: 4},
		"type-spread":       {Type: "gpu-2", Count: 50, Spread: true},
		"shape-gpu-product": {Shape: &Shape{MilliCPU: 8000, MemoryBytes: 32 << 30, GPUs: 2, GPUProduct: "NVIDIA-A100"}, Count: 4},
	}
	for _, n := range sizes {
		clusters := fleet(n)
		for name, req := range requests {
			b.Run(fmt.Sprintf("clusters=%d/%s", n, name), func(b *testing.B) {
				b.ReportAllocs()
				var took []time.Duration
				for b.Loop() {
					start := time.Now()
					Find(clusters, req, now)
					took = append(took, time.Since(start))
				}
				reportP99(b, took)
			})
		}
	}
}

func BenchmarkListMachines(b *testing.B) {
	filters := map[string]Filter{
		"all":         {},
		"gpu-product": {GPUProduct: "NVIDIA-H100"},
	}
	for _, n := range sizes {
		clusters := fleet(n)
		for name, f := range filters {
			b.Run(fmt.Sprintf("clusters=%d/%s", n, name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					Machines(clusters, f)
				}
			})
		}
	}
}

// reportP99 adds the 99th percentile of one call's duration to the result.
func reportP99(b *testing.B, took []time.Duration) {
	if len(took) == 0 {
		return
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
}
