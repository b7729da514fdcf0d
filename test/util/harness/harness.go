package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/imperator-federation/imperator/internal/pki"
)

const (
	// K8sVersion is the version of the control-plane binaries, and the name of
	// their cache directory (k8s-<version>) as built by hack/k8s-bin.sh.
	K8sVersion = "v1.36.3"

	// KwokNodeAnnotation marks the nodes kwok simulates; nodes without it are
	// left alone (a test can create a node that never becomes Ready).
	KwokNodeAnnotation = "kwok.x-k8s.io/node"

	// WorkloadAPIRuntimeConfig serves the alpha Workload API's version
	// (Workload, PodGroup); an APIServerFlags entry, with
	// WorkloadAPIFeatureGates.
	WorkloadAPIRuntimeConfig = "--runtime-config=scheduling.k8s.io/v1alpha2=true"

	defaultReadyTimeout = 90 * time.Second
	startAttempts       = 3
)

// WorkloadAPIFeatureGates turn on Kubernetes 1.36's alpha Workload API
// (KEP-4671): pods name a PodGroup in spec.schedulingGroup, and the
// scheduler's GangScheduling plugin binds a gang's pods only together.
var WorkloadAPIFeatureGates = []string{"GenericWorkload=true", "GangScheduling=true"}

// Options configure a cluster.
type Options struct {
	// Name identifies the cluster in logs, directories and the kubeconfig context.
	Name string
	// BinDir holds the binaries; default $IMPERATOR_K8S_BIN, then
	// $IMPERATOR_CACHE or $HOME/.cache/imperator, /k8s-<K8sVersion>.
	BinDir string
	// Dir is the working directory (data, certificates, logs, kubeconfig).
	// Default: a new temporary directory, removed by Stop. A given Dir is kept.
	Dir string
	// ReadyTimeout bounds the start-up; default 90s.
	ReadyTimeout time.Duration
	// APIServerFlags are extra kube-apiserver flags, e.g. "--v=2".
	APIServerFlags []string
	// ControllerManagerFlags are extra kube-controller-manager flags, e.g.
	// "--kube-api-qps=200" (its default of 20 paces the pods of every
	// StatefulSet it creates).
	ControllerManagerFlags []string
	// SchedulerFlags are extra kube-scheduler flags, e.g.
	// "--kube-api-qps=200" (its default of 50 paces the binding of a
	// burst of pods).
	SchedulerFlags []string
	// FeatureGates are Kubernetes feature gates ("GenericWorkload=true")
	// given to the API server, the controller-manager and the scheduler
	// alike (WorkloadAPIFeatureGates, say); alpha APIs they serve also need
	// their version in an APIServerFlags --runtime-config.
	FeatureGates []string
	// KwokParallelism is how many pod stages, node stages and node Lease
	// renewals (a write each) kwok plays at once, each; 0 keeps kwok's
	// default of 4, which on a busy 2-core machine starts about 20 pods a
	// second and lets the Leases of 1,000 nodes expire (the nodes go
	// NotReady, and the controller-manager marks their pods not ready).
	KwokParallelism uint
	// AdvertiseAddress, when set, is a non-loopback address of this host
	// (test/util/realnode.Host) the API server listens and advertises on,
	// for clusters whose pods run for real: the "kubernetes" Service's
	// endpoints are reconciled to it, so pods reach the API server through
	// kube-proxy, and the ServiceAccount admission plugin mounts their
	// tokens. Empty: loopback only, no ServiceAccount admission.
	AdvertiseAddress string
}

// Cluster is a running control plane with simulated nodes.
type Cluster struct {
	Name string
	// Dir holds the data, certificates, process logs and the kubeconfig.
	Dir string
	// KubeconfigPath is an admin (system:masters) kubeconfig for the cluster.
	KubeconfigPath string
	// Config is the admin rest.Config of the cluster.
	Config *rest.Config
	// CA signs the API server's serving certificate and the client
	// certificates it trusts; tests can issue further users with it.
	CA *pki.CA

	binDir  string
	ownsDir bool
	// procsMu guards procs: a fault test stops and starts the API server
	// while failure reports read the logs.
	procsMu sync.Mutex
	procs   []*Process // in start order; stopped in reverse
	// apiArgs are the kube-apiserver's arguments, to start it again after
	// StopAPIServer.
	apiArgs []string
	kube    kubernetes.Interface
	// stopHooks run first when the cluster stops, newest first.
	stopHooks []func() error
	stopOnce  sync.Once
	stopErr   error
}

// BinDir returns the directory the control-plane binaries are taken from.
func BinDir() string {
	if dir := os.Getenv("IMPERATOR_K8S_BIN"); dir != "" {
		return dir
	}
	cache := os.Getenv("IMPERATOR_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "imperator")
	}
	return filepath.Join(cache, "k8s-"+K8sVersion)
}

// StartN starts one cluster per name side by side. Either all start, or none
// is left running.
func StartN(ctx context.Context, names ...string) ([]*Cluster, error) {
	clusters := make([]*Cluster, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() { clusters[i], errs[i] = Start(ctx, Options{Name: name}) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range clusters {
			if c != nil {
				_ = c.Stop()
			}
		}
		return nil, err
	}
	return clusters, nil
}

// Start starts a cluster and returns once its API server is ready and its
// controller-manager is working. On error nothing is left running.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Name == "" {
		return nil, errors.New("harness: Options.Name is required")
	}
	c := &Cluster{Name: opts.Name, binDir: opts.BinDir, Dir: opts.Dir}
	if c.binDir == "" {
		c.binDir = BinDir()
	}
	for _, bin := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		if _, err := os.Stat(filepath.Join(c.binDir, bin)); err != nil {
			return nil, fmt.Errorf("harness: %s not found in %s (run `make k8s-bin`): %w", bin, c.binDir, err)
		}
	}
	if c.Dir == "" {
		dir, err := os.MkdirTemp("", "imperator-"+opts.Name+"-")
		if err != nil {
			return nil, fmt.Errorf("harness: creating working directory: %w", err)
		}
		c.Dir, c.ownsDir = dir, true
	} else if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("harness: creating working directory: %w", err)
	}
	timeout := opts.ReadyTimeout
	if timeout == 0 {
		timeout = defaultReadyTimeout
	}
	if err := c.writeCertificates(opts.AdvertiseAddress); err != nil {
		c.removeDir()
		return nil, err
	}

	var err error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		startCtx, cancel := context.WithTimeout(ctx, timeout)
		err = c.start(startCtx, opts)
		cancel()
		if err == nil {
			return c, nil
		}
		portClash := false
		for _, p := range c.processes() {
			portClash = portClash || p.errPortInUse()
		}
		if stopErr := c.stopProcesses(); stopErr != nil {
			// Processes of the failed start may still run: do not start more.
			err = errors.Join(err, fmt.Errorf("stopping the processes of the failed start: %w", stopErr))
			break
		}
		if !portClash {
			break
		}
		// Another process took a port between choosing and binding it: retry
		// with fresh ports and fresh etcd data.
		_ = os.RemoveAll(filepath.Join(c.Dir, "etcd"))
	}
	c.removeDir()
	return nil, fmt.Errorf("harness: starting cluster %s: %w", opts.Name, err)
}

func (c *Cluster) start(ctx context.Context, opts Options) error {
	ports, err := FreePorts(3)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]
	path := func(name string) string { return filepath.Join(c.Dir, name) }
	loopback := func(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) }

	etcd, err := StartProcess("etcd", c.bin("etcd"), []string{
		"--name=" + c.Name,
		"--data-dir=" + path("etcd"),
		"--listen-client-urls=" + loopback(etcdClient),
		"--advertise-client-urls=" + loopback(etcdClient),
		"--listen-peer-urls=" + loopback(etcdPeer),
		"--initial-advertise-peer-urls=" + loopback(etcdPeer),
		"--initial-cluster=" + c.Name + "=" + loopback(etcdPeer),
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}, c.Dir)
	if err != nil {
		return err
	}
	c.addProcess(etcd)

	apiArgs := []string{
		"--etcd-servers=" + loopback(etcdClient),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(apiPort),
		"--tls-cert-file=" + path("apiserver.crt"),
		"--tls-private-key-file=" + path("apiserver.key"),
		"--client-ca-file=" + path("ca.crt"),
		"--service-account-key-file=" + path("sa.key"),
		"--service-account-signing-key-file=" + path("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=RBAC",
		// Pods are created right after their namespace in tests; without a
		// kubelet nothing needs the token the ServiceAccount plugin mounts, and
		// it would reject pods until the namespace's default ServiceAccount exists.
		"--disable-admission-plugins=ServiceAccount",
		// The "kubernetes" Service's endpoint would be 127.0.0.1, which
		// Endpoints validation rejects.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--profiling=false",
		"--cert-dir=" + path("apiserver-certs"),
		// For logs, exec and port-forward on a real node (test/util/realnode),
		// whose kubelet trusts client certificates of the cluster CA.
		"--kubelet-client-certificate=" + path("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + path("apiserver-kubelet-client.key"),
		// A real node's name is not in DNS; its InternalIP is the host's.
		"--kubelet-preferred-address-types=InternalIP,Hostname",
	}
	if opts.AdvertiseAddress != "" {
		apiArgs = slices.DeleteFunc(apiArgs, func(a string) bool {
			return a == "--disable-admission-plugins=ServiceAccount" || a == "--endpoint-reconciler-type=none"
		})
		apiArgs = append(apiArgs, "--bind-address="+opts.AdvertiseAddress, "--advertise-address="+opts.AdvertiseAddress)
	}
	apiArgs = append(apiArgs, featureGateFlags(opts)...)
	apiArgs = append(apiArgs, opts.APIServerFlags...)
	c.apiArgs = apiArgs
	apiserver, err := StartProcess(apiServerName, c.bin("kube-apiserver"), c.apiArgs, c.Dir)
	if err != nil {
		return err
	}
	c.addProcess(apiserver)

	host := "127.0.0.1"
	if opts.AdvertiseAddress != "" {
		host = opts.AdvertiseAddress
	}
	c.Config = &rest.Config{
		Host: "https://" + net.JoinHostPort(host, strconv.Itoa(apiPort)),
		TLSClientConfig: rest.TLSClientConfig{
			CAFile:   path("ca.crt"),
			CertFile: path("admin.crt"),
			KeyFile:  path("admin.key"),
		},
		QPS:   200,
		Burst: 400,
	}
	if err := c.writeKubeconfig(); err != nil {
		return err
	}
	if c.kube, err = kubernetes.NewForConfig(c.Config); err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	if err := c.waitAPIServerReady(ctx); err != nil {
		return err
	}

	if err := c.startAfterAPIServer(opts); err != nil {
		return err
	}
	// The controller-manager creates every namespace's default ServiceAccount:
	// once it exists, the controller-manager is working.
	return waitFor(ctx, "kube-controller-manager", 200*time.Millisecond, c.processes(), func(ctx context.Context) bool {
		_, err := c.kube.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
}

// featureGateFlags is the --feature-gates flag of opts.FeatureGates, none
// without any.
func featureGateFlags(opts Options) []string {
	if len(opts.FeatureGates) == 0 {
		return nil
	}
	return []string{"--feature-gates=" + strings.Join(opts.FeatureGates, ",")}
}

// processes returns the running processes, in start order.
func (c *Cluster) processes() []*Process {
	c.procsMu.Lock()
	defer c.procsMu.Unlock()
	return slices.Clone(c.procs)
}

// addProcess records a started process.
func (c *Cluster) addProcess(p *Process) {
	c.procsMu.Lock()
	defer c.procsMu.Unlock()
	c.procs = append(c.procs, p)
}

// apiServerName is the kube-apiserver's process name, and its log's.
const apiServerName = "kube-apiserver"

func (c *Cluster) waitAPIServerReady(ctx context.Context) error {
	return waitFor(ctx, "kube-apiserver /readyz", 100*time.Millisecond, c.processes(), func(ctx context.Context) bool {
		return c.kube.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error() == nil
	})
}

// apiServer returns the running kube-apiserver process.
func (c *Cluster) apiServer() (*Process, error) {
	for _, p := range c.processes() {
		if p.Name() == apiServerName {
			return p, nil
		}
	}
	return nil, fmt.Errorf("cluster %s has no kube-apiserver running", c.Name)
}

// StopAPIServer stops the cluster's kube-apiserver, for a fault test: etcd
// and the other components keep running, clients get connection refused.
// StartAPIServer brings it back on the same address.
func (c *Cluster) StopAPIServer() error {
	p, err := c.apiServer()
	if err != nil {
		return err
	}
	if err := p.Stop(); err != nil {
		return err
	}
	c.procsMu.Lock()
	c.procs = slices.DeleteFunc(c.procs, func(q *Process) bool { return q == p })
	c.procsMu.Unlock()
	return nil
}

// StartAPIServer starts the kube-apiserver again after StopAPIServer, with
// the same arguments, and waits until it is ready.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	if _, err := c.apiServer(); err == nil {
		return nil
	}
	p, err := StartProcess(apiServerName, c.bin("kube-apiserver"), c.apiArgs, c.Dir)
	if err != nil {
		return err
	}
	c.addProcess(p)
	return c.waitAPIServerReady(ctx)
}

// startAfterAPIServer starts the controller-manager, the scheduler and kwok,
// each with the extra settings of opts.
func (c *Cluster) startAfterAPIServer(opts Options) error {
	path := func(name string) string { return filepath.Join(c.Dir, name) }
	kubeconfig := "--kubeconfig=" + c.KubeconfigPath
	stagesPath := path("kwok.yaml")
	if err := writeKwokConfig(stagesPath, opts.KwokParallelism); err != nil {
		return err
	}
	for _, p := range []struct {
		name string
		args []string
	}{
		{"kube-controller-manager", append([]string{
			kubeconfig,
			"--secure-port=0",
			"--leader-elect=false",
			"--use-service-account-credentials=false",
			"--service-account-private-key-file=" + path("sa.key"),
			"--root-ca-file=" + path("ca.crt"),
			"--cluster-signing-cert-file=" + path("ca.crt"),
			"--cluster-signing-key-file=" + path("ca.key"),
			"--concurrent-statefulset-syncs=10",
		}, slices.Concat(featureGateFlags(opts), opts.ControllerManagerFlags)...)},
		{"kube-scheduler", append([]string{kubeconfig, "--secure-port=0", "--leader-elect=false"}, slices.Concat(featureGateFlags(opts), opts.SchedulerFlags)...)},
		{"kwok", []string{
			kubeconfig,
			"--config=" + stagesPath,
			"--manage-all-nodes=false",
			"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=fake",
			"--node-lease-duration-seconds=40",
			"--cidr=10.244.0.0/16",
		}},
	} {
		proc, err := StartProcess(p.name, c.bin(p.name), p.args, c.Dir)
		if err != nil {
			return err
		}
		c.addProcess(proc)
	}
	return nil
}

// Stop stops every process of the cluster, newest first, and removes its
// working directory unless the caller chose it. It is safe to call twice.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		for i := len(c.stopHooks) - 1; i >= 0; i-- {
			errs = append(errs, c.stopHooks[i]())
		}
		c.stopErr = errors.Join(append(errs, c.stopProcesses())...)
		c.removeDir()
	})
	return c.stopErr
}

// OnStop registers fn to run when the cluster stops, before its control
// plane: a real node (test/util/realnode) stops its kubelet and containerd
// and cleans the host while the API server still answers.
func (c *Cluster) OnStop(fn func() error) {
	c.stopHooks = append(c.stopHooks, fn)
}

func (c *Cluster) stopProcesses() error {
	c.procsMu.Lock()
	procs := c.procs
	c.procs = nil
	c.procsMu.Unlock()
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		errs = append(errs, procs[i].Stop())
	}
	return errors.Join(errs...)
}

func (c *Cluster) removeDir() {
	if c.ownsDir {
		_ = os.RemoveAll(c.Dir)
	}
}

// Logs returns the last lines of every process log, for failure reports.
func (c *Cluster) Logs(lines int) string {
	var out string
	for _, p := range c.processes() {
		out += fmt.Sprintf("==> %s/%s (%s)\n%s\n", c.Name, p.name, p.logPath, p.Tail(lines))
	}
	return out
}

func (c *Cluster) bin(name string) string { return filepath.Join(c.binDir, name) }
