package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
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
