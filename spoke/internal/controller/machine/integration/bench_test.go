package machine_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/benchstat"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// handoverGuests is how many guests one run of BenchmarkGuestHandover hands
// a reserved slot to, one after the other.
const handoverGuests = 20

// smokeEnv, set by make bench-smoke (hack/bench -smoke), makes the
// benchmarks that sample many rounds inside one iteration take a few, so
// that CI's smoke run only proves they still run.
const smokeEnv = "IMPERATOR_BENCH_SMOKE"

// rounds is n, or smokeRounds in a smoke run.
func rounds(n int) int {
	if os.Getenv(smokeEnv) != "" {
		return min(n, smokeRounds)
	}
	return n
}

// smokeRounds is how many rounds a smoke run samples.
const smokeRounds = 3

// BenchmarkGuestHandover measures the guest queue on a node whose every
// compute-xlarge slot is reserved: how long a guest takes from its creation
// until it runs, and how long the reservation takes to run again after the
// guest is deleted, over handoverGuests guests one after the other. It
// reports the median, 90th and 99th percentile and maximum of both, and the
// FailedScheduling events the guests got. The guest arrives at the slot
// gate, the controller scales the reservation down and removes the gate once
// the reservation pod is gone, and the scheduler places the guest at its
// first attempt: a FailedScheduling event on a guest fails the benchmark.
// BenchmarkGuestHandoverUngated is the path before the queue, for
// comparison. Run both with
//
//	go test ./spoke/internal/controller/machine/integration/ -run '^$' -bench GuestHandover -benchtime 1x
func BenchmarkGuestHandover(b *testing.B) {
	failed := benchmarkHandover(b, guest)
	if failed > 0 {
		b.Errorf("the scheduler tried gated guests %d times before their slot was free (FailedScheduling events)", failed)
	}
}

// BenchmarkGuestHandoverUngated is BenchmarkGuestHandover with guests
// admitted without the slot gate (as before the queue, or after an
// upgrade): the scheduler tries the guest at once, fails, and retries after
// its backoff once the controller has scaled the reservation down.
func BenchmarkGuestHandoverUngated(b *testing.B) {
	benchmarkHandover(b, ungatedGuest)
}

// benchmarkHandover runs handoverGuests guests made by newGuest through a
// reserved slot and returns the FailedScheduling events they got.
func benchmarkHandover(b *testing.B, newGuest func(namespace, name, machineType string) *corev1.Pod) int {
	ctx := context.Background()
	e := startBenchEnvironment(b, "machine-handover")
	guests := benchNamespace(b, e, injectionEnabled)
	if err := e.Client.Create(ctx, wrappers.GeneralMachine().Available("compute-xlarge", 2).Obj()); err != nil {
		b.Fatal(err)
	}
	waitRunningReservations(b, e, "compute-xlarge", 2)

	var handover, handoverBound, restore, restoreBound []time.Duration
	for b.Loop() {
		for i := range rounds(handoverGuests) {
			pod := newGuest(guests, "guest-"+strconv.Itoa(i), "compute-xlarge")
			toBound, toRunning := timeUntilRunning(b, e, pod)
			handover, handoverBound = append(handover, toRunning), append(handoverBound, toBound)
			start := time.Now()
			if err := e.Client.Delete(ctx, pod); err != nil {
				b.Fatal(err)
			}
			waitReservations(b, e, "compute-xlarge", 2, isBound)
			restoreBound = append(restoreBound, time.Since(start))
			waitRunningReservations(b, e, "compute-xlarge", 2)
			restore = append(restore, time.Since(start))
		}
	}
	b.StopTimer()
	reportLatencies(b, "handover", handover)
	reportLatencies(b, "restore", restore)
	// Without kwok's simulated container start (100-500 ms after binding):
	// the agent's and the scheduler's part alone.
	reportLatencies(b, "handover-bound", handoverBound)
	reportLatencies(b, "restore-bound", restoreBound)
	failed := failedScheduling(b, e, guests)
	b.ReportMetric(float64(failed), "failedscheduling-events")
	return failed
}

// failedScheduling counts the FailedScheduling events of the pods of
// namespace.
func failedScheduling(b *testing.B, e *environment, namespace string) int {
	b.Helper()
	list := &eventsv1.EventList{}
	if err := e.Client.List(context.Background(), list, client.InNamespace(namespace)); err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, ev := range list.Items {
		if ev.Regarding.Kind == "Pod" && ev.Reason == "FailedScheduling" && !strings.Contains(ev.Note, gangQuorumWait) {
			n++
		}
	}
	return n
}

// BenchmarkReconcile measures what one reconcile of general-machine costs in
// the running controller (controller-runtime's reconcile time histogram),
// first in an empty cluster, then with 1,000 pods more: 500 guests of the
// machine group in a namespace without injection (read through the index,
// then ignored) and 500 pods without Imperator labels (kept out of the cache
// by machine.CacheOptions). Each iteration changes an annotation of the
// Machine and waits for the reconcile it causes. Run with
//
//	go test ./spoke/internal/controller/machine/integration/ -run '^$' -bench Reconcile
func BenchmarkReconcile(b *testing.B) {
	ctx := context.Background()
	e := startBenchEnvironment(b, "machine-reconcile")
	m := wrappers.GeneralMachine().Obj()
	if err := e.Client.Create(ctx, m); err != nil {
		b.Fatal(err)
	}
	waitRunningReservations(b, e, "compute-medium", 4)

	run := func(b *testing.B) {
		count, sum := reconcileTime(b)
		i := 0
		for b.Loop() {
			i++
			patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{"bench.imperator.tenzen-y.io/touch":"%d"}}}`, time.Now().UnixNano()))
			if err := e.Client.Patch(ctx, m, patch); err != nil {
				b.Fatal(err)
			}
			err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				n, _ := reconcileTime(b)
				return n >= count+uint64(i), nil
			})
			if err != nil {
				b.Fatalf("waiting for reconcile %d: %v", i, err)
			}
		}
		b.StopTimer()
		countAfter, sumAfter := reconcileTime(b)
		if countAfter > count {
			b.ReportMetric((sumAfter-sum)/float64(countAfter-count)*1e6, "µs/reconcile")
		}
	}
	b.Run("empty-cluster", run)

	plain := benchNamespace(b, e, nil)
	for i := range 1000 {
		pod := wrappers.MakePod(plain, "pod-"+strconv.Itoa(i)).NodeName("ghost").Obj()
		if i%2 == 0 {
			pod = wrappers.MakePod(plain, "guest-"+strconv.Itoa(i)).InjectedGuest(group, "compute-medium").NodeName("ghost").Obj()
		}
		if err := e.Client.Create(ctx, pod); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("1000-pods", run)
}

func startBenchEnvironment(b *testing.B, name string) *environment {
	b.Helper()
	ctrl.SetLogger(logr.Discard())
	e, err := startEnvironment(context.Background(), name)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := e.Stop(); err != nil {
			b.Error(err)
		}
	})
	return e
}

func benchNamespace(b *testing.B, e *environment, labels map[string]string) string {
	b.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-", Labels: labels}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		b.Fatal(err)
	}
	return ns.Name
}

// timeUntilRunning creates pod and returns the time from just before the
// create call until a watch reports it bound to a node, and Running.
func timeUntilRunning(b *testing.B, e *environment, pod *corev1.Pod) (bound, running time.Duration) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w, err := e.Cluster.Kubernetes().CoreV1().Pods(pod.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", pod.Name).String(),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	start := time.Now()
	if err := e.Client.Create(ctx, pod); err != nil {
		b.Fatal(err)
	}
	for ev := range w.ResultChan() {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok || ev.Type == watch.Deleted {
			continue
		}
		if bound == 0 && p.Spec.NodeName != "" {
			bound = time.Since(start)
		}
		if p.Status.Phase == corev1.PodRunning {
			return bound, time.Since(start)
		}
	}
	b.Fatalf("guest %s did not run within 60s", pod.Name)
	return 0, 0
}

// waitRunningReservations waits until machineType has want Running
// reservation pods and nothing else.
func waitRunningReservations(b *testing.B, e *environment, machineType string, want int) {
	b.Helper()
	waitReservations(b, e, machineType, want, running)
}

// waitReservations waits until machineType has want reservation pods, all
// of them ready by the measure of done (isBound, running), and nothing else.
func waitReservations(b *testing.B, e *environment, machineType string, want int, done func(*corev1.Pod) bool) {
	b.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		if err := e.Client.List(ctx, pods, client.InNamespace(agentNamespace), client.MatchingLabels{
			imperatorv1alpha1.MachineGroupKey: group, imperatorv1alpha1.MachineTypeKey: machineType,
		}); err != nil {
			return false, err
		}
		n := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && done(&p) {
				n++
			}
		}
		return n == want && len(pods.Items) == want, nil
	})
	if err != nil {
		b.Fatalf("waiting for %d %s reservation pods: %v", want, machineType, err)
	}
}

// isBound is a pod the scheduler placed on a node.
func isBound(pod *corev1.Pod) bool { return pod.Spec.NodeName != "" }

// reconcileTime reads the sample count and sum of the machine controller's
// reconcile time histogram.
func reconcileTime(b *testing.B) (uint64, float64) {
	families, err := metrics.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_time_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "machine" {
					return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return 0, 0
}

func reportLatencies(b *testing.B, name string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	d = benchstat.Sorted(d)
	b.ReportMetric(float64(benchstat.Percentile(d, 0.5).Milliseconds()), name+"-p50-ms")
	b.ReportMetric(float64(benchstat.Percentile(d, 0.9).Milliseconds()), name+"-p90-ms")
	b.ReportMetric(float64(benchstat.NearestRank(d, 0.99).Milliseconds()), name+"-p99-ms")
	b.ReportMetric(float64(d[len(d)-1].Milliseconds()), name+"-max-ms")
	b.ReportMetric(float64(len(d)), name+"-samples")
}

// gangRounds is how many times BenchmarkGangAdmission frees the last unit a
// waiting gang needs.
const gangRounds = 10

// BenchmarkGangAdmission measures how long a 4-pod gang waiting whole for
// compute-medium (available 4) takes to be bound, every member, from the
// moment the single guest holding the last unit it needs is deleted: the
// controller sees the unit free, lets the four members through together,
// and the scheduler binds them. It reports the median, 90th and 99th
// percentile and maximum over gangRounds rounds, the FailedScheduling
// events the members got (none is expected: they pass the gate only into
// free units), the machine controller's mean reconcile time and the GETs
// and writes (the agent's condition) of PodGroups the API server answered
// per round.
// BenchmarkGangAdmissionPodGroup does the same with members of a native
// PodGroup (sized by its gang minCount, no gang-size), the scheduler's
// GangScheduling plugin binding them. Run both with
//
//	go test ./spoke/internal/controller/machine/integration/ -run '^$' -bench GangAdmission -benchtime 1x
func BenchmarkGangAdmission(b *testing.B) {
	benchmarkGangAdmission(b, "machine-gang", func(ctx context.Context, e *environment, namespace, gang string) []*corev1.Pod {
		var members []*corev1.Pod
		for i := range 4 {
			members = append(members, gangMember(namespace, gang+"-"+strconv.Itoa(i), gang, 4))
		}
		return members
	})
}

// BenchmarkGangAdmissionPodGroup is BenchmarkGangAdmission with a native
// PodGroup of minCount 4 per round, its members naming it in
// spec.schedulingGroup. On 2 shared cores, with the PodGroups read live on
// every reconcile of a gang at the gate: 6.0 and 5.9 GETs per round, bound
// p50 174 and 242 ms; from the watch's cache: 0 GETs, p50 249, 204 and
// 132 ms (the machine's load, not the read, moves the latency), and 5.1
// writes per round of the Admitted condition, one per change of the note.
func BenchmarkGangAdmissionPodGroup(b *testing.B) {
	benchmarkGangAdmission(b, "machine-podgroup", func(ctx context.Context, e *environment, namespace, gang string) []*corev1.Pod {
		if err := e.Client.Create(ctx, nativePodGroup(namespace, gang, 4)); err != nil {
			b.Fatal(err)
		}
		var members []*corev1.Pod
		for i := range 4 {
			member := nativeMember(namespace, gang+"-"+strconv.Itoa(i), gang)
			// Only for the benchmark's watch: the PodGroup wins.
			member.Labels[imperatorv1alpha1.GangKey] = gang
			members = append(members, member)
		}
		return members
	})
}

// benchmarkGangAdmission runs gangRounds rounds of a gang made by newGang
// (not created yet, members labelled imperator.tenzen-y.io/gang: <gang>)
// waiting whole for its last unit.
func benchmarkGangAdmission(b *testing.B, name string, newGang func(ctx context.Context, e *environment, namespace, gang string) []*corev1.Pod) {
	ctx := context.Background()
	e := startBenchEnvironment(b, name)
	guests := benchNamespace(b, e, injectionEnabled)
	if err := e.Client.Create(ctx, mediumMachine(4)); err != nil {
		b.Fatal(err)
	}
	waitRunningReservations(b, e, "compute-medium", 4)

	var admitted []time.Duration
	countBefore, sumBefore := reconcileTime(b)
	getsBefore := apiServerRequests(b, e, "podgroups", "GET")
	writesBefore := apiServerRequests(b, e, "podgroups", "PATCH") + apiServerRequests(b, e, "podgroups", "APPLY")
	for b.Loop() {
		for round := range rounds(gangRounds) {
			gang := "train-" + strconv.Itoa(round)
			blocker := guest(guests, "blocker-"+strconv.Itoa(round), "compute-medium")
			timeUntilRunning(b, e, blocker)
			members := newGang(ctx, e, guests, gang)
			for _, member := range members {
				if err := e.Client.Create(ctx, member); err != nil {
					b.Fatal(err)
				}
			}
			// Waiting whole: every member told so, no reservation left.
			waitGangTold(b, e, guests, gang)
			waitReservations(b, e, "compute-medium", 0, isBound)
			admitted = append(admitted, timeUntilGangBound(b, e, blocker, gang, 4))
			for _, m := range members {
				if err := e.Client.Delete(ctx, m, client.GracePeriodSeconds(0)); err != nil {
					b.Fatal(err)
				}
			}
			waitRunningReservations(b, e, "compute-medium", 4)
		}
	}
	b.StopTimer()
	reportLatencies(b, "gang-bound", admitted)
	count, sum := reconcileTime(b)
	if count > countBefore {
		b.ReportMetric((sum-sumBefore)/float64(count-countBefore)*1e3, "reconcile-mean-ms")
		b.ReportMetric(float64(count-countBefore)/float64(rounds(gangRounds)), "reconciles/round")
	}
	b.ReportMetric((apiServerRequests(b, e, "podgroups", "GET")-getsBefore)/float64(rounds(gangRounds)), "podgroup-gets/round")
	writes := apiServerRequests(b, e, "podgroups", "PATCH") + apiServerRequests(b, e, "podgroups", "APPLY") - writesBefore
	b.ReportMetric(writes/float64(rounds(gangRounds)), "podgroup-writes/round")
	failed := failedScheduling(b, e, guests)
	b.ReportMetric(float64(failed), "failedscheduling-events")
	if failed > 0 {
		b.Errorf("the scheduler tried gang members %d times before their units were free (FailedScheduling events)", failed)
	}
}

// apiServerRequests sums the API server's apiserver_request_total of a
// resource and verb, from its /metrics.
func apiServerRequests(b *testing.B, e *environment, resource, verb string) float64 {
	b.Helper()
	raw, err := e.Cluster.Kubernetes().Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, m := range families["apiserver_request_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["resource"] == resource && labels["verb"] == verb {
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// waitGangTold waits until every member of gang carries its queue note.
func waitGangTold(b *testing.B, e *environment, namespace, gang string) {
	b.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		if err := e.Client.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{imperatorv1alpha1.GangKey: gang}); err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Annotations[imperatorv1alpha1.QueueAnnotation] == "" {
				return false, nil
			}
		}
		return len(pods.Items) > 0, nil
	})
	if err != nil {
		b.Fatalf("waiting for gang %s to be told it waits: %v", gang, err)
	}
}

// timeUntilGangBound deletes blocker, which holds the last unit gang needs,
// and returns the time from just before the delete call until a watch
// reports all size members of gang bound to a node.
func timeUntilGangBound(b *testing.B, e *environment, blocker *corev1.Pod, gang string, size int) time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w, err := e.Cluster.Kubernetes().CoreV1().Pods(blocker.Namespace).Watch(ctx, metav1.ListOptions{
		LabelSelector: imperatorv1alpha1.GangKey + "=" + gang,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	start := time.Now()
	if err := e.Client.Delete(ctx, blocker, client.GracePeriodSeconds(0)); err != nil {
		b.Fatal(err)
	}
	bound := map[string]bool{}
	for ev := range w.ResultChan() {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok || ev.Type == watch.Deleted {
			continue
		}
		if p.Spec.NodeName != "" {
			bound[p.Name] = true
		}
		if len(bound) == size {
			return time.Since(start)
		}
	}
	b.Fatalf("gang %s was not bound within 60s of its last unit freeing (%d of %d bound)", gang, len(bound), size)
	return 0
}
