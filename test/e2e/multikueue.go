package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/internal/ctlconfig"
	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/kueue"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// MultiKueueInput configures MultiKueueSpec.
type MultiKueueInput struct {
	Env *Env
	// Small and Big are the worker spokes: the journey gives Small one unit
	// of its machine type and Big two.
	Small, Big string
	// Namespace is created for the journey in the three clusters.
	Namespace string
}

// The journey's own machine type, on a node of its own in each worker, so
// that it shares no unit with the other journeys.
const (
	mkGroup    = "mk-gpu"
	mkType     = "mk-xlarge"
	mkQueue    = "mk"
	mkConfig   = "imperator-dispatch"
	mkOrigin   = "imperator-e2e"
	dispatcher = "imperator.tenzen-y.io/dispatcher"
)

// MultiKueueSpec is journey 12: Kueue v0.17.0's own MultiKueue, with the
// hub cluster as the manager and Small and Big as workers, dispatches Jobs
// through the dispatcher imperator.tenzen-y.io/dispatcher, which runs as
// its own binary with a ServiceAccount token of the hub cluster bound to
// imperator-fleet-viewer. A 2-pod Job that fits only on Big runs there and
// no copy is ever created on Small; with Big full, a 1-pod Job goes to
// Small; with both full, a Job waits, nominated nowhere, with the
// dispatcher's NoClusterFits event naming each worker, and runs on Small
// once a unit frees there. Every Workload created on the workers is
// recorded: the copies per Job go into the report with the dispatch
// latency (quota reserved on the manager → nominated).
func MultiKueueSpec(ctx context.Context, in MultiKueueInput) {
	if in.Env.Fleet == nil {
		Skip("the journey runs Kueue and the dispatcher against the clusters of a fleet it started")
	}
	scheme := runtime.NewScheme()
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(apiextensionsv1.AddToScheme(scheme)).To(Succeed())
	Expect(imperatorv1alpha1.AddToScheme(scheme)).To(Succeed())
	newClient := func(c *Cluster) client.WithWatch {
		cl, err := client.NewWithWatch(c.Config, client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		return cl
	}
	hub, small, big := in.Env.Hub, in.Env.Spoke(in.Small), in.Env.Spoke(in.Big)
	hubC, smallC, bigC := newClient(hub), newClient(small), newClient(big)
	workers := map[string]client.WithWatch{in.Small: smallC, in.Big: bigC}

	By(fmt.Sprintf("giving %s one unit of %s and %s two, each on a node of their own", in.Small, mkType, in.Big))
	for name, units := range map[string]int32{in.Small: 1, in.Big: 2} {
		addMultiKueueMachine(ctx, in.Env, workers[name], name, units)
	}

	By("starting Kueue v0.17.0 on both workers and, as the MultiKueue manager with the dispatcher imperator.tenzen-y.io/dispatcher, on the hub cluster")
	dir, err := os.MkdirTemp("", "imperator-multikueue-")
	Expect(err).NotTo(HaveOccurred())
	type start struct {
		name   string
		cl     *Cluster
		c      client.Client
		opts   kueue.Options
		kueue  *kueue.Kueue
		err    error
		subdir string
	}
	starts := []*start{
		{name: in.Small, cl: small, c: smallC, opts: kueue.Options{Name: "kueue-" + in.Small}},
		{name: in.Big, cl: big, c: bigC, opts: kueue.Options{Name: "kueue-" + in.Big}},
		{name: hub.Name, cl: hub, c: hubC, opts: kueue.Options{Name: "kueue-manager", DispatcherName: dispatcher,
			FeatureGates: map[string]bool{"WorkloadRequestUseMergePatch": true}}},
	}
	var wg sync.WaitGroup
	for _, s := range starts {
		s.subdir = filepath.Join(dir, s.name)
		Expect(os.MkdirAll(s.subdir, 0o755)).To(Succeed())
		wg.Go(func() { s.kueue, s.err = kueue.StartWith(ctx, s.cl.Config, s.c, s.subdir, s.opts) })
	}
	wg.Wait()
	DeferCleanup(func() {
		for _, s := range starts {
			if s.kueue == nil {
				continue
			}
			if CurrentSpecReport().Failed() {
				GinkgoWriter.Printf("\n===== Kueue on %s (%s) =====\n%s\n", s.name, s.subdir, s.kueue.Logs(60))
			}
			Expect(s.kueue.Stop()).To(Succeed())
		}
		if !CurrentSpecReport().Failed() {
			Expect(os.RemoveAll(dir)).To(Succeed())
		}
	})
	for _, s := range starts {
		Expect(s.err).NotTo(HaveOccurred(), "Kueue on %s; its files are in %s", s.name, s.subdir)
	}

	By("creating the Kueue objects of docs/multikueue.md: on the manager a MultiKueueCluster per worker (kubeconfig Secrets to the workers' API servers), their MultiKueueConfig and AdmissionCheck, a ClusterQueue with the check; on the workers the same queues without it")
	managerObjects := multiKueueManagerObjects(in, map[string]*Cluster{in.Small: small, in.Big: big})
	workerObjects := multiKueueWorkerObjects(in.Namespace)
	for _, c := range []client.Client{hubC, smallC, bigC} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: in.Namespace,
			Labels: map[string]string{imperatorv1alpha1.InjectResourceKey: imperatorv1alpha1.InjectResourceEnabled}}}
		Expect(client.IgnoreAlreadyExists(c.Create(ctx, ns))).To(Succeed())
	}
	for _, o := range managerObjects {
		Expect(hubC.Create(ctx, o)).To(Succeed(), "creating %s %s on the manager", o.GetObjectKind().GroupVersionKind().Kind, o.GetName())
	}
	for _, c := range []client.Client{smallC, bigC} {
		for _, o := range workerObjects {
			Expect(c.Create(ctx, o.DeepCopy())).To(Succeed(), "creating %s %s on a worker", o.GetKind(), o.GetName())
		}
	}
	DeferCleanup(func(ctx context.Context) {
		By("deleting the journey's Jobs (the manager's first: MultiKueue removes its copies) and Kueue objects")
		for _, c := range []client.Client{hubC, smallC, bigC} {
			Expect(client.IgnoreNotFound(c.DeleteAllOf(ctx, &batchv1.Job{}, client.InNamespace(in.Namespace),
				client.PropagationPolicy(metav1.DeletePropagationBackground)))).To(Succeed())
		}
		Eventually(ctx, func(g Gomega) {
			for name, c := range map[string]client.Client{hub.Name: hubC, in.Small: smallC, in.Big: bigC} {
				wls := &unstructured.UnstructuredList{}
				wls.SetGroupVersionKind(kueueGV.WithKind("WorkloadList"))
				g.Expect(c.List(ctx, wls, client.InNamespace(in.Namespace))).To(Succeed())
				g.Expect(wls.Items).To(BeEmpty(), "Workloads left on %s", name)
				g.Expect(client.IgnoreNotFound(c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(in.Namespace), client.GracePeriodSeconds(0)))).To(Succeed())
			}
		}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
		for i := len(managerObjects) - 1; i >= 0; i-- {
			Expect(client.IgnoreNotFound(hubC.Delete(ctx, managerObjects[i]))).To(Succeed())
		}
		for _, c := range []client.Client{smallC, bigC} {
			for i := len(workerObjects) - 1; i >= 0; i-- {
				Expect(client.IgnoreNotFound(c.Delete(ctx, workerObjects[i].DeepCopy()))).To(Succeed())
			}
		}
		for _, c := range []client.Client{hubC, smallC, bigC} {
			Expect(client.IgnoreNotFound(c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: in.Namespace}}))).To(Succeed())
		}
	})
	Eventually(ctx, func(g Gomega) {
		for _, name := range []string{in.Small, in.Big} {
			g.Expect(kueueConditions(ctx, g, hubC, "MultiKueueCluster", name)).To(HaveKeyWithValue("Active", "True"), "MultiKueueCluster %s", name)
		}
		g.Expect(kueueConditions(ctx, g, hubC, "ClusterQueue", in.Namespace)).To(HaveKeyWithValue("Active", "True"), "the manager's ClusterQueue")
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By("recording every Workload Kueue creates on the workers: the remote copies")
	copies := watchRemoteCopies(ctx, in.Namespace, workers)

	By("starting the dispatcher with a ServiceAccount token of the hub cluster bound to imperator-fleet-viewer")
	dispatcherProc := startDispatcher(ctx, in.Env, hubC, dir)

	By(fmt.Sprintf("a 2-pod Job fits only on %s: it runs there, and no copy is created on %s", in.Big, in.Small))
	first := multiKueueJob(in.Namespace, "fits-big", 2)
	firstWL, latency := runDispatchedJob(ctx, hubC, first, in.Big)
	latencies := []time.Duration{latency}
	expectRunning(ctx, bigC, first)
	expectUsed(ctx, in.Env, in.Big, 2)

	By(fmt.Sprintf("%s is full: the next Job goes to %s", in.Big, in.Small))
	second := multiKueueJob(in.Namespace, "big-full", 1)
	secondWL, latency := runDispatchedJob(ctx, hubC, second, in.Small)
	latencies = append(latencies, latency)
	expectRunning(ctx, smallC, second)
	expectUsed(ctx, in.Env, in.Small, 1)

	By("both are full: the next Job waits, nominated nowhere, and its Workload says why")
	third := multiKueueJob(in.Namespace, "both-full", 1)
	Expect(hubC.Create(ctx, third)).To(Succeed())
	var waiting string
	Eventually(ctx, func(g Gomega) {
		wl := jobWorkload(ctx, g, hubC, third)
		waiting = wl.GetName()
		g.Expect(kueueConditionsOf(wl)).To(HaveKeyWithValue("QuotaReserved", "True"), "quota reserved on the manager")
		events := &eventsv1.EventList{}
		g.Expect(hubC.List(ctx, events, client.InNamespace(in.Namespace))).To(Succeed())
		var notes []string
		for _, e := range events.Items {
			if e.Regarding.Name == waiting && e.Reason == "NoClusterFits" {
				notes = append(notes, e.Note)
			}
		}
		g.Expect(notes).To(ContainElement(And(ContainSubstring("no worker cluster has room for 1 unit of "+mkGroup+"/"+mkType),
			ContainSubstring(in.Small+": 0 free of the 1 wanted"), ContainSubstring(in.Big+": 0 free of the 1 wanted"))))
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
	Consistently(ctx, func(g Gomega) {
		wl := jobWorkload(ctx, g, hubC, third)
		names, _, _ := unstructured.NestedStringSlice(wl.Object, "status", "nominatedClusterNames")
		g.Expect(names).To(BeEmpty(), "nominated while both workers are full")
		g.Expect(wl.Object["status"]).NotTo(HaveKey("clusterName"))
	}).WithTimeout(3 * time.Second).WithPolling(poll).Should(Succeed())

	By(fmt.Sprintf("a unit frees on %s (its Job is deleted on the manager): the waiting Job is nominated there and runs", in.Small))
	Expect(hubC.Delete(ctx, second, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	freed := time.Now()
	Eventually(ctx, func(g Gomega) {
		wl := jobWorkload(ctx, g, hubC, third)
		cluster, _, _ := unstructured.NestedString(wl.Object, "status", "clusterName")
		g.Expect(cluster).To(Equal(in.Small))
	}).WithTimeout(spokeTimeout).WithPolling(100 * time.Millisecond).Should(Succeed())
	AddReportEntry("MultiKueue: a unit freed → the waiting Job placed", time.Since(freed).Round(10*time.Millisecond).String())
	expectRunning(ctx, smallC, third)

	By("copies: every Job had exactly one, on the worker it ran on")
	got := copies()
	Expect(got).To(Equal(map[string][]string{firstWL: {in.Big}, secondWL: {in.Small}, waiting: {in.Small}}),
		"the workers each remote Workload was created on, per manager Workload")
	slices.Sort(latencies)
	AddReportEntry("MultiKueue dispatch: Job to nominated (2 Jobs)", fmt.Sprint(latencies))
	AddReportEntry("MultiKueue remote copies per Job (ours)", fmt.Sprint(got))

	if os.Getenv(multiKueueCompareEnv) == "" {
		return
	}
	By("comparing the dispatchers on the same fleet and burst: ours, then Kueue's AllAtOnce and Incremental")
	Expect(hubC.Delete(ctx, first, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	Expect(hubC.Delete(ctx, third, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	burst := multiKueueBurst{env: in.Env, hubC: hubC, workers: map[string]client.Client{in.Small: smallC, in.Big: bigC},
		namespace: in.Namespace, copies: copies, units: map[string]int32{in.Small: 1, in.Big: 2}, size: 4}
	table := []string{"| dispatcher | running | waiting on a worker without room | waiting on the manager | remote copies per Job |", "|---|---|---|---|---|"}
	table = append(table, burst.run(ctx, "ours", "burst-ours"))
	Expect(dispatcherProc.Stop()).To(Succeed())
	dispatcherProc = startDispatcher(ctx, in.Env, hubC, dir, "--without-claims")
	table = append(table, burst.run(ctx, "ours --without-claims", "burst-noclaims"))
	Expect(dispatcherProc.Stop()).To(Succeed())
	manager := starts[2]
	for _, name := range []string{"kueue.x-k8s.io/multikueue-dispatcher-all-at-once", "kueue.x-k8s.io/multikueue-dispatcher-incremental"} {
		Expect(manager.kueue.Stop()).To(Succeed())
		manager.kueue, manager.err = nil, nil
		short := "AllAtOnce"
		if name == "kueue.x-k8s.io/multikueue-dispatcher-incremental" {
			short = "Incremental"
		}
		manager.subdir = filepath.Join(dir, hub.Name+"-"+strings.ToLower(short))
		Expect(os.MkdirAll(manager.subdir, 0o755)).To(Succeed())
		k, err := kueue.StartWith(ctx, hub.Config, hubC, manager.subdir, kueue.Options{Name: "kueue-manager", DispatcherName: name,
			FeatureGates: map[string]bool{"WorkloadRequestUseMergePatch": true}})
		Expect(err).NotTo(HaveOccurred())
		manager.kueue = k
		table = append(table, burst.run(ctx, short, "burst-"+strings.ToLower(short)))
	}
	AddReportEntry(fmt.Sprintf("MultiKueue dispatchers, a burst of %d one-unit Jobs on %d free units (%s 1, %s 2)", burst.size, 3, in.Small, in.Big),
		"\n"+strings.Join(table, "\n"))
}

// multiKueueCompareEnv, when set, has journey 12 run the same burst of Jobs
// through its dispatcher and Kueue's AllAtOnce and Incremental (minutes;
// not in CI): `make e2e E2E_FOCUS='12:' E2E_MULTIKUEUE_COMPARE=1`.
const multiKueueCompareEnv = "E2E_MULTIKUEUE_COMPARE"

// burstSettle is how long a burst's outcome must hold still: a guest takes
// a unit within seconds once it has one, even when several arrive at once.
const burstSettle = 20 * time.Second

// multiKueueBurst is a burst of one-unit Jobs created at once on the manager.
type multiKueueBurst struct {
	env       *Env
	hubC      client.Client
	workers   map[string]client.Client
	namespace string
	copies    func() map[string][]string
	units     map[string]int32
	size      int
}

// run waits until every unit is free and no pod is left on the workers,
// creates the burst, waits until every placed Job has its pod on its
// worker and the outcome holds still for burstSettle, and returns its row:
// Jobs running, Jobs placed on a worker where their pod waits for a unit,
// Jobs still waiting on the manager, and the remote Workloads created per
// Job.
func (b multiKueueBurst) run(ctx context.Context, label, prefix string) string {
	GinkgoHelper()
	Eventually(ctx, func(g Gomega) {
		resp, err := b.env.Ctl.Usage(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		for spoke, units := range b.units {
			g.Expect(UsageOf(resp, spoke, mkGroup, mkType).GetFree()).To(Equal(units), "free units of %s on %s before the burst", mkType, spoke)
		}
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
	Eventually(ctx, func(g Gomega) {
		for name, c := range b.workers {
			pods := &corev1.PodList{}
			g.Expect(c.List(ctx, pods, client.InNamespace(b.namespace))).To(Succeed())
			g.Expect(pods.Items).To(BeEmpty(), "pods of earlier Jobs left on %s before the burst", name)
		}
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
	jobs := make([]*batchv1.Job, b.size)
	for i := range jobs {
		jobs[i] = multiKueueJob(b.namespace, fmt.Sprintf("%s-%d", prefix, i), 1)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(jobs))
	for i, job := range jobs {
		wg.Go(func() { errs[i] = b.hubC.Create(ctx, job) })
	}
	wg.Wait()
	for _, err := range errs {
		Expect(err).NotTo(HaveOccurred())
	}
	var last string
	var since time.Time
	var running, misplaced, waiting int
	var names []string
	Eventually(ctx, func(g Gomega) {
		running, misplaced, waiting, names = 0, 0, 0, nil
		var states []string
		for _, job := range jobs {
			wl := jobWorkload(ctx, g, b.hubC, job)
			names = append(names, wl.GetName())
			cluster, _, _ := unstructured.NestedString(wl.Object, "status", "clusterName")
			state := "manager"
			if cluster == "" {
				waiting++
			} else {
				pods := &corev1.PodList{}
				g.Expect(b.workers[cluster].List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{"batch.kubernetes.io/job-name": job.Name})).To(Succeed())
				g.Expect(pods.Items).NotTo(BeEmpty(), "the copy of Job %s on %s has its pod", job.Name, cluster)
				if pods.Items[0].Status.Phase == corev1.PodRunning {
					running++
					state = cluster + "/running"
				} else {
					misplaced++
					state = cluster + "/waiting"
				}
			}
			states = append(states, job.Name+"="+state)
		}
		if now := strings.Join(states, ","); now != last {
			last, since = now, time.Now()
		}
		g.Expect(time.Since(since)).To(BeNumerically(">=", burstSettle), "the outcome holds still: %s", last)
	}).WithTimeout(3 * time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
	got := b.copies()
	var copies []string
	total := 0
	for _, n := range names {
		total += len(got[n])
		copies = append(copies, strconv.Itoa(len(got[n])))
	}
	AddReportEntry("burst outcome, "+label, last)
	for _, job := range jobs {
		Expect(client.IgnoreNotFound(b.hubC.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)))).To(Succeed())
	}
	Eventually(ctx, func(g Gomega) {
		all := map[string]client.Client{"the manager": b.hubC}
		for name, c := range b.workers {
			all[name] = c
		}
		for name, c := range all {
			wls := &unstructured.UnstructuredList{}
			wls.SetGroupVersionKind(kueueGV.WithKind("WorkloadList"))
			g.Expect(c.List(ctx, wls, client.InNamespace(b.namespace))).To(Succeed())
			for _, w := range wls.Items {
				g.Expect(names).NotTo(ContainElement(w.GetName()), "Workload of the burst left on %s", name)
			}
		}
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
	return fmt.Sprintf("| %s | %d | %d | %d | %.2f (%s) |", label, running, misplaced, waiting, float64(total)/float64(len(names)), strings.Join(copies, ", "))
}

// addMultiKueueMachine adds to spoke a kwok node and a Machine of the
// journey's group with units of its type on that node, and waits until the
// hub shows them all free; both are deleted after the journey.
func addMultiKueueMachine(ctx context.Context, env *Env, c client.Client, spoke string, units int32) {
	GinkgoHelper()
	// Not the product the fleet's hopper-machine selects its nodes by
	// (nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3): that Machine would
	// take the node into its pool, and this journey's Machine be refused it.
	node := wrappers.MakeNode("mk-"+spoke).Capacity(corev1.ResourceCPU, "192").Capacity(corev1.ResourceMemory, "2Ti").
		GPU(8, "NVIDIA-H100-NVL", "hopper").Annotation(harness.KwokNodeAnnotation, "fake").Label("type", "kwok").Obj()
	Expect(c.Create(ctx, node)).To(Succeed())
	machine := wrappers.MakeMachine(mkGroup, mkGroup).Type(mkType, "40", "128Gi", units).GPU("nvidia.com/gpu", 2, "", "hopper").
		Node(node.Name, mkType).Tainted().Obj()
	Expect(c.Create(ctx, machine)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		Expect(client.IgnoreNotFound(c.Delete(ctx, machine))).To(Succeed())
		Eventually(ctx, func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(machine), &imperatorv1alpha1.Machine{})).NotTo(Succeed(), "Machine %s on %s is gone", machine.Name, spoke)
		}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
		Expect(client.IgnoreNotFound(c.Delete(ctx, node))).To(Succeed())
	})
	Eventually(ctx, func(g Gomega) {
		resp, err := env.Ctl.Usage(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		u := UsageOf(resp, spoke, mkGroup, mkType)
		g.Expect(u).NotTo(BeNil(), "the hub shows %s/%s of %s", mkGroup, mkType, spoke)
		g.Expect(u.GetFree()).To(Equal(units), "free units of %s on %s", mkType, spoke)
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
}

// expectUsed waits until the hub shows used units of the journey's type on spoke.
func expectUsed(ctx context.Context, env *Env, spoke string, used int32) {
	GinkgoHelper()
	Eventually(ctx, func(g Gomega) {
		resp, err := env.Ctl.Usage(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		u := UsageOf(resp, spoke, mkGroup, mkType)
		g.Expect(u).NotTo(BeNil())
		g.Expect(u.GetUsed()).To(Equal(used), "used units of %s on %s", mkType, spoke)
		g.Expect(u.GetFree()).To(BeZero(), "free units of %s on %s", mkType, spoke)
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
}

// kueueObject is a Kueue object of kind.
func kueueObject(kind, namespace, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(kueueGV.WithKind(kind))
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

// multiKueueQuota is a ClusterQueue of ample quota (the units, not Kueue's
// quota, are what is short) with checks.
func multiKueueQuota(name string, checks []any) *unstructured.Unstructured {
	spec := map[string]any{
		"namespaceSelector": map[string]any{},
		"resourceGroups": []any{map[string]any{
			"coveredResources": []any{"cpu", "memory", "nvidia.com/gpu"},
			"flavors": []any{map[string]any{"name": "mk-flavor", "resources": []any{
				map[string]any{"name": "cpu", "nominalQuota": "2000"},
				map[string]any{"name": "memory", "nominalQuota": "20Ti"},
				map[string]any{"name": "nvidia.com/gpu", "nominalQuota": "100"},
			}}},
		}},
	}
	if checks != nil {
		spec["admissionChecksStrategy"] = map[string]any{"admissionChecks": checks}
	}
	return kueueObject("ClusterQueue", "", name, spec)
}

// multiKueueWorkerObjects are a worker's queues: no admission check.
func multiKueueWorkerObjects(namespace string) []*unstructured.Unstructured {
	return []*unstructured.Unstructured{
		kueueObject("ResourceFlavor", "", "mk-flavor", map[string]any{}),
		multiKueueQuota(namespace, nil),
		kueueObject("LocalQueue", namespace, mkQueue, map[string]any{"clusterQueue": namespace}),
	}
}

// multiKueueManagerObjects are the manager's objects of docs/multikueue.md.
func multiKueueManagerObjects(in MultiKueueInput, workers map[string]*Cluster) []client.Object {
	var objs []client.Object
	names := []string{in.Small, in.Big}
	for _, name := range names {
		kubeconfig, err := kueue.WorkerKubeconfig(workers[name].Config)
		Expect(err).NotTo(HaveOccurred())
		objs = append(objs,
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: kueue.Namespace, Name: "mk-" + name}, Data: map[string][]byte{"kubeconfig": kubeconfig}},
			kueueObject("MultiKueueCluster", "", name, map[string]any{
				"clusterSource": map[string]any{"kubeConfig": map[string]any{"locationType": "Secret", "location": "mk-" + name}},
			}))
	}
	return append(objs,
		kueueObject("MultiKueueConfig", "", mkConfig, map[string]any{"clusters": []any{in.Small, in.Big}}),
		kueueObject("AdmissionCheck", "", mkConfig, map[string]any{
			"controllerName": "kueue.x-k8s.io/multikueue",
			"parameters":     map[string]any{"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": mkConfig},
		}),
		kueueObject("ResourceFlavor", "", "mk-flavor", map[string]any{}),
		multiKueueQuota(in.Namespace, []any{map[string]any{"name": mkConfig}}),
		kueueObject("LocalQueue", in.Namespace, mkQueue, map[string]any{"clusterQueue": in.Namespace}),
	)
}

// kueueConditions are the conditions of the cluster-scoped Kueue object
// kind/name, status by type.
func kueueConditions(ctx context.Context, g Gomega, c client.Client, kind, name string) map[string]string {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kueueGV.WithKind(kind))
	g.Expect(c.Get(ctx, client.ObjectKey{Name: name}, u)).To(Succeed())
	return kueueConditionsOf(u)
}

func kueueConditionsOf(u *unstructured.Unstructured) map[string]string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	out := map[string]string{}
	for _, cond := range conds {
		m, _ := cond.(map[string]any)
		out[fmt.Sprint(m["type"])] = fmt.Sprint(m["status"])
	}
	return out
}

// watchRemoteCopies records the workers on which each Workload name is
// created in namespace, from now until the spec ends; the returned function
// reads what was recorded.
func watchRemoteCopies(ctx context.Context, namespace string, workers map[string]client.WithWatch) func() map[string][]string {
	GinkgoHelper()
	var mu sync.Mutex
	seen := map[string][]string{}
	watchCtx, cancel := context.WithCancel(ctx)
	DeferCleanup(cancel)
	for name, c := range workers {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(kueueGV.WithKind("WorkloadList"))
		w, err := c.Watch(watchCtx, list, client.InNamespace(namespace))
		Expect(err).NotTo(HaveOccurred())
		go func() {
			defer GinkgoRecover()
			defer w.Stop()
			for {
				select {
				case <-watchCtx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok {
						return
					}
					if ev.Type != watch.Added {
						continue
					}
					u, _ := ev.Object.(*unstructured.Unstructured)
					if u == nil {
						continue
					}
					mu.Lock()
					if !slices.Contains(seen[u.GetName()], name) {
						seen[u.GetName()] = append(seen[u.GetName()], name)
						slices.Sort(seen[u.GetName()])
					}
					mu.Unlock()
				}
			}
		}()
	}
	return func() map[string][]string {
		mu.Lock()
		defer mu.Unlock()
		out := map[string][]string{}
		for k, v := range seen {
			out[k] = slices.Clone(v)
		}
		return out
	}
}

// startDispatcher runs the dispatcher binary (beside imperatorctl) against
// the hub cluster with a token of a ServiceAccount bound to the shipped
// role imperator-fleet-viewer, and stops it after the spec.
func startDispatcher(ctx context.Context, env *Env, hubC client.Client, dir string, extraArgs ...string) *harness.Process {
	GinkgoHelper()
	By("installing the hub's access roles (deploy/hub/rbac/access_roles.yaml) where missing")
	docs, err := ReadDocuments(filepath.Join(env.RepoRoot, "deploy", "hub", "rbac", "access_roles.yaml"))
	Expect(err).NotTo(HaveOccurred())
	for _, doc := range docs {
		role := &rbacv1.ClusterRole{}
		Expect(yaml.Unmarshal(doc, role)).To(Succeed())
		if role.Name == "" {
			continue // a document of comments only
		}
		Expect(client.IgnoreAlreadyExists(hubC.Create(ctx, role))).To(Succeed())
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: kueue.Namespace, Name: "imperator-dispatcher"}}
	Expect(client.IgnoreAlreadyExists(hubC.Create(ctx, sa))).To(Succeed())
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "imperator-dispatcher-e2e"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "imperator-fleet-viewer"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}}}
	Expect(client.IgnoreAlreadyExists(hubC.Create(ctx, binding))).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		Expect(client.IgnoreNotFound(hubC.Delete(ctx, binding))).To(Succeed())
		Expect(client.IgnoreNotFound(hubC.Delete(ctx, sa))).To(Succeed())
	})
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	Expect(hubC.SubResource("token").Create(ctx, sa, tr)).To(Succeed())
	tokenFile := filepath.Join(dir, "dispatcher.token")
	Expect(os.WriteFile(tokenFile, []byte(tr.Status.Token), 0o600)).To(Succeed())

	cfg, err := ctlconfig.Load(env.Ctl.Config, true)
	Expect(err).NotTo(HaveOccurred())
	hctx, err := cfg.Lookup("")
	Expect(err).NotTo(HaveOccurred())
	caFile := hctx.CertificateAuthority
	if caFile == "" {
		caFile = filepath.Join(dir, "hub-ca.crt")
		Expect(os.WriteFile(caFile, []byte(hctx.CertificateAuthorityData), 0o600)).To(Succeed())
	}
	kubeconfig := filepath.Join(dir, "dispatcher.kubeconfig")
	Expect(kueue.WriteKubeconfig(kubeconfig, env.Hub.Config)).To(Succeed())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	probe := l.Addr().(*net.TCPAddr).Port
	Expect(l.Close()).To(Succeed())
	args := []string{"--kubeconfig", kubeconfig, "--hub-address", hctx.Hub, "--hub-ca-file", caFile, "--hub-token-file", tokenFile,
		"--health-probe-bind-address", "127.0.0.1:" + strconv.Itoa(probe), "--zap-log-level", "1"}
	if hctx.ServerName != "" {
		args = append(args, "--hub-server-name", hctx.ServerName)
	}
	args = append(args, extraArgs...)
	proc, err := harness.StartProcess("dispatcher", filepath.Join(filepath.Dir(env.Ctl.Bin), "dispatcher"), args, dir)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			GinkgoWriter.Printf("\n===== the dispatcher's log =====\n%s\n", proc.Tail(60))
		}
		if proc.Running() {
			Expect(proc.Stop()).To(Succeed())
		}
	})
	Expect(proc.WaitReady(ctx, "http://127.0.0.1:"+strconv.Itoa(probe)+"/readyz", time.Minute)).To(Succeed(), proc.Tail(30))
	return proc
}

// multiKueueJob is a suspended Job of parallelism pods in the journey's
// queue, managed by MultiKueue, each pod a guest of the journey's type
// stating one unit; kwok keeps its pods running for an hour.
func multiKueueJob(namespace, name string, parallelism int32) *batchv1.Job {
	unit := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("40"), corev1.ResourceMemory: resource.MustParse("128Gi"),
		"nvidia.com/gpu": resource.MustParse("2")}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{kueueJobLabel: mkQueue}},
		Spec: batchv1.JobSpec{
			ManagedBy:   ptr.To("kueue.x-k8s.io/multikueue"),
			Suspend:     ptr.To(true),
			Parallelism: ptr.To(parallelism),
			Completions: ptr.To(parallelism),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels: map[string]string{imperatorv1alpha1.MachineGroupKey: mkGroup, imperatorv1alpha1.MachineTypeKey: mkType,
						imperatorv1alpha1.PodRoleKey: "guest"},
					// kwok takes the smaller of delay and jitter-delay.
					Annotations: map[string]string{"pod-complete.stage.kwok.x-k8s.io/delay": "1h",
						"pod-complete.stage.kwok.x-k8s.io/jitter-delay": "1h"},
				},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "train", Image: "registry.example/trainer:1",
						Resources: corev1.ResourceRequirements{Requests: unit, Limits: unit}}},
				},
			},
		},
	}
}

// jobWorkload is the manager's Workload of job.
func jobWorkload(ctx context.Context, g Gomega, c client.Client, job *batchv1.Job) *unstructured.Unstructured {
	wls := &unstructured.UnstructuredList{}
	wls.SetGroupVersionKind(kueueGV.WithKind("WorkloadList"))
	g.Expect(c.List(ctx, wls, client.InNamespace(job.Namespace))).To(Succeed())
	for i, w := range wls.Items {
		if owner := w.GetOwnerReferences(); len(owner) > 0 && owner[0].UID == job.UID {
			return &wls.Items[i]
		}
	}
	g.Expect(job.UID).To(BeEmpty(), "no Workload of Job %s yet", job.Name) // fails: the job has a UID
	return nil
}

// runDispatchedJob creates job on the manager and waits until its Workload
// has clusterName want, having been nominated want alone; it returns the
// Workload's name and how long after quota reservation (as polled) the
// nomination came.
func runDispatchedJob(ctx context.Context, c client.Client, job *batchv1.Job, want string) (string, time.Duration) {
	GinkgoHelper()
	Expect(c.Create(ctx, job)).To(Succeed())
	var name string
	var reserved, nominated time.Time
	Eventually(ctx, func(g Gomega) {
		wl := jobWorkload(ctx, g, c, job)
		name = wl.GetName()
		if reserved.IsZero() && kueueConditionsOf(wl)["QuotaReserved"] == "True" {
			reserved = time.Now()
		}
		names, _, _ := unstructured.NestedStringSlice(wl.Object, "status", "nominatedClusterNames")
		cluster, _, _ := unstructured.NestedString(wl.Object, "status", "clusterName")
		if nominated.IsZero() && (len(names) > 0 || cluster != "") {
			nominated = time.Now()
			g.Expect(names).To(Or(BeEmpty(), Equal([]string{want})), "the dispatcher nominates %s alone", want)
		}
		g.Expect(cluster).To(Equal(want), "the Workload of Job %s is placed on %s", job.Name, want)
	}).WithTimeout(spokeTimeout).WithPolling(50 * time.Millisecond).Should(Succeed())
	return name, nominated.Sub(reserved)
}

// expectRunning waits until the copy of job on a worker has all its pods running.
func expectRunning(ctx context.Context, worker client.Client, job *batchv1.Job) {
	GinkgoHelper()
	Eventually(ctx, func(g Gomega) {
		pods := &corev1.PodList{}
		g.Expect(worker.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{"batch.kubernetes.io/job-name": job.Name})).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(int(*job.Spec.Parallelism)))
		for _, p := range pods.Items {
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "pod %s of Job %s runs", p.Name, job.Name)
		}
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
}
