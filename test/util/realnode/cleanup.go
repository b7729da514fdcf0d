package realnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/imperator-federation/imperator/test/util/harness"
)

const (
	cgroupRoot = "/sys/fs/cgroup"
	netnsDir   = "/var/run/netns"
	// podsGoneTimeout bounds the graceful part of Stop: the kubelet stops the
	// node's pods and tears their networks down.
	podsGoneTimeout = 30 * time.Second
)

// kubeletChains are the iptables chains the kubelet creates, by table.
var kubeletChains = map[string][]string{
	"filter": {"KUBE-FIREWALL", "KUBE-KUBELET-CANARY"},
	"nat":    {"KUBE-KUBELET-CANARY"},
	"mangle": {"KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT"},
}

// Stop deletes the node's pods (so that the kubelet stops them and removes
// their networks), stops the kubelet and containerd, and removes what they
// leave on the host. It is safe to call twice; the cluster calls it.
func (n *Node) Stop() error {
	n.stopOnce.Do(func() {
		n.stopErr = n.stop()
		if n.lock != nil {
			_ = n.lock.Close()
		}
	})
	return n.stopErr
}

func (n *Node) stop() error {
	var errs []error
	n.mu.Lock()
	kubelet, containerd, kubeProxy := n.kubelet, n.containerd, n.kubeProxy
	n.mu.Unlock()
	if kubelet != nil && kubelet.Running() {
		errs = append(errs, n.deletePods())
	}
	for _, p := range []*harness.Process{kubeProxy, kubelet, containerd} {
		if p != nil {
			errs = append(errs, p.Stop())
		}
	}
	errs = append(errs,
		killCgroup("kubepods"),
		killShimsMatching(func(cmdline string) bool { return strings.Contains(cmdline, n.Socket) }),
		unmountMatching(func(point string) bool { return point == n.Dir || strings.HasPrefix(point, n.Dir+"/") }),
		n.removeNetns(),
		n.removeBridge(),
		removeIPTables(n.network, false),
		removeCgroup("kubepods"),
		n.deleteBinding("imperator-realnode:"+n.Name),
	)
	if n.withProxy {
		errs = append(errs, cleanupKubeProxy(n.binDir), n.deleteBinding("imperator-realnode:kube-proxy"))
	}
	return errors.Join(errs...)
}

// deletePods cordons the node, deletes every pod bound to it and waits until the kubelet
// has confirmed each deletion (their containers are stopped).
func (n *Node) deletePods() error {
	ctx, cancel := context.WithTimeout(context.Background(), podsGoneTimeout)
	defer cancel()
	// Cordoned first: the pods of a Deployment or a StatefulSet would be
	// replaced on the node as fast as they are deleted.
	patch := []byte(`{"spec":{"unschedulable":true}}`)
	if _, err := n.cluster.Kubernetes().CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("cordoning node %s: %w", n.Name, err)
	}
	pods := n.cluster.Kubernetes().CoreV1().Pods(metav1.NamespaceAll)
	onNode := metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name}
	list, err := pods.List(ctx, onNode)
	if err != nil {
		return fmt.Errorf("listing the pods of node %s: %w", n.Name, err)
	}
	grace := int64(1)
	for _, p := range list.Items {
		err := n.cluster.Kubernetes().CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	err = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := pods.List(ctx, onNode)
		return err == nil && len(list.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the pods of node %s to stop: %w", n.Name, err)
	}
	// The kubelet stops a deleted pod's sandbox (CNI DEL) right after it
	// confirms the deletion; give it a moment before it is stopped itself.
	_ = wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(n.newNetns()) == 0, nil
	})
	return nil
}

// cgroupHierarchies are the mounted cgroup hierarchies (one per v1
// controller set, and the unified one).
func cgroupHierarchies() []string {
	entries, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return nil
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, filepath.Join(cgroupRoot, e.Name()))
		}
	}
	return dirs
}

// killCgroup sends SIGKILL to every process in the cgroup name (and below)
// of every hierarchy: container processes that outlived their shim.
func killCgroup(name string) error {
	for _, h := range cgroupHierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, name), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(data)) {
				var pid int
				if _, err := fmt.Sscan(f, &pid); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	}
	return nil
}

// removeCgroup removes the cgroup name and its children, deepest first, in
// every hierarchy; processes that are still exiting get a few seconds.
func removeCgroup(name string) error {
	var errs []error
	for _, h := range cgroupHierarchies() {
		root := filepath.Join(h, name)
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		slices.Reverse(dirs)
		for _, dir := range dirs {
			err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
				err := syscall.Rmdir(dir)
				return err == nil || errors.Is(err, syscall.ENOENT), nil
			})
			if err != nil {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dir, err))
			}
		}
	}
	return errors.Join(errs...)
}

// killShimsMatching kills the containerd shims (they outlive containerd by
// design) whose command line matches: a node's socket.
func killShimsMatching(match func(cmdline string) bool) error {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, path := range procs {
		data, err := os.ReadFile(path)
		if err != nil || !strings.Contains(string(data), "containerd-shim") || !match(string(data)) {
			continue
		}
		var pid int
		if _, err := fmt.Sscan(filepath.Base(filepath.Dir(path)), &pid); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return nil
}

// unmountMatching unmounts every mount point that matches (those under a
// node's directory), deepest first: the kubelet's bind mount of its root
// directory, volumes, containerd's rootfs and shm mounts.
func unmountMatching(match func(point string) bool) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("reading mounts: %w", err)
	}
	defer func() { _ = f.Close() }()
	var points []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && match(fields[4]) {
			points = append(points, fields[4])
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

func netnsNames() map[string]bool {
	names := map[string]bool{}
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		names[e.Name()] = true
	}
	return names
}

// newNetns are the network namespaces created since the node started.
func (n *Node) newNetns() []string {
	var added []string
	for name := range netnsNames() {
		if !n.netnsBefore[name] && strings.HasPrefix(name, "cni-") {
			added = append(added, name)
		}
	}
	return added
}

// removeNetns removes the pod network namespaces containerd left (bind
// mounts under /var/run/netns); their veth pairs go with them.
func (n *Node) removeNetns() error {
	var errs []error
	for _, name := range n.newNetns() {
		path := filepath.Join(netnsDir, name)
		_ = syscall.Unmount(path, syscall.MNT_DETACH)
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (n *Node) removeBridge() error {
	if _, err := os.Stat("/sys/class/net/" + n.Bridge); err != nil {
		return nil
	}
	if out, err := exec.Command("ip", "link", "delete", n.Bridge).CombinedOutput(); err != nil {
		return fmt.Errorf("deleting bridge %s: %w: %s", n.Bridge, err, out)
	}
	return nil
}

// removeIPTables removes the kubelet's chains with the rules that jump to
// them, and the masquerading chains the bridge plugin left for the networks
// whose name starts with network (the ones of pods whose CNI DEL never ran),
// in IPv4 and IPv6. allKube removes every KUBE- chain too (kube-proxy's,
// after a kube-proxy --cleanup that could not finish).
func removeIPTables(network string, allKube bool) error {
	var errs []error
	for _, bin := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"filter", "nat", "mangle"} {
			out, err := exec.Command(bin, "-w", "-t", table, "-S").Output()
			if err != nil {
				continue
			}
			chains := slices.Clone(kubeletChains[table])
			var jumps []string
			for line := range strings.Lines(string(out)) {
				line = strings.TrimSpace(line)
				f := strings.Fields(line)
				if len(f) >= 2 && f[0] == "-N" && strings.HasPrefix(f[1], "CNI-") && strings.Contains(string(out), "-A "+f[1]+" ") && cniChainOf(string(out), f[1], network) {
					chains = append(chains, f[1])
				}
				if len(f) >= 2 && f[0] == "-N" && allKube && strings.HasPrefix(f[1], "KUBE-") && !slices.Contains(chains, f[1]) {
					chains = append(chains, f[1])
				}
				if strings.HasPrefix(line, "-A ") {
					jumps = append(jumps, line)
				}
			}
			for _, rule := range jumps {
				f := strings.Fields(rule)
				if i := slices.Index(f, "-j"); i > 0 && i+1 < len(f) && slices.Contains(chains, f[i+1]) && !slices.Contains(chains, f[1]) {
					args := append([]string{"-w", "-t", table, "-D"}, splitRule(rule[3:])...)
					if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
						errs = append(errs, fmt.Errorf("%s -t %s -D %s: %w: %s", bin, table, rule[3:], err, out))
					}
				}
			}
			chains = slices.DeleteFunc(chains, func(chain string) bool { return !strings.Contains(string(out), "-N "+chain+"\n") })
			// Flushed first, all of them: kube-proxy's chains jump to each other.
			for _, chain := range chains {
				_ = exec.Command(bin, "-w", "-t", table, "-F", chain).Run()
			}
			for _, chain := range chains {
				if out, err := exec.Command(bin, "-w", "-t", table, "-X", chain).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Errorf("%s -t %s -X %s: %w: %s", bin, table, chain, err, out))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// cniChainOf reports whether chain carries the bridge plugin's comment for
// a network whose name starts with network.
func cniChainOf(rules, chain, network string) bool {
	for line := range strings.Lines(rules) {
		if strings.HasPrefix(line, "-A "+chain+" ") && strings.Contains(line, `name: \"`+network) {
			return true
		}
	}
	return false
}

// splitRule splits an `iptables -S` rule into arguments, keeping quoted
// comments whole.
func splitRule(rule string) []string {
	var args []string
	var cur strings.Builder
	quoted := false
	for i := 0; i < len(rule); i++ {
		ch := rule[i]
		switch {
		case ch == '\\' && i+1 < len(rule) && rule[i+1] == '"':
			cur.WriteByte('"')
			i++
		case ch == '"':
			quoted = !quoted
		case ch == ' ' && !quoted:
			if cur.Len() > 0 {
				args = append(args, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteByte(ch)
		}
	}
	if cur.Len() > 0 {
		args = append(args, cur.String())
	}
	return args
}

func (n *Node) deleteBinding(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := n.cluster.Kubernetes().RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting ClusterRoleBinding %s: %w", name, err)
	}
	return nil
}
