// Package install is the install journey (make e2e-install): the images of
// `make images` run as pods on a real node (containerd, runc, a bridge CNI,
// a kubelet and kube-proxy), installed from our Helm charts with the
// commands of the README's install section, and upgraded and uninstalled as
// a user does.
//
// One host holds one real node (kube-proxy's iptables chains and the
// kubelet's kubepods cgroups are host-wide), so the hub chart and the spoke
// chart go into one cluster, whose real node runs both: the spoke agent
// joins the hub as spoke-a through the hub's NodePort Service, as an agent
// in another cluster would, and guests run on the cluster's kwok GPU nodes.
package install

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/realnode"
	"github.com/imperator-federation/imperator/test/util/repo"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

const (
	namespace   = "imperator-system"
	tenantNS    = "team-a"
	clusterName = "spoke-a"
	gpuNode     = "gpu-1"
	machineName = "install-machine"
	machineType = "compute-small"
	podsReady   = 3 * time.Minute
)

// journey is what the steps share: the cluster, its real node, the tools.
type journey struct {
	t       *testing.T
	root    string
	cluster *harness.Cluster
	node    *realnode.Node
	helm    string
	ctl     string
	ctlCfg  string
	hubAddr string
	images  images
	upgrade images
	figures []string
	nodeIP  string
	started time.Time
	tenant  kubernetes.Interface
	// kubeconfig has the contexts hub and spoke-a, both of the one cluster.
	kubeconfig string
	hubReady   time.Time
}

// images are the hub and spoke image references of one `make images` run.
type images struct{ hub, spoke string }

func TestInstallJourney(t *testing.T) {
	if err := realnode.Missing(""); err != nil {
		t.Skipf("no real node here: %v", err)
	}
	j := &journey{t: t, started: time.Now()}
	var err error
	if j.root, err = repo.Root(); err != nil {
		t.Fatal(err)
	}
	if j.helm, err = repo.Tool("helm"); err != nil {
		t.Fatal(err)
	}
	j.images = readImages(t, envOr("INSTALL_IMAGES", filepath.Join(j.root, "bin", "install-images", "1")))
	j.upgrade = readImages(t, envOr("INSTALL_UPGRADE_IMAGES", filepath.Join(j.root, "bin", "install-images", "2")))
	j.ctl = filepath.Join(envOr("E2E_BIN_DIR", filepath.Join(j.root, "bin")), "imperatorctl")
	if _, err := os.Stat(j.ctl); err != nil {
		t.Fatalf("imperatorctl: %v (make build)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	// Acquire sweeps what a killed run left: the host's state is taken after.
	host, err := realnode.Acquire(ctx, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	before := hostState(t)
	stopped := false
	stop := func() {
		if j.cluster != nil {
			if err := j.cluster.Stop(); err != nil {
				t.Errorf("stopping the cluster: %v", err)
			}
		}
		if err := host.Release(); err != nil {
			t.Errorf("releasing the host: %v", err)
		}
	}
	defer func() {
		if !stopped {
			if t.Failed() && j.cluster != nil {
				t.Logf("cluster logs:\n%s", j.cluster.Logs(30))
				if j.node != nil {
					t.Logf("node logs:\n%s", j.node.Logs(30))
				}
				t.Logf("pods:\n%s", j.kubectlOut(context.Background(), "get", "pods", "-A", "-o", "wide"))
				t.Logf("events:\n%s", j.kubectlOut(context.Background(), "get", "events", "-A"))
				if d, err := time.ParseDuration(os.Getenv("INSTALL_HOLD_ON_FAILURE")); err == nil {
					t.Logf("holding the failed journey for %s: KUBECONFIG=%s", d, j.cluster.KubeconfigPath)
					time.Sleep(d)
				}
			}
			stop()
		}
	}()
	j.cluster, err = harness.Start(ctx, harness.Options{Name: "hub", AdvertiseAddress: host.Address})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	j.node, err = realnode.Start(ctx, j.cluster, realnode.Options{Host: host})
	if err != nil {
		t.Fatal(err)
	}
	j.figure("real node Ready", time.Since(start))
	for _, tarball := range j.images.tarballs(j.imagesDir("INSTALL_IMAGES", "1")) {
		if err := j.node.ImportImage(ctx, tarball); err != nil {
			t.Fatal(err)
		}
	}
	for _, tarball := range j.upgrade.tarballs(j.imagesDir("INSTALL_UPGRADE_IMAGES", "2")) {
		if err := j.node.ImportImage(ctx, tarball); err != nil {
			t.Fatal(err)
		}
	}
	j.nodeIP = j.nodeInternalIP(ctx)
	j.writeKubeconfig()
	if err := j.cluster.AddNode(ctx, wrappers.MakeNode(gpuNode).
		Capacity(corev1.ResourceCPU, "64").Capacity(corev1.ResourceMemory, "512Gi").
		GPU(8, "NVIDIA-H100-80GB-HBM3", "hopper").Obj()); err != nil {
		t.Fatal(err)
	}

	j.installHub(ctx)
	j.installSpoke(ctx)
	j.runGuest(ctx)
	// The agent runs this checkout's image under the previous chart's
	// RBAC until the upgrade: what the agent has learnt to do since (the
	// migration preflight's lists) is refused there, and the agent logs
	// those checks as skipped. Its pods are checked under this checkout's
	// chart, after the upgrade.
	j.noForbidden(ctx, "imperator-hub")
	j.upgradeBoth(ctx)
	j.noForbidden(ctx, "imperator-hub", "imperator-spoke")
	j.uninstallBoth(ctx)

	stopped = true
	if err := j.cluster.Stop(); err != nil {
		t.Errorf("stopping the cluster: %v", err)
	}
	after := hostState(t)
	if err := host.Release(); err != nil {
		t.Errorf("releasing the host: %v", err)
	}
	for what, was := range before {
		if after[what] != was {
			t.Errorf("%s differs after the journey:\nbefore:\n%s\nafter:\n%s", what, was, after[what])
		}
	}
	j.figure("journey", time.Since(j.started))
	t.Logf("figures:\n%s", strings.Join(j.figures, "\n"))
}

func (j *journey) figure(what string, d time.Duration) {
	line := fmt.Sprintf("  %-40s %s", what, d.Round(100*time.Millisecond))
	j.figures = append(j.figures, line)
	j.t.Log(strings.TrimSpace(line))
}

// podFigures records each pod's time from creation to Ready, by the API
// server's timestamps (whole seconds).
func (j *journey) podFigures(ctx context.Context, app string) {
	pods, err := j.cluster.Kubernetes().CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + app})
	if err != nil {
		j.t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				j.figure("pod "+p.Name+" created to Ready", c.LastTransitionTime.Sub(p.CreationTimestamp.Time))
			}
		}
	}
}

func (j *journey) step(what string) { j.t.Logf("STEP: %s", what) }

func (j *journey) imagesDir(env, n string) string {
	return envOr(env, filepath.Join(j.root, "bin", "install-images", n))
}

// installHub is the README's step 2 with Helm: the hub chart, its pods
// Ready, then imperatorctl reaching the hub through its Service.
func (j *journey) installHub(ctx context.Context) {
	j.step("helm install the hub chart; its pods become Ready")
	repoName, tag := splitRef(j.images.hub)
	start := time.Now()
	// Into imperator-system, which the previous spoke chart's objects use
	// too: one cluster holds both. The release goes where its objects go
	// (-n), as Helm charts do.
	j.helmRun(ctx, "hub", "install", "imperator-hub", filepath.Join(j.root, "deploy/charts/imperator-hub"),
		"--namespace", namespace, "--create-namespace",
		"--set", "image.repository="+repoName, "--set", "image.tag="+tag, "--set", "image.pullPolicy=Never",
		"--set", "service.type=NodePort",
		"--set", "servingHosts={"+j.nodeIP+",localhost,127.0.0.1}",
		"--set", "nodeSelector.kubernetes\\.io/hostname="+j.node.Name)
	j.kubectl(ctx, "hub", "-n", namespace, "rollout", "status", "deploy/imperator-hub", "--timeout=3m")
	j.figure("hub pods Ready after helm install", time.Since(start))
	j.podFigures(ctx, "imperator-hub")
	j.hubReady = time.Now()

	j.step("imperatorctl reaches the hub through its NodePort Service")
	port := strings.TrimSpace(j.kubectl(ctx, "hub", "-n", namespace, "get", "service", "imperator-hub", "-o", "jsonpath={.spec.ports[0].nodePort}"))
	j.hubAddr = j.nodeIP + ":" + port
	cfg := j.kubectl(ctx, "hub", "-n", namespace, "exec", "deploy/imperator-hub", "--",
		"/hub", "client-cert", "--name", "alice", "--role", "viewer", "--hub-address", j.hubAddr)
	j.ctlCfg = filepath.Join(j.cluster.Dir, "imperatorctl-config")
	if err := os.WriteFile(j.ctlCfg, []byte(cfg), 0o600); err != nil {
		j.t.Fatal(err)
	}
	j.eventually(ctx, "imperatorctl version answers", time.Minute, func(ctx context.Context) error {
		_, err := j.imperatorctl(ctx, "version")
		return err
	})
}

// installSpoke is the README's steps 3 and 4 with Helm: the hub CA and a
// join token from the hub's pod, the spoke chart, the agent Ready, joined
// and Available at the hub.
func (j *journey) installSpoke(ctx context.Context) {
	j.step("a join token from the hub; helm install the previous spoke chart (" + previousChartRef() + "); the agent becomes Ready and joins")
	dir := j.cluster.Dir
	ca := j.kubectl(ctx, "hub", "-n", namespace, "exec", "deploy/imperator-hub", "--", "/hub", "ca")
	token := j.kubectl(ctx, "hub", "-n", namespace, "exec", "deploy/imperator-hub", "--", "/hub", "token", "create", "--cluster", clusterName, "--ttl", "1h")
	for name, data := range map[string]string{"hub-ca.crt": ca, "join-token": token} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			j.t.Fatal(err)
		}
	}
	repoName, tag := splitRef(j.images.spoke)
	start := time.Now()
	// The previous chart version: upgradeBoth moves the release to this
	// checkout's chart, as a user upgrading the chart would.
	j.helmRun(ctx, clusterName, "install", "imperator-spoke", j.previousSpokeChart(ctx),
		"--set", "hub.address="+j.hubAddr, "--set", "hub.clusterName="+clusterName,
		"--set-file", "hub.ca="+filepath.Join(dir, "hub-ca.crt"), "--set-file", "hub.joinToken="+filepath.Join(dir, "join-token"),
		"--set", "image.repository="+repoName, "--set", "image.tag="+tag, "--set", "image.pullPolicy=Never",
		// The hub's chart made imperator-system already: one cluster holds both.
		"--set", "namespace.create=false",
		"--set", "nodeSelector.kubernetes\\.io/hostname="+j.node.Name)
	j.kubectl(ctx, clusterName, "-n", namespace, "rollout", "status", "deploy/imperator-spoke", "--timeout=3m")
	j.figure("agent pods Ready after helm install", time.Since(start))
	j.podFigures(ctx, "imperator-spoke")
	j.eventually(ctx, "the hub lists spoke-a Available", 2*time.Minute, func(ctx context.Context) error {
		return j.spokeAvailable(ctx)
	})
	j.figure("spoke-a Available after helm install", time.Since(start))
}

// runGuest is the README's guest: a Machine on the GPU node, and a guest a
// tenant's ServiceAccount creates, injected through the webhook Service,
// gated, let through, Running, counted at the hub.
func (j *journey) runGuest(ctx context.Context) {
	j.step("a Machine on the GPU node; a tenant's guest is injected, gated, let through and Running; the hub counts it")
	machine := fmt.Sprintf(`apiVersion: imperator.tenzen-y.io/v1alpha1
kind: Machine
metadata:
  name: %[1]s
  labels:
    imperator.tenzen-y.io/machine-group: %[1]s
spec:
  nodePool:
  - name: %[2]s
    mode: ready
    taint: true
    machineType:
    - name: %[3]s
  machineTypes:
  - name: %[3]s
    spec:
      cpu: 1000m
      memory: 1Gi
      gpu:
        type: nvidia.com/gpu
        num: 1
        family: hopper
    available: 2
`, machineName, gpuNode, machineType)
	// The webhook Service answers once kube-proxy has the agent's endpoints,
	// which may be a moment after the rollout: until then the API server's
	// call is refused, as it would be for a user applying a Machine right
	// after `rollout status`.
	start := time.Now()
	j.eventually(ctx, "the Machine is admitted through the webhook Service", time.Minute, func(ctx context.Context) error {
		return j.tryApply(ctx, clusterName, machine)
	})
	j.figure("Machine admitted after the agent's rollout", time.Since(start))
	j.apply(ctx, clusterName, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
  labels:
    imperator.tenzen-y.io/inject-resource: enabled
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: tenant
  namespace: %[1]s
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: pod-creator
  namespace: %[1]s
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [create, get, list, watch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: tenant-pods
  namespace: %[1]s
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-creator}
subjects:
- {kind: ServiceAccount, name: tenant, namespace: %[1]s}
`, tenantNS))
	token := strings.TrimSpace(j.kubectl(ctx, clusterName, "-n", tenantNS, "create", "token", "tenant", "--duration=1h"))
	cfg := rest.CopyConfig(j.cluster.Config)
	cfg.CertFile, cfg.KeyFile, cfg.BearerToken = "", "", token
	var err error
	if j.tenant, err = kubernetes.NewForConfig(cfg); err != nil {
		j.t.Fatal(err)
	}
	j.eventually(ctx, "the Machine's reservations hold its units", 2*time.Minute, func(ctx context.Context) error {
		u, err := j.usage(ctx)
		if err != nil {
			return err
		}
		if u.GetMaximum() != 2 || u.GetReserved() != 2 {
			return fmt.Errorf("%s at the hub: maximum %d, reserved %d; want 2 and 2", machineType, u.GetMaximum(), u.GetReserved())
		}
		return nil
	})

	created, err := j.tenant.CoreV1().Pods(tenantNS).Create(ctx, guest("guest-1"), metav1.CreateOptions{})
	if err != nil {
		j.t.Fatalf("the tenant's guest was refused: %v", err)
	}
	c := created.Spec.Containers[0]
	if got := c.Resources.Limits["nvidia.com/gpu"]; got.String() != "1" {
		j.t.Errorf("guest-1 was not injected: limits %v", c.Resources.Limits)
	}
	gated := false
	for _, g := range created.Spec.SchedulingGates {
		gated = gated || g.Name == "imperator.tenzen-y.io/slot"
	}
	if !gated {
		j.t.Errorf("guest-1 was created without the slot gate: %v", created.Spec.SchedulingGates)
	}
	j.eventually(ctx, "guest-1 is let through and Running", 2*time.Minute, func(ctx context.Context) error {
		p, err := j.tenant.CoreV1().Pods(tenantNS).Get(ctx, "guest-1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("guest-1 is %s, gates %v", p.Status.Phase, p.Spec.SchedulingGates)
		}
		return nil
	})
	j.eventually(ctx, "the hub's usage shows guest-1", time.Minute, func(ctx context.Context) error {
		return j.usedAtHub(ctx, 1)
	})
}

// noForbidden fails the journey on an API request of ours the cluster
// refused: a verb the pods use in-cluster that the charts' RBAC lacks shows
// only in their logs. It reads the logs of apps' pods that are not being
// deleted (after an upgrade, those of the release's current chart).
func (j *journey) noForbidden(ctx context.Context, apps ...string) {
	j.step("no request of the pods of " + strings.Join(apps, " and ") + " was forbidden")
	for _, app := range apps {
		pods := j.kubectl(ctx, "hub", "-n", namespace, "get", "pods", "-l", "app.kubernetes.io/name="+app,
			"-o", `go-template={{range .items}}{{if not .metadata.deletionTimestamp}}{{.metadata.name}}{{"\n"}}{{end}}{{end}}`)
		var logs strings.Builder
		for pod := range strings.Lines(pods) {
			logs.WriteString(j.kubectl(ctx, "hub", "-n", namespace, "logs", strings.TrimSpace(pod), "--all-containers", "--prefix"))
		}
		if strings.TrimSpace(logs.String()) == "" {
			j.t.Errorf("%s: no logs to read", app)
		}
		for line := range strings.Lines(logs.String()) {
			if strings.Contains(line, "is forbidden") || strings.Contains(line, "cannot list resource") || strings.Contains(line, "cannot get resource") {
				j.t.Errorf("%s: %s", app, strings.TrimSpace(line))
			}
		}
	}
}

// usedAtHub checks that the hub counts want guests of the type in use.
func (j *journey) usedAtHub(ctx context.Context, want int) error {
	u, err := j.usage(ctx)
	if err != nil {
		return err
	}
	if int(u.GetUsed()) != want {
		return fmt.Errorf("the hub counts %d used %s on %s, want %d", u.GetUsed(), machineType, clusterName, want)
	}
	return nil
}

// usage is the hub's usage of the journey's machine type on spoke-a.
func (j *journey) usage(ctx context.Context) (*queryv1.TypeUsage, error) {
	resp := &queryv1.GetUsageResponse{}
	if err := j.imperatorctlJSON(ctx, resp, "usage"); err != nil {
		return nil, err
	}
	for _, cu := range resp.GetClusters() {
		for _, t := range cu.GetTypes() {
			if cu.GetCluster() == clusterName && t.GetGroup() == machineName && t.GetType() == machineType {
				return t, nil
			}
		}
	}
	return nil, fmt.Errorf("the hub has no usage of %s/%s on %s", machineName, machineType, clusterName)
}

// spokeAvailable checks that the hub lists spoke-a Available and connected.
func (j *journey) spokeAvailable(ctx context.Context) error {
	resp := &queryv1.ListClustersResponse{}
	if err := j.imperatorctlJSON(ctx, resp, "clusters"); err != nil {
		return err
	}
	for _, c := range resp.GetClusters() {
		if c.GetName() == clusterName {
			if c.GetState() != queryv1.ClusterState_CLUSTER_STATE_AVAILABLE || !c.GetConnected() {
				return fmt.Errorf("%s is %s (connected %t): %s", clusterName, c.GetState(), c.GetConnected(), c.GetStateMessage())
			}
			return nil
		}
	}
	return fmt.Errorf("the hub does not list %s", clusterName)
}

func (j *journey) imperatorctlJSON(ctx context.Context, out proto.Message, args ...string) error {
	stdout, err := j.imperatorctl(ctx, append(args, "-o", "json")...)
	if err != nil {
		return err
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(stdout), out); err != nil {
		return fmt.Errorf("decoding imperatorctl %s: %w: %s", strings.Join(args, " "), err, stdout)
	}
	return nil
}

func guest(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenantNS, Labels: map[string]string{
			"imperator.tenzen-y.io/machine-group": machineName,
			"imperator.tenzen-y.io/machine-type":  machineType,
			"imperator.tenzen-y.io/pod-role":      "guest",
		}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Image: realnode.PauseImage, ImagePullPolicy: corev1.PullNever}},
		},
	}
}

// upgradeBoth is step 4: both charts upgraded to the rebuilt images while a
// tenant keeps creating guests (none may be refused) and imperatorctl keeps
// asking the hub.
func (j *journey) upgradeBoth(ctx context.Context) {
	j.step("helm upgrade both charts to the rebuilt tag while guests are created and the hub is asked")
	loadCtx, stopLoad := context.WithCancel(ctx)
	var created, refused, queries, unanswered atomic.Int64
	var refusals sync.Map
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; loadCtx.Err() == nil; i++ {
			_, err := j.tenant.CoreV1().Pods(tenantNS).Create(loadCtx, guest(fmt.Sprintf("upgrade-%d", i)), metav1.CreateOptions{})
			switch {
			case loadCtx.Err() != nil:
			case err != nil:
				refused.Add(1)
				refusals.Store(i, err.Error())
			default:
				created.Add(1)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	wg.Go(func() {
		for loadCtx.Err() == nil {
			_, err := j.imperatorctl(loadCtx, "clusters")
			if loadCtx.Err() == nil {
				queries.Add(1)
				if err != nil {
					unanswered.Add(1)
					j.t.Errorf("the hub did not answer during the upgrade: %v", err)
				}
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
	machineBefore := j.kubectl(ctx, clusterName, "get", "machine", machineName, "-o", "jsonpath={.metadata.uid} {.metadata.generation}")
	guestBefore := j.kubectl(ctx, clusterName, "-n", tenantNS, "get", "pod", "guest-1", "-o", "jsonpath={.metadata.uid} {.status.phase}")
	start := time.Now()
	_, hubTag := splitRef(j.upgrade.hub)
	j.helmRun(ctx, "hub", "upgrade", "imperator-hub", filepath.Join(j.root, "deploy/charts/imperator-hub"), "--namespace", namespace,
		"--reuse-values", "--set", "image.tag="+hubTag)
	_, spokeTag := splitRef(j.upgrade.spoke)
	// The previous chart put its objects into imperator-system while Helm
	// recorded the release in the context's namespace (default): the
	// current chart refuses to move them there, and namespaceOverride keeps
	// them where they are (docs/upgrading.md).
	j.helmRun(ctx, clusterName, "upgrade", "imperator-spoke", filepath.Join(j.root, "deploy/charts/imperator-spoke"), "--reuse-values",
		"--set", "namespaceOverride="+namespace, "--set", "image.tag="+spokeTag)
	j.kubectl(ctx, "hub", "-n", namespace, "rollout", "status", "deploy/imperator-hub", "--timeout=3m")
	j.kubectl(ctx, clusterName, "-n", namespace, "rollout", "status", "deploy/imperator-spoke", "--timeout=3m")
	j.figure("helm upgrade of both, rolled out", time.Since(start))
	// A little load after the rollout too: the new pods answer.
	time.Sleep(3 * time.Second)
	stopLoad()
	wg.Wait()
	j.t.Logf("during the upgrade: %d guests created, %d refused; %d hub queries, %d unanswered",
		created.Load(), refused.Load(), queries.Load(), unanswered.Load())
	j.figures = append(j.figures, fmt.Sprintf("  %-40s %d of %d (goal 0)", "guest creates refused during upgrade", refused.Load(), created.Load()+refused.Load()))
	refusals.Range(func(k, v any) bool {
		j.t.Errorf("guest upgrade-%v refused during the upgrade: %v", k, v)
		return true
	})
	if created.Load() == 0 {
		j.t.Error("no guest was created during the upgrade")
	}
	j.eventually(ctx, "spoke-a Available again after the upgrade", 2*time.Minute, func(ctx context.Context) error {
		return j.spokeAvailable(ctx)
	})
	// From the previous chart to this one: the Machine and the running
	// guest are the same objects, untouched.
	if after := j.kubectl(ctx, clusterName, "get", "machine", machineName, "-o", "jsonpath={.metadata.uid} {.metadata.generation}"); after != machineBefore {
		j.t.Errorf("Machine %s (uid, generation) was %q before the chart upgrade, %q after", machineName, machineBefore, after)
	}
	if after := j.kubectl(ctx, clusterName, "-n", tenantNS, "get", "pod", "guest-1", "-o", "jsonpath={.metadata.uid} {.status.phase}"); after != guestBefore {
		j.t.Errorf("guest-1 (uid, phase) was %q before the chart upgrade, %q after", guestBefore, after)
	}
	for _, d := range []string{"imperator-hub", "imperator-spoke"} {
		img := j.kubectl(ctx, "hub", "-n", namespace, "get", "deploy", d, "-o", "jsonpath={.spec.template.spec.containers[0].image}")
		if img != j.upgrade.hub && img != j.upgrade.spoke {
			j.t.Errorf("deployment %s runs %s after the upgrade, not the rebuilt tag", d, img)
		}
	}
}

// uninstallBoth is step 5: helm uninstall of both with the Machines in
// place and guests waiting (the order a hurried user takes); the spoke
// chart's post-delete hook (`spoke uninstall`) leaves no node labelled or
// tainted, no MachineNodePool held by a finalizer, no reservation holding a
// GPU, and every waiting guest told why it waits; nothing of ours may refuse
// a pod afterwards.
func (j *journey) uninstallBoth(ctx context.Context) {
	j.step("helm uninstall both with the Machine in place; the hook releases the node and tells waiting guests; nothing of ours is left that refuses pods")
	waiting := strings.Fields(j.kubectl(ctx, clusterName, "-n", tenantNS, "get", "pods", "-o",
		`jsonpath={range .items[?(@.spec.schedulingGates[0].name=="imperator.tenzen-y.io/slot")]}{.metadata.name}{" "}{end}`))
	start := time.Now()
	out := j.helmRun(ctx, clusterName, "uninstall", "imperator-spoke", "--wait")
	j.figure("helm uninstall of the spoke, hook included", time.Since(start))
	j.t.Logf("helm uninstall imperator-spoke:\n%s", out)
	j.helmRun(ctx, "hub", "uninstall", "imperator-hub", "--namespace", namespace, "--wait")
	node := j.kubectl(ctx, clusterName, "get", "node", gpuNode, "-o", "json")
	for _, left := range []string{`"imperator.tenzen-y.io/`} {
		if strings.Contains(node, left) {
			j.t.Errorf("node %s still carries a key of ours after helm uninstall:\n%s", gpuNode, node)
		}
	}
	if f := j.kubectl(ctx, clusterName, "get", "machinenodepools", "-o", "jsonpath={.items[*].metadata.finalizers}"); strings.TrimSpace(f) != "" {
		j.t.Errorf("MachineNodePools still hold finalizers after helm uninstall: %s", f)
	}
	if len(waiting) == 0 {
		j.t.Error("no guest was waiting at the slot gate when the spoke was uninstalled: the step checks nothing about them")
	}
	for _, name := range waiting {
		queue := j.kubectl(ctx, clusterName, "-n", tenantNS, "get", "pod", name, "--ignore-not-found", "-o", `jsonpath={.metadata.annotations.imperator\.tenzen-y\.io/queue}`)
		if !strings.HasPrefix(queue, "Imperator was uninstalled from this cluster") {
			j.t.Errorf("waiting guest %s after helm uninstall says %q, not why it waits", name, queue)
		}
	}
	j.t.Logf("%d waiting guests told why they wait; events:\n%s", len(waiting),
		j.kubectl(ctx, clusterName, "-n", tenantNS, "get", "events", "--field-selector", "reason=ImperatorUninstalled", "-o", "name"))
	for _, kind := range []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations",
		"mutatingadmissionpolicies", "validatingadmissionpolicies", "validatingadmissionpolicybindings", "mutatingadmissionpolicybindings"} {
		out := j.kubectl(ctx, "hub", "get", kind, "-o", "name")
		if strings.Contains(out, "imperator") {
			j.t.Errorf("left after helm uninstall: %s", out)
		}
	}
	// Pods go after their grace period (the 5 s preStop included).
	j.eventually(ctx, "nothing of ours left in "+namespace, time.Minute, func(ctx context.Context) error {
		var left []string
		out := j.kubectl(ctx, "hub", "get", "deploy,statefulsets,services,pods,jobs,serviceaccounts,roles,rolebindings", "-n", namespace, "-o", "name")
		for line := range strings.Lines(out) {
			if strings.Contains(line, "imperator") {
				left = append(left, strings.TrimSpace(line))
			}
		}
		// The reservations (named after their type and group) went with
		// the hook, their pods with them: no GPU held for nobody.
		out = j.kubectl(ctx, "hub", "get", "statefulsets,services,pods", "-n", namespace, "-l", "imperator.tenzen-y.io/pod-role=reservation", "-o", "name")
		for line := range strings.Lines(out) {
			left = append(left, strings.TrimSpace(line))
		}
		if len(left) > 0 {
			return fmt.Errorf("left: %v", left)
		}
		return nil
	})
	// Kept as the README says: the namespace, the CRDs and what the binaries
	// wrote (the hub's CA, issued certificates, inventories, Leases).
	j.t.Logf("kept after helm uninstall, as documented:\n%s%s", j.kubectl(ctx, "hub", "get", "secrets,configmaps,leases", "-n", namespace, "-o", "name"),
		j.kubectl(ctx, "hub", "get", "machines,machinenodepools,crds", "-o", "name"))
	out = j.kubectl(ctx, "hub", "get", "clusterroles,clusterrolebindings,priorityclasses", "-o", "name")
	for line := range strings.Lines(out) {
		if strings.Contains(line, "imperator") && !strings.Contains(line, "imperator-realnode") {
			j.t.Errorf("left after helm uninstall: %s", strings.TrimSpace(line))
		}
	}
	j.eventually(ctx, "a pod in an injecting namespace is admitted without the agent", time.Minute, func(ctx context.Context) error {
		p := guest("after-uninstall")
		p.Spec.NodeName = j.node.Name
		_, err := j.tenant.CoreV1().Pods(tenantNS).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
}

// previousChartRef is the commit whose spoke chart the journey installs
// before upgrading to this checkout's: INSTALL_PREVIOUS_CHART_REF, else the
// last commit before the chart grew its uninstall hook and new values.
func previousChartRef() string { return envOr("INSTALL_PREVIOUS_CHART_REF", "37f21f4") }

// previousSpokeChart extracts deploy/charts/imperator-spoke as it was at
// previousChartRef (git archive) and returns its directory.
func (j *journey) previousSpokeChart(ctx context.Context) string {
	j.t.Helper()
	dir := filepath.Join(j.cluster.Dir, "previous-chart")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		j.t.Fatal(err)
	}
	archive := exec.CommandContext(ctx, "git", "-C", j.root, "archive", previousChartRef(), "deploy/charts/imperator-spoke")
	extract := exec.CommandContext(ctx, "tar", "-x", "-C", dir)
	var err error
	if extract.Stdin, err = archive.StdoutPipe(); err != nil {
		j.t.Fatal(err)
	}
	var stderr bytes.Buffer
	archive.Stderr, extract.Stderr = &stderr, &stderr
	if err := extract.Start(); err != nil {
		j.t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		j.t.Fatalf("git archive %s deploy/charts/imperator-spoke: %v\n%s", previousChartRef(), err, stderr.String())
	}
	if err := extract.Wait(); err != nil {
		j.t.Fatalf("extracting the previous chart: %v\n%s", err, stderr.String())
	}
	return filepath.Join(dir, "deploy/charts/imperator-spoke")
}

// helmRun runs helm --kube-context kctx with args, as the README does.
func (j *journey) helmRun(ctx context.Context, kctx string, args ...string) string {
	j.t.Helper()
	cmd := exec.CommandContext(ctx, j.helm, append([]string{"--kube-context", kctx}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+j.kubeconfig, "HELM_CACHE_HOME="+filepath.Join(j.cluster.Dir, "helm-cache"),
		"HELM_CONFIG_HOME="+filepath.Join(j.cluster.Dir, "helm-config"), "HELM_DATA_HOME="+filepath.Join(j.cluster.Dir, "helm-data"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		j.t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// kubectl runs the cached kubectl against the cluster and returns its
// standard output (a command's own messages on stderr stay out of files
// written from it, as in a user's shell).
func (j *journey) kubectl(ctx context.Context, kctx string, args ...string) string {
	j.t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(harness.BinDir(), "kubectl"), append([]string{"--context", kctx}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+j.kubeconfig)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		j.t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func (j *journey) kubectlOut(ctx context.Context, args ...string) string {
	out, _ := j.cluster.Kubectl(ctx, args...)
	return out
}

// tryApply is kubectl apply -f of manifest, its failure returned.
func (j *journey) tryApply(ctx context.Context, kctx, manifest string) error {
	path := filepath.Join(j.cluster.Dir, fmt.Sprintf("apply-%d.yaml", time.Now().UnixNano()))
	if err := os.WriteFile(path, []byte(manifest), 0o600); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(harness.BinDir(), "kubectl"), "--context", kctx, "apply", "-f", path)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+j.kubeconfig)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl apply: %w: %s", err, out)
	}
	return nil
}

func (j *journey) apply(ctx context.Context, kctx, manifest string) {
	j.t.Helper()
	path := filepath.Join(j.cluster.Dir, fmt.Sprintf("apply-%d.yaml", time.Now().UnixNano()))
	if err := os.WriteFile(path, []byte(manifest), 0o600); err != nil {
		j.t.Fatal(err)
	}
	j.kubectl(ctx, kctx, "apply", "-f", path)
}

func (j *journey) imperatorctl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, j.ctl, append([]string{"--config", j.ctlCfg}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("imperatorctl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

func (j *journey) eventually(ctx context.Context, what string, timeout time.Duration, check func(context.Context) error) {
	j.t.Helper()
	start := time.Now()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		last = check(ctx)
		return last == nil, nil
	})
	if err != nil {
		j.t.Fatalf("%s: not within %s: %v", what, timeout, last)
	}
	j.t.Logf("%s (%s)", what, time.Since(start).Round(100*time.Millisecond))
}

// writeKubeconfig writes the cluster's kubeconfig with two contexts, hub
// and spoke-a, so that the journey's commands are the README's.
func (j *journey) writeKubeconfig() {
	cfg, err := clientcmd.LoadFromFile(j.cluster.KubeconfigPath)
	if err != nil {
		j.t.Fatal(err)
	}
	hub := cfg.Contexts[cfg.CurrentContext]
	if hub == nil {
		j.t.Fatalf("%s has no current context", j.cluster.KubeconfigPath)
	}
	cfg.Contexts = map[string]*clientcmdapi.Context{"hub": hub, clusterName: hub.DeepCopy()}
	cfg.CurrentContext = "hub"
	j.kubeconfig = filepath.Join(j.cluster.Dir, "kubeconfig-contexts")
	if err := clientcmd.WriteToFile(*cfg, j.kubeconfig); err != nil {
		j.t.Fatal(err)
	}
}

func (j *journey) nodeInternalIP(ctx context.Context) string {
	n, err := j.cluster.Kubernetes().CoreV1().Nodes().Get(ctx, j.node.Name, metav1.GetOptions{})
	if err != nil {
		j.t.Fatal(err)
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	j.t.Fatalf("node %s has no InternalIP: %v", j.node.Name, n.Status.Addresses)
	return ""
}

// readImages reads the image references of the docker tarballs in dir
// (hack/images.sh writes <name>-linux-<arch>.tar, tagged <registry>/<name>:<tag>).
func readImages(t *testing.T, dir string) images {
	t.Helper()
	var imgs images
	for _, name := range []string{"hub", "spoke"} {
		path := filepath.Join(dir, fmt.Sprintf("%s-linux-%s.tar", name, runtime.GOARCH))
		ref, err := tarballRef(path)
		if err != nil {
			t.Fatalf("image %s: %v (make e2e-install builds the images)", name, err)
		}
		if name == "hub" {
			imgs.hub = ref
		} else {
			imgs.spoke = ref
		}
	}
	return imgs
}

func (i images) tarballs(dir string) []string {
	return []string{
		filepath.Join(dir, fmt.Sprintf("hub-linux-%s.tar", runtime.GOARCH)),
		filepath.Join(dir, fmt.Sprintf("spoke-linux-%s.tar", runtime.GOARCH)),
	}
}

// tarballRef returns the one RepoTag of a docker tarball's manifest.json.
func tarballRef(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("%s has no manifest.json", path)
		}
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", path, err)
		}
		if h.Name != "manifest.json" {
			continue
		}
		var manifest []struct{ RepoTags []string }
		if err := json.NewDecoder(tr).Decode(&manifest); err != nil {
			return "", fmt.Errorf("%s: manifest.json: %w", path, err)
		}
		if len(manifest) != 1 || len(manifest[0].RepoTags) != 1 {
			return "", fmt.Errorf("%s: manifest.json names %v, want one image with one tag", path, manifest)
		}
		return manifest[0].RepoTags[0], nil
	}
}

// splitRef splits registry/name:tag into repository and tag.
func splitRef(ref string) (string, string) {
	i := strings.LastIndex(ref, ":")
	return ref[:i], ref[i+1:]
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// hostState is what the journey may change on the host's network namespace
// and mounts: links, iptables rules, mounts of a kubelet or containerd,
// network namespaces.
func hostState(t *testing.T) map[string]string {
	t.Helper()
	run := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v: %s", name, args, err, out)
		}
		return string(out)
	}
	// The API server's veth pair is up from Acquire to Release, before and
	// after the state is taken; its IPv6 address's "tentative" flag changes
	// meanwhile.
	var addrs []string
	for line := range strings.Lines(run("ip", "-o", "addr", "show")) {
		if !strings.Contains(line, "impapi") {
			addrs = append(addrs, line)
		}
	}
	state := map[string]string{"ip link": run("ip", "-o", "link", "show"), "ip addr": strings.Join(addrs, "")}
	for _, bin := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"filter", "nat", "mangle"} {
			state[bin+" -t "+table] = run(bin, "-w", "-t", table, "-S")
		}
	}
	var mounts []string
	for line := range strings.Lines(run("mount")) {
		if strings.Contains(line, "kubelet") || strings.Contains(line, "containerd") || strings.Contains(line, "netns") {
			mounts = append(mounts, line)
		}
	}
	state["mounts"] = strings.Join(mounts, "")
	entries, _ := os.ReadDir("/var/run/netns")
	var netns []string
	for _, e := range entries {
		netns = append(netns, e.Name())
	}
	state["netns"] = strings.Join(netns, " ")
	return state
}
