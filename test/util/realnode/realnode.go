package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/imperator-federation/imperator/test/util/harness"
)

const (
	cniBinDir   = "/usr/lib/cni"
	lockPath    = "/run/imperator-realnode.lock"
	certLife    = 24 * time.Hour
	defaultWait = 2 * time.Minute
)

// Options configure a real node.
type Options struct {
	// Name is the node's name; default <cluster>-node.
	Name string
	// BinDir holds the kubelet; default harness.BinDir().
	BinDir string
	// PodSubnet is the pods' subnet on the node's bridge; default 10.89.0.0/24.
	PodSubnet string
	// ReadyTimeout bounds the start until the node is Ready; default 2m.
	ReadyTimeout time.Duration
	// Host, from Acquire, makes the node a full one for a cluster started
	// with harness.Options.AdvertiseAddress = Host.Address: kube-proxy runs
	// beside the kubelet, so that pods reach the API server and Services
	// and the API server reaches webhook Services. The caller releases it
	// after the cluster stopped. Nil: the node takes the host's lock itself
	// and runs no kube-proxy.
	Host *Host
}

// Node is a running real node.
type Node struct {
	Name string
	// Dir holds containerd's and the kubelet's data, configuration and logs.
	Dir string
	// Socket is containerd's address.
	Socket string
	// Bridge is the name of the CNI bridge on the host.
	Bridge    string
	PodSubnet string

	cluster     *harness.Cluster
	binDir      string
	network     string
	port        int
	healthzPort int
	lock        *os.File
	withProxy   bool
	netnsBefore map[string]bool

	mu         sync.Mutex
	containerd *harness.Process
	kubelet    *harness.Process
	kubeProxy  *harness.Process
	stopOnce   sync.Once
	stopErr    error
}

// Missing returns why a real node cannot run here (not root, a binary
// missing), or nil.
func Missing(binDir string) error {
	if binDir == "" {
		binDir = harness.BinDir()
	}
	if os.Geteuid() != 0 {
		return errors.New("a real node needs root (containerd, runc, cgroups, iptables)")
	}
	var missing []string
	for _, bin := range []string{"/usr/bin/containerd", "/usr/bin/ctr", "/usr/bin/containerd-shim-runc-v2", "/usr/sbin/runc",
		cniBinDir + "/bridge", cniBinDir + "/host-local", cniBinDir + "/loopback", filepath.Join(binDir, "kubelet")} {
		if _, err := os.Stat(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	for _, tool := range []string{"iptables", "ip6tables", "ip", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %v (run hack/realnode/install-deps.sh and `make k8s-bin`)", missing)
	}
	return nil
}

// Start starts a real node for c and returns once it is Ready. The node stops
// with c; on error nothing is left running.
func Start(ctx context.Context, c *harness.Cluster, opts Options) (*Node, error) {
	if opts.BinDir == "" {
		opts.BinDir = harness.BinDir()
	}
	if err := Missing(opts.BinDir); err != nil {
		return nil, fmt.Errorf("realnode: %w", err)
	}
	if opts.Name == "" {
		opts.Name = c.Name + "-node"
	}
	if opts.PodSubnet == "" {
		opts.PodSubnet = "10.89.0.0/24"
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = defaultWait
	}
	var lock *os.File
	if opts.Host == nil {
		// Another suite's real node may be running: wait for it, within the start's time.
		var err error
		if lock, err = lockHost(ctx, opts.ReadyTimeout); err != nil {
			return nil, err
		}
	}
	n := &Node{
		Name:      opts.Name,
		Dir:       filepath.Join(c.Dir, "node-"+opts.Name),
		Bridge:    "imp" + strconv.Itoa(os.Getpid()%100000),
		PodSubnet: opts.PodSubnet,
		cluster:   c,
		binDir:    opts.BinDir,
		network:   "imperator-" + opts.Name,
		lock:      lock,
		withProxy: opts.Host != nil,
	}
	n.Socket = n.path("containerd.sock")
	n.netnsBefore = netnsNames()
	c.OnStop(n.Stop)
	startCtx, cancel := context.WithTimeout(ctx, opts.ReadyTimeout)
	defer cancel()
	if err := n.start(startCtx); err != nil {
		return nil, errors.Join(fmt.Errorf("realnode: starting %s: %w", n.Name, err), n.Stop())
	}
	return n, nil
}

func (n *Node) path(elem ...string) string { return filepath.Join(append([]string{n.Dir}, elem...)...) }

func (n *Node) start(ctx context.Context) error {
	ports, err := harness.FreePorts(2)
	if err != nil {
		return err
	}
	n.port, n.healthzPort = ports[0], ports[1]
	for file, data := range map[string]string{
		n.path("containerd.toml"):                    n.containerdConfig(),
		n.path("cni", "net.d", "10-bridge.conflist"): n.cniConfig(),
		n.path("kubelet.yaml"):                       n.kubeletConfig(),
	} {
		if err := writeFile(file, data); err != nil {
			return err
		}
	}
	if err := n.writeKubeconfig(ctx); err != nil {
		return err
	}

	containerd, err := harness.StartProcess("containerd", "/usr/bin/containerd", []string{"--config=" + n.path("containerd.toml")}, n.Dir)
	if err != nil {
		return err
	}
	n.setProcess(&n.containerd, containerd)
	if err := n.waitContainerd(ctx); err != nil {
		return err
	}
	if err := BuildPauseImage(ctx, n.path("pause.tar")); err != nil {
		return err
	}
	if err := n.ImportImage(ctx, n.path("pause.tar")); err != nil {
		return err
	}

	kubelet, err := harness.StartProcess("kubelet", filepath.Join(n.binDir, "kubelet"), []string{
		"--config=" + n.path("kubelet.yaml"),
		"--kubeconfig=" + n.path("kubelet.kubeconfig"),
		"--root-dir=" + n.path("kubelet"),
		"--hostname-override=" + n.Name,
		"--v=1",
	}, n.Dir)
	if err != nil {
		return err
	}
	n.setProcess(&n.kubelet, kubelet)
	if n.withProxy {
		if err := n.startKubeProxy(ctx); err != nil {
			return err
		}
	}
	return n.waitReady(ctx)
}

func (n *Node) setProcess(field **harness.Process, p *harness.Process) {
	n.mu.Lock()
	defer n.mu.Unlock()
	*field = p
}

// writeKubeconfig issues the kubelet's client certificate (system:node:<name>
// in system:nodes) and binds it to the system:node ClusterRole: the harness
// authorizes with RBAC only.
func (n *Node) writeKubeconfig(ctx context.Context) error {
	user := "system:node:" + n.Name
	cert, key, err := n.cluster.CA.IssueClient(user, []string{"system:nodes"}, certLife)
	if err != nil {
		return err
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "imperator-realnode:" + n.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := n.cluster.Kubernetes().RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("binding %s to system:node: %w", user, err)
	}
	return n.writeClientKubeconfig("kubelet", cert, key)
}

// writeClientKubeconfig writes <name>.kubeconfig, <name>.crt and <name>.key
// for a client of the node's cluster.
func (n *Node) writeClientKubeconfig(name string, cert, key []byte) error {
	if err := writeFile(n.path(name+".crt"), string(cert)); err != nil {
		return err
	}
	if err := writeFile(n.path(name+".key"), string(key)); err != nil {
		return err
	}
	return writeFile(n.path(name+".kubeconfig"), fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: %[1]s
  cluster:
    server: %[2]s
    certificate-authority: %[3]s
users:
- name: %[6]s
  user:
    client-certificate: %[4]s
    client-key: %[5]s
contexts:
- name: %[1]s
  context: {cluster: %[1]s, user: %[6]s}
current-context: %[1]s
`, n.cluster.Name, n.cluster.Config.Host, filepath.Join(n.cluster.Dir, "ca.crt"), n.path(name+".crt"), n.path(name+".key"), name))
}

func (n *Node) waitContainerd(ctx context.Context) error {
	return wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if !n.containerd.Running() {
			return false, fmt.Errorf("containerd exited:\n%s", n.containerd.Tail(20))
		}
		return exec.CommandContext(ctx, "ctr", "--address", n.Socket, "version").Run() == nil, nil
	})
}

func (n *Node) waitReady(ctx context.Context) error {
	err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, p := range []*harness.Process{n.containerd, n.kubelet, n.kubeProxy} {
			if p != nil && !p.Running() {
				return false, fmt.Errorf("%s exited:\n%s", p.Name(), p.Tail(30))
			}
		}
		node, err := n.cluster.Kubernetes().CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, t := range node.Spec.Taints {
			if t.Key == corev1.TaintNodeNotReady {
				return false, nil
			}
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for node %s to become Ready: %w\n%s", n.Name, err, n.Logs(30))
	}
	return nil
}

// ImportImage imports an image tarball (docker-save or OCI archive, as
// `make images` writes) into the node's containerd, where the kubelet finds
// it without pulling.
func (n *Node) ImportImage(ctx context.Context, tarball string) error {
	out, err := exec.CommandContext(ctx, "ctr", "--address", n.Socket, "-n", "k8s.io", "images", "import", tarball).CombinedOutput()
	if err != nil {
		return fmt.Errorf("importing %s: %w: %s", tarball, err, out)
	}
	return nil
}

// Logs returns the last lines of containerd's and the kubelet's logs.
func (n *Node) Logs(lines int) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out string
	for _, p := range []*harness.Process{n.containerd, n.kubelet, n.kubeProxy} {
		if p != nil {
			out += fmt.Sprintf("==> %s/%s (%s)\n%s\n", n.Name, p.Name(), p.LogPath(), p.Tail(lines))
		}
	}
	return out
}
