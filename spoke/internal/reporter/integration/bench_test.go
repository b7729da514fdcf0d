package integration

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/test/util/benchstat"
	"github.com/imperator-federation/imperator/test/util/framework"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// BenchmarkReportPropagation measures how long a change of a spoke Machine's
// status takes to reach the hub's answers: from the status write on the
// spoke's API server until the hub's index (which FindCapacity and the
// query API read) shows the new usage. One real hub cluster and hub, one
// spoke API server and its reporter joined with a bootstrap token, as the
// agent runs it. Each iteration is a lone change after a quiet period longer
// than the reporter's debounce, so it goes out on the leading edge; it
// reports the median and 99th percentile. Run with
//
//	go test ./spoke/internal/reporter/integration/ -run '^$' -bench ReportPropagation -benchtime 50x
func BenchmarkReportPropagation(b *testing.B) {
	ctrl.SetLogger(logr.Discard())
	ctx := context.Background()
	hubOptions, err := hubtest.ClusterOptions()
	if err != nil {
		b.Fatal(err)
	}
	hubEnv := startBench(b, hubOptions)
	caFile, err := hubtest.WriteCAFile(ctx, hubEnv.Client, agentNamespace, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	h, err := hubtest.Start(hubEnv.Config, hubtest.Options{Namespace: agentNamespace})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := h.Stop(); err != nil {
			b.Error(err)
		}
	})

	s := &spoke{name: "bench", caFile: caFile, tokenFile: filepath.Join(b.TempDir(), "token")}
	s.Environment = startBench(b, framework.Options{CRDs: framework.SpokeCRDs, Namespaces: []string{agentNamespace}})
	if s.token, err = hubtest.CreateToken(ctx, hubEnv.Client, agentNamespace, time.Hour, ""); err != nil {
		b.Fatal(err)
	}
	if err := s.Client.Create(ctx, wrappers.GeneralMachine().Obj()); err != nil {
		b.Fatal(err)
	}
	if err := s.startReporter(h.Address()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := s.stopReporter(); err != nil {
			b.Error(err)
		}
	})
	// The reporter's debounce (startReporter): a change after a quiet
	// period this long goes to the hub at once.
	const quiet = 3 * 100 * time.Millisecond

	usedAt := func() (int32, bool) {
		c, ok := h.Cluster(s.name)
		if !ok {
			return 0, false
		}
		m, ok := c.Machine(machineName)
		if !ok {
			return 0, false
		}
		for _, t := range m.GetTypes() {
			if t.GetName() == "compute-medium" {
				return t.GetUsage().GetUsed(), true
			}
		}
		return 0, false
	}
	var m imperatorv1alpha1.Machine
	if err := s.Client.Get(ctx, client.ObjectKey{Name: machineName}, &m); err != nil {
		b.Fatal(err)
	}
	setUsed := func(used int32) error {
		patch := client.MergeFrom(m.DeepCopy())
		m.Status.AvailableMachines = []imperatorv1alpha1.AvailableMachine{{
			Name: "compute-medium", Usage: imperatorv1alpha1.Usage{Maximum: 1 << 20, Used: used},
		}}
		return s.Client.Status().Patch(ctx, &m, patch)
	}
	waitUsed := func(used int32) error {
		return wait.PollUntilContextTimeout(ctx, 500*time.Microsecond, 30*time.Second, true, func(context.Context) (bool, error) {
			got, ok := usedAt()
			return ok && got == used, nil
		})
	}
	if err := setUsed(1); err != nil {
		b.Fatal(err)
	}
	if err := waitUsed(1); err != nil {
		b.Fatal("the spoke never reported its Machine to the hub: ", err)
	}

	var latencies []time.Duration
	used := int32(1)
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		time.Sleep(quiet)
		used++
		b.StartTimer()
		began := time.Now()
		if err := setUsed(used); err != nil {
			b.Fatal(err)
		}
		if err := waitUsed(used); err != nil {
			b.Fatalf("change %d: the hub never showed used=%d: %v", used, used, err)
		}
		latencies = append(latencies, time.Since(began))
	}
	b.StopTimer()
	latencies = benchstat.Sorted(latencies)
	b.ReportMetric(float64(benchstat.Percentile(latencies, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(benchstat.Percentile(latencies, 0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(latencies[len(latencies)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(0, "ns/op")
}

// startBench starts the environment of opts for a benchmark and stops it at
// its end.
func startBench(b *testing.B, opts framework.Options) *framework.Environment {
	b.Helper()
	env, err := framework.Start(context.Background(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := env.Stop(); err != nil && !errors.Is(err, context.Canceled) {
			b.Error(err)
		}
	})
	return env
}
