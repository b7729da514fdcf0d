package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

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
