package e2e

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/imperator-federation/imperator/internal/ctlconfig"
	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/kueue"
)

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
