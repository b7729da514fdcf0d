package machine_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/fleet"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// strayPods is how many stray pods BenchmarkStrayGuests creates.
const strayPods = 1000

// BenchmarkStrayGuests starts the spoke agent as its own process (as
// BenchmarkSpokeAtScale does) with one Machine offering 4 compute-small on
// one node, then creates strayPods pods in a namespace that never opted in,
// each labelled as a compute-small guest of the Machine's group (the three
// labels a tenant can write), without the injector's record and with a
// nodeSelector no node matches: they stay Pending and cost their creator
// nothing. Before the Machine controller counted only injected guests, four
// of them took reserved to 0. It fails unless the Machine's usage stays
// 4 reserved of 4 and nothing used or waiting, and StrayGuests names all
// of them. It reports
//   - reserved-before and reserved-after, from the Machine's status;
//   - stray-reported-s: from the first create until StrayGuests counts
//     every pod, and scheduler-tried-all-s until the scheduler has marked
//     every one Unschedulable;
//   - the agent's CPU (process_cpu_seconds_total of its /metrics):
//     idle-cpu-pct over a quiet window before, absorb-cpu-s spent from
//     the first create until reported, and idle-cpu-pct-after over the same
//     window once the scheduler has tried every pod;
//   - the agent's memory: rss-before-MiB, rss-after-MiB and hwm-after-MiB;
//   - absorb-status-writes, the Machine status writes while the pods came
//     (the condition's count changes), and steady-writes, the agent's
//     writes in the window after, but its leader Lease's (the goal: none).
//
// Run with
//
//	go test ./spoke/internal/controller/machine/integration/ -run '^$' -bench StrayGuests -benchtime 1x -timeout 20m
func BenchmarkStrayGuests(b *testing.B) {
	for range b.N {
		benchmarkStrayGuests(b)
	}
}

func benchmarkStrayGuests(b *testing.B) {
	ctx := context.Background()
	ctrl.SetLogger(logr.Discard())
	b.StopTimer()
	tmp := b.TempDir()
	type built struct {
		bin string
		err error
	}
	building := make(chan built, 1)
	go func() {
		bin, err := buildSpoke(ctx, tmp)
		building <- built{bin, err}
	}()
	auditFlags, auditLog, err := scaleAuditFlags(tmp)
	if err != nil {
		b.Fatal(err)
	}
	env, err := startScaleCluster(ctx, auditFlags)
	spoke := <-building
	if err != nil {
		b.Fatal(err)
	}
	var agent *scaleAgent
	defer func() {
		if agent != nil {
			if err := agent.stop(); err != nil {
				b.Error(err)
			}
		}
		if err := env.Stop(); err != nil {
			b.Error(err)
		}
	}()
	if spoke.err != nil {
		b.Fatal(spoke.err)
	}
	if err := fleet.InstallReservationPriorityClass(ctx, env.Cluster); err != nil {
		b.Fatal(err)
	}
	if err := env.Cluster.AddNode(ctx, wrappers.MakeNode("stray-pool").Obj()); err != nil {
		b.Fatal(err)
	}
	machine := wrappers.MakeMachine(group, group).Type("compute-small", "2", "8Gi", 4).Node("stray-pool", "compute-small").Obj()
	if err := env.Client.Create(ctx, machine); err != nil {
		b.Fatal(err)
	}
	agent, err = startScaleAgent(ctx, env.Cluster, spoke.bin, agentNamespace, auditLog)
	if err != nil {
		b.Fatal(err)
	}
	want := imperatorv1alpha1.Usage{Maximum: 4, Reserved: 4}
	// machineStatus reads the Machine's compute-small usage and its
	// StrayGuests condition message.
	machineStatus := func(ctx context.Context) (imperatorv1alpha1.Usage, string, error) {
		m := &imperatorv1alpha1.Machine{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: machine.Name}, m); err != nil {
			return imperatorv1alpha1.Usage{}, "", err
		}
		var u imperatorv1alpha1.Usage
		for _, a := range m.Status.AvailableMachines {
			if a.Name == "compute-small" {
				u = a.Usage
			}
		}
		stray := ""
		if c := meta.FindStatusCondition(m.Status.Conditions, imperatorv1alpha1.ConditionStrayGuests); c != nil && c.Status == "True" {
			stray = c.Message
		}
		return u, stray, nil
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		u, _, err := machineStatus(ctx)
		return err == nil && u == want, err
	})
	if err != nil {
		b.Fatalf("waiting for 4 of 4 reserved: %v", err)
	}
	before, _, _ := machineStatus(ctx)
	b.ReportMetric(float64(before.Reserved), "reserved-before")

	// A quiet window: what the agent costs with nothing to do.
	const window = 15 * time.Second
	idle := func() (float64, error) {
		cpu0, err := agent.cpuSeconds(ctx)
		if err != nil {
			return 0, err
		}
		time.Sleep(window)
		cpu1, err := agent.cpuSeconds(ctx)
		return (cpu1 - cpu0) / window.Seconds() * 100, err
	}
	idleBefore, err := idle()
	if err != nil {
		b.Fatal(err)
	}
	rssBefore, _, err := agent.memory()
	if err != nil {
		b.Fatal(err)
	}

	squat := benchNamespace(b, &environment{env}, nil)
	writesBefore, err := agent.writes()
	if err != nil {
		b.Fatal(err)
	}
	cpuBefore, err := agent.cpuSeconds(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	start := time.Now()
	err = parallel(20, strayPods, func(i int) error {
		pod := wrappers.MakePod(squat, "stray-"+strconv.Itoa(i)).Guest(group, "compute-small").Obj()
		pod.Spec.NodeSelector = map[string]string{"topology.kubernetes.io/zone": "nowhere"}
		return env.Client.Create(ctx, pod)
	})
	if err != nil {
		b.Fatal(err)
	}
	counted := fmt.Sprintf("compute-small: %d pods labelled as its guests", strayPods)
	var last string
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		if !agent.proc.Running() {
			return false, errors.New("the agent exited")
		}
		_, stray, err := machineStatus(ctx)
		last = stray
		return err == nil && strings.HasPrefix(stray, counted), err
	})
	reported := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatalf("waiting for StrayGuests to count %d pods (last: %q): %v", strayPods, last, err)
	}
	b.Logf("the StrayGuests condition: %s", last)
	cpuAfter, err := agent.cpuSeconds(ctx)
	if err != nil {
		b.Fatal(err)
	}
	writesAbsorbed, err := agent.writes()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(reported.Seconds(), "stray-reported-s")
	b.ReportMetric(cpuAfter-cpuBefore, "absorb-cpu-s")
	b.ReportMetric(float64(writesAbsorbed["machines/status"]-writesBefore["machines/status"]), "absorb-status-writes")

	// The scheduler tries each stray pod once and marks it Unschedulable:
	// the window after starts once it is done, so that it measures the
	// agent with nothing changing.
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		if err := env.Client.List(ctx, pods, client.InNamespace(squat)); err != nil {
			return false, err
		}
		for i := range pods.Items {
			if !slices.ContainsFunc(pods.Items[i].Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable
			}) {
				return false, nil
			}
		}
		return len(pods.Items) == strayPods, nil
	})
	if err != nil {
		b.Fatalf("waiting for the scheduler to try every stray pod: %v", err)
	}
	b.ReportMetric(time.Since(start).Seconds(), "scheduler-tried-all-s")
	reconciles := agent.reconcileCounts(ctx)
	idleAfter, err := idle()
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("reconciles/queue adds by controller before and after the window after: %s; %s", reconciles, agent.reconcileCounts(ctx))
	writesAfter, err := agent.writes()
	if err != nil {
		b.Fatal(err)
	}
	var steadyWrites int
	var written []string
	for _, resource := range slices.Sorted(maps.Keys(writesAfter)) {
		if n := writesAfter[resource] - writesAbsorbed[resource]; n > 0 {
			written = append(written, fmt.Sprintf("%s=%d", resource, n))
			if resource != "leader-lease" {
				steadyWrites += n
			}
		}
	}
	b.Logf("the agent's writes in the window after, by resource: %s", strings.Join(written, " "))
	rssAfter, hwmAfter, err := agent.memory()
	if err != nil {
		b.Fatal(err)
	}
	after, _, err := machineStatus(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(after.Reserved), "reserved-after")
	b.ReportMetric(idleBefore, "idle-cpu-pct")
	b.ReportMetric(idleAfter, "idle-cpu-pct-after")
	b.ReportMetric(rssBefore, "rss-before-MiB")
	b.ReportMetric(rssAfter, "rss-after-MiB")
	b.ReportMetric(hwmAfter, "hwm-after-MiB")
	b.ReportMetric(float64(steadyWrites), "steady-writes")
	b.ReportMetric(0, "ns/op")
	if after != want {
		b.Errorf("the Machine's compute-small usage moved with %d stray pods: %+v, want %+v", strayPods, after, want)
	}
	if steadyWrites > 0 {
		b.Errorf("the agent kept writing with nothing changing: %s", strings.Join(written, " "))
	}
}

// cpuSeconds reads the agent's process_cpu_seconds_total.
func (a *scaleAgent) cpuSeconds(ctx context.Context) (float64, error) {
	families, err := a.metrics(ctx)
	if err != nil {
		return 0, err
	}
	f, ok := families["process_cpu_seconds_total"]
	if !ok || len(f.GetMetric()) == 0 {
		return 0, errors.New("the agent's /metrics has no process_cpu_seconds_total")
	}
	return f.GetMetric()[0].GetCounter().GetValue(), nil
}
