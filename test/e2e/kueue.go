package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/kueue"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// KueueInput configures KueueSpec.
type KueueInput struct {
	Env *Env
	// Spoke is where the journey adds a Machine of its own, named Group,
	// with Units units of Type (40 CPUs, 128Gi and 2 nvidia.com/gpu each,
	// what the journey's Jobs state) on a node of its own named Node; the
	// Jobs ask for it by label. Units is at least 2.
	Spoke, Group, Type, Node string
	Units                    int32
	// TooMany is a Job's parallelism larger than Units.
	TooMany int32
	// Namespace is created for the journey and deleted after it.
	Namespace string
}

// What the journey's Kueue objects are called.
const (
	kueueCheck      = "imperator-capacity"
	kueueHeldQueue  = "held"
	kueuePlainQueue = "plain"
)

var (
	kueueGV       = schema.GroupVersion{Group: "kueue.x-k8s.io", Version: "v1beta2"}
	provReqGVK    = schema.GroupVersionKind{Group: "autoscaling.x-k8s.io", Version: "v1", Kind: "ProvisioningRequest"}
	kueueJobLabel = "kueue.x-k8s.io/queue-name"
)

// KueueSpec is journey 11: Kueue's own v0.17.0 controller books the units of
// a Machine the journey adds through the agent's ProvisioningRequest class. The ProvisioningRequest
// CRD is installed and the spoke's agent restarted (it serves the class when
// the CRD is there as it starts); Kueue runs against the spoke. A ClusterQueue
// whose admission check is Kueue's ProvisioningRequest check of the class
// capacity-hold.imperator.tenzen-y.io admits a 2-pod Job only once a
// CapacityHold holds 2 units; the Job's pods claim the hold (its UID stamped
// by the injector) and run; the units are free again when the Job finished.
// A Job of more pods than the type has is not admitted: the request fails
// with NotEnoughFreeUnits and Kueue's Workload says so; so is a Job whose
// template relies on injection for its unit (ResourcesNotStated: Kueue's
// quota would not count it, docs/kueue.md). The same 2-pod Job
// through a ClusterQueue without the check is the comparison: both times
// (Job to admitted, Job to Running) go into the report.
func KueueSpec(ctx context.Context, in KueueInput) {
	if in.Env.Fleet == nil {
		Skip("the journey restarts the spoke's agent: it needs a fleet it started")
	}
	if in.Env.Modes[in.Spoke] == "hosted" {
		Skip("journey 11 restarts the spoke's in-cluster agent with the CRD; a hosted agent's ProvisioningRequests are the hosted suite's spec")
	}
	spoke := in.Env.Spoke(in.Spoke)
	scheme := runtime.NewScheme()
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(apiextensionsv1.AddToScheme(scheme)).To(Succeed())
	Expect(imperatorv1alpha1.AddToScheme(scheme)).To(Succeed())
	c, err := client.New(spoke.Config, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	By("installing the ProvisioningRequest CRD the spoke chart ships, and restarting the agent so that it serves the class")
	Expect(kueue.InstallCRDs(ctx, c, filepath.Join(in.Env.RepoRoot, "deploy", "spoke", "provisioningrequest"))).To(Succeed())
	Expect(in.Env.Fleet.StopAgent(in.Spoke)).To(Succeed())
	Expect(in.Env.Fleet.StartAgent(ctx, in.Spoke)).To(Succeed())

	addOwnXlarge(ctx, in.Env, in.Spoke, in.Node, in.Group, in.Type, in.Units)

	By("starting Kueue v0.17.0 (built into the tool cache) against the spoke")
	dir, err := os.MkdirTemp("", "imperator-kueue-")
	Expect(err).NotTo(HaveOccurred())
	k, err := kueue.Start(ctx, spoke.Config, c, dir)
	Expect(err).NotTo(HaveOccurred(), "Kueue's files are in %s", dir)
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			GinkgoWriter.Printf("\n===== Kueue's log (%s) =====\n%s\n", dir, k.Logs(80))
		}
		Expect(k.Stop()).To(Succeed())
		if !CurrentSpecReport().Failed() {
			Expect(os.RemoveAll(dir)).To(Succeed())
		}
	})

	ns := wrappers.MakeNamespace(in.Namespace).InjectionEnabled().Obj()
	Expect(client.IgnoreAlreadyExists(c.Create(ctx, ns))).To(Succeed())
	objects := kueueObjects(in.Namespace)
	for _, o := range objects {
		Expect(c.Create(ctx, o)).To(Succeed(), "creating %s %s", o.GetKind(), o.GetName())
	}
	DeferCleanup(func(ctx context.Context) {
		By("deleting the journey's Jobs and Kueue objects: every unit is free again")
		Expect(client.IgnoreNotFound(c.DeleteAllOf(ctx, &batchv1.Job{}, client.InNamespace(in.Namespace),
			client.PropagationPolicy(metav1.DeletePropagationBackground)))).To(Succeed())
		Expect(client.IgnoreNotFound(c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(in.Namespace), client.GracePeriodSeconds(0)))).To(Succeed())
		for i := len(objects) - 1; i >= 0; i-- {
			Expect(client.IgnoreNotFound(c.Delete(ctx, objects[i]))).To(Succeed())
		}
		Expect(client.IgnoreNotFound(c.Delete(ctx, ns))).To(Succeed())
		Eventually(ctx, func(g Gomega) {
			holds := &imperatorv1alpha1.CapacityHoldList{}
			g.Expect(c.List(ctx, holds, client.HasLabels{"imperator.tenzen-y.io/provisioning-request-namespace"})).To(Succeed())
			for _, h := range holds.Items {
				g.Expect(h.Labels["imperator.tenzen-y.io/provisioning-request-namespace"]).NotTo(Equal(in.Namespace), "hold %s left behind", h.Name)
			}
		}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
	})

	By("both ClusterQueues are active (the admission check found its ProvisioningRequestConfig)")
	Eventually(ctx, func(g Gomega) {
		for _, name := range []string{in.Namespace + "-" + kueueHeldQueue, in.Namespace + "-" + kueuePlainQueue} {
			cq := &unstructured.Unstructured{}
			cq.SetGroupVersionKind(kueueGV.WithKind("ClusterQueue"))
			g.Expect(c.Get(ctx, client.ObjectKey{Name: name}, cq)).To(Succeed())
			conds, _, _ := unstructured.NestedSlice(cq.Object, "status", "conditions")
			g.Expect(conds).To(ContainElement(And(HaveKeyWithValue("type", "Active"), HaveKeyWithValue("status", "True"))), "ClusterQueue %s is active", name)
		}
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By("a 2-pod Job through the ClusterQueue without the check: the comparison")
	plain := kueueJob(in, "plain-2", kueuePlainQueue, 2)
	plainAdmitted, plainRunning := runKueueJob(ctx, c, plain)
	AddReportEntry("Kueue without the check: Job to admitted, to Running", fmt.Sprintf("%s, %s", plainAdmitted, plainRunning))
	Eventually(ctx, jobSucceeded(ctx, c, plain)).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By("a 2-pod Job through the ClusterQueue with the ProvisioningRequest check: admitted once 2 units are held")
	held := kueueJob(in, "held-2", kueueHeldQueue, 2)
	heldAdmitted, heldRunning := runKueueJob(ctx, c, held)
	AddReportEntry("Kueue with the check: Job to admitted, to Running", fmt.Sprintf("%s, %s", heldAdmitted, heldRunning))
	var hold imperatorv1alpha1.CapacityHold
	Eventually(ctx, func(g Gomega) {
		holds := &imperatorv1alpha1.CapacityHoldList{}
		g.Expect(c.List(ctx, holds, client.MatchingLabels{"imperator.tenzen-y.io/provisioning-request-namespace": in.Namespace})).To(Succeed())
		g.Expect(holds.Items).To(HaveLen(1), "one CapacityHold for the Job's ProvisioningRequest")
		hold = holds.Items[0]
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
	Expect(hold.Spec).To(And(HaveField("MachineGroup", in.Group), HaveField("MachineType", in.Type), HaveField("Count", int32(2))))
	Expect(hold.Status.Conditions).To(ContainElement(And(HaveField("Type", imperatorv1alpha1.HoldConditionAccepted),
		HaveField("Status", metav1.ConditionTrue))), "the Machine controller accepted the hold")
	Expect(requestConditions(ctx, Default, c, in.Namespace, hold.Annotations["imperator.tenzen-y.io/provisioning-request-name"])).To(
		HaveKeyWithValue("Provisioned", "True"), "the ProvisioningRequest Kueue admitted the Job on")

	By("the Job's pods claim the hold: the injector stamped its UID, and they hold its 2 units")
	Eventually(ctx, func(g Gomega) {
		pods := &corev1.PodList{}
		g.Expect(c.List(ctx, pods, client.InNamespace(in.Namespace), client.MatchingLabels{"batch.kubernetes.io/job-name": held.Name})).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(2))
		for _, p := range pods.Items {
			g.Expect(p.Annotations).To(HaveKeyWithValue(imperatorv1alpha1.ProvisioningClassNameAnnotation, imperatorv1alpha1.CapacityHoldProvisioningClass))
			g.Expect(p.Annotations).To(HaveKeyWithValue(imperatorv1alpha1.HoldUIDAnnotation, string(hold.UID)), "pod %s claims the hold", p.Name)
		}
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By("the Job finishes: its units are free again")
	Eventually(ctx, jobSucceeded(ctx, c, held)).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
	Eventually(ctx, func(g Gomega) {
		resp, err := in.Env.Ctl.Usage(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		u := UsageOf(resp, in.Spoke, in.Group, in.Type)
		g.Expect(u).NotTo(BeNil())
		g.Expect(u.GetUsed()).To(BeZero(), "used %s units of %s", in.Type, in.Spoke)
		g.Expect(u.GetFree()).To(Equal(u.GetMaximum()), "free %s units of %s: the hold's booking ended with the Job", in.Type, in.Spoke)
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	Eventually(ctx, func(g Gomega) {
		g.Expect(requestConditions(ctx, g, c, in.Namespace, hold.Annotations["imperator.tenzen-y.io/provisioning-request-name"])).To(
			HaveKeyWithValue("BookingExpired", "True"), "the booking ended with the Job, as Cluster Autoscaler's once the pods are scheduled")
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By(fmt.Sprintf("a %d-pod Job, more than the type has, is not admitted: the ProvisioningRequest fails with NotEnoughFreeUnits and Kueue's Workload says so", in.TooMany))
	tooBig := kueueJob(in, "too-big", kueueHeldQueue, in.TooMany)
	Expect(c.Create(ctx, tooBig)).To(Succeed())
	Eventually(ctx, func(g Gomega) {
		reqs := &unstructured.UnstructuredList{}
		reqs.SetGroupVersionKind(provReqGVK.GroupVersion().WithKind("ProvisioningRequestList"))
		g.Expect(c.List(ctx, reqs, client.InNamespace(in.Namespace))).To(Succeed())
		var failed []string
		for _, r := range reqs.Items {
			conds, _, _ := unstructured.NestedSlice(r.Object, "status", "conditions")
			for _, cond := range conds {
				m, _ := cond.(map[string]any)
				if m["type"] == "Failed" && m["status"] == "True" {
					failed = append(failed, fmt.Sprint(m["reason"]))
				}
			}
		}
		g.Expect(failed).To(ContainElement(imperatorv1alpha1.HoldReasonNotEnoughFreeUnits))
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
	Eventually(ctx, func(g Gomega) {
		g.Expect(checkMessages(ctx, g, c, tooBig)).To(ContainElement(And(ContainSubstring("Retrying after failure: CapacityHold"),
			ContainSubstring(fmt.Sprintf("%d units of %s asked", in.TooMany, in.Type)))),
			"Kueue's admission check says why, in the Workload")
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())

	By("a Job whose template relies on injection for the unit is not admitted: Kueue's quota would not count it, and the Workload says so")
	injected := kueueJob(in, "injected", kueueHeldQueue, 1)
	injected.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	Expect(c.Create(ctx, injected)).To(Succeed())
	Eventually(ctx, func(g Gomega) {
		g.Expect(checkMessages(ctx, g, c, injected)).To(ContainElement(And(ContainSubstring("Retrying after failure"),
			ContainSubstring(fmt.Sprintf("must request one unit of machine type %s, so that Kueue's quota counts it", in.Type)))),
			"Kueue's admission check says why, in the Workload")
	}).WithTimeout(spokeTimeout).WithPolling(poll).Should(Succeed())
}

// checkMessages are the admission check messages of job's Workload; it
// fails when the Workload is admitted.
func checkMessages(ctx context.Context, g Gomega, c client.Client, job *batchv1.Job) []string {
	wls := &unstructured.UnstructuredList{}
	wls.SetGroupVersionKind(kueueGV.WithKind("WorkloadList"))
	g.Expect(c.List(ctx, wls, client.InNamespace(job.Namespace))).To(Succeed())
	var messages []string
	for _, w := range wls.Items {
		if owner := w.GetOwnerReferences(); len(owner) == 0 || owner[0].Name != job.Name {
			continue
		}
		checks, _, _ := unstructured.NestedSlice(w.Object, "status", "admissionChecks")
		for _, ch := range checks {
			m, _ := ch.(map[string]any)
			messages = append(messages, fmt.Sprint(m["message"]))
		}
		conds, _, _ := unstructured.NestedSlice(w.Object, "status", "conditions")
		for _, cond := range conds {
			m, _ := cond.(map[string]any)
			g.Expect(m["type"] == "Admitted" && m["status"] == "True").To(BeFalse(), "the Workload of %s is admitted", job.Name)
		}
	}
	return messages
}

// kueueObjects are the Kueue objects of docs/kueue.md: a ResourceFlavor,
// the ProvisioningRequestConfig of the class and its AdmissionCheck, a
// ClusterQueue with the check and one without, and a LocalQueue for each in
// namespace.
func kueueObjects(namespace string) []*unstructured.Unstructured {
	obj := func(kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
		u.SetGroupVersionKind(kueueGV.WithKind(kind))
		u.SetNamespace(ns)
		u.SetName(name)
		return u
	}
	quota := func(name string, checks []any) *unstructured.Unstructured {
		spec := map[string]any{
			"namespaceSelector": map[string]any{},
			"resourceGroups": []any{map[string]any{
				"coveredResources": []any{"cpu", "memory", "nvidia.com/gpu"},
				"flavors": []any{map[string]any{"name": "default-flavor", "resources": []any{
					map[string]any{"name": "cpu", "nominalQuota": "2000"},
					map[string]any{"name": "memory", "nominalQuota": "20Ti"},
					map[string]any{"name": "nvidia.com/gpu", "nominalQuota": "100"},
				}}},
			}},
		}
		if checks != nil {
			spec["admissionChecksStrategy"] = map[string]any{"admissionChecks": checks}
		}
		return obj("ClusterQueue", "", name, spec)
	}
	return []*unstructured.Unstructured{
		obj("ResourceFlavor", "", "default-flavor", map[string]any{}),
		obj("ProvisioningRequestConfig", "", kueueCheck, map[string]any{
			"provisioningClassName": imperatorv1alpha1.CapacityHoldProvisioningClass,
		}),
		obj("AdmissionCheck", "", kueueCheck, map[string]any{
			"controllerName": "kueue.x-k8s.io/provisioning-request",
			"parameters":     map[string]any{"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": kueueCheck},
		}),
		quota(namespace+"-"+kueueHeldQueue, []any{map[string]any{"name": kueueCheck}}),
		quota(namespace+"-"+kueuePlainQueue, nil),
		obj("LocalQueue", namespace, kueueHeldQueue, map[string]any{"clusterQueue": namespace + "-" + kueueHeldQueue}),
		obj("LocalQueue", namespace, kueuePlainQueue, map[string]any{"clusterQueue": namespace + "-" + kueuePlainQueue}),
	}
}

// kueueJob is a suspended Job of parallelism pods in queue, each a guest of
// the journey's type stating one unit (docs/kueue.md: Kueue's quota counts
// it); kwok completes its pods soon after they run.
func kueueJob(in KueueInput, name, queue string, parallelism int32) *batchv1.Job {
	unit := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("40"), corev1.ResourceMemory: resource.MustParse("128Gi"),
		"nvidia.com/gpu": resource.MustParse("2")}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: in.Namespace, Name: name, Labels: map[string]string{kueueJobLabel: queue}},
		Spec: batchv1.JobSpec{
			Suspend:     ptr.To(true),
			Parallelism: ptr.To(parallelism),
			Completions: ptr.To(parallelism),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels: map[string]string{imperatorv1alpha1.MachineGroupKey: in.Group, imperatorv1alpha1.MachineTypeKey: in.Type,
						imperatorv1alpha1.PodRoleKey: "guest"},
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

// runKueueJob creates job and returns how long after its creation the
// journey saw its Workload admitted and all its pods running (polled every
// 100 ms: the API's timestamps have whole seconds only).
func runKueueJob(ctx context.Context, c client.Client, job *batchv1.Job) (admitted, running time.Duration) {
	GinkgoHelper()
	start := time.Now()
	Expect(c.Create(ctx, job)).To(Succeed())
	Eventually(ctx, func(g Gomega) {
		wls := &unstructured.UnstructuredList{}
		wls.SetGroupVersionKind(kueueGV.WithKind("WorkloadList"))
		g.Expect(c.List(ctx, wls, client.InNamespace(job.Namespace))).To(Succeed())
		found := false
		for _, w := range wls.Items {
			if owner := w.GetOwnerReferences(); len(owner) == 0 || owner[0].UID != job.UID {
				continue
			}
			conds, _, _ := unstructured.NestedSlice(w.Object, "status", "conditions")
			for _, cond := range conds {
				m, _ := cond.(map[string]any)
				if m["type"] == "Admitted" && m["status"] == "True" {
					admitted, found = time.Since(start), true
				}
			}
		}
		g.Expect(found).To(BeTrue(), "the Workload of Job %s is admitted", job.Name)
	}).WithTimeout(spokeTimeout).WithPolling(100 * time.Millisecond).Should(Succeed())
	Eventually(ctx, func(g Gomega) {
		pods := &corev1.PodList{}
		g.Expect(c.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{"batch.kubernetes.io/job-name": job.Name})).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(int(*job.Spec.Parallelism)))
		for _, p := range pods.Items {
			g.Expect(p.Status.Phase).To(BeElementOf(corev1.PodRunning, corev1.PodSucceeded), "pod %s runs", p.Name)
		}
		running = time.Since(start)
	}).WithTimeout(spokeTimeout).WithPolling(100 * time.Millisecond).Should(Succeed())
	return admitted, running
}

// requestConditions are the conditions of ProvisioningRequest
// namespace/name, status by type.
func requestConditions(ctx context.Context, g Gomega, c client.Client, namespace, name string) map[string]string {
	req := &unstructured.Unstructured{}
	req.SetGroupVersionKind(provReqGVK)
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, req)).To(Succeed())
	conds, _, _ := unstructured.NestedSlice(req.Object, "status", "conditions")
	out := map[string]string{}
	for _, cond := range conds {
		m, _ := cond.(map[string]any)
		out[fmt.Sprint(m["type"])] = fmt.Sprint(m["status"])
	}
	return out
}

// jobSucceeded passes once every pod of job succeeded.
func jobSucceeded(ctx context.Context, c client.Client, job *batchv1.Job) func(Gomega) {
	return func(g Gomega) {
		got := &batchv1.Job{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(job), got)).To(Succeed())
		g.Expect(got.Status.Succeeded).To(Equal(*job.Spec.Completions), "Job %s succeeded", job.Name)
	}
}
