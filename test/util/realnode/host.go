package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

const (
	// hostLink is the interface that carries HostAddress: one end of a veth
	// pair whose other end (hostPeer) only keeps it up. A veth rather than a
	// dummy interface: kernels of CI containers may lack the dummy driver.
	hostLink = "impapi0"
	hostPeer = "impapi1"
	// HostAddress is the address a cluster whose pods run for real gives its
	// API server (harness.Options.AdvertiseAddress): on this host only (a
	// veth pair, not routed anywhere), yet not loopback, so that pods
	// reach it through the "kubernetes" Service and kube-proxy.
	HostAddress = "10.88.255.1"
	// bridgePrefix starts the name of every node's CNI bridge.
	bridgePrefix = "imp"
	// networkPrefix starts the name of every node's CNI network.
	networkPrefix = "imperator-"
)

// Host is this host, reserved for one real node: the lock is held, the
// leftovers of a killed run are swept, and HostAddress is up.
type Host struct {
	// Address is the API server's address for the node's cluster.
	Address string
	lock    *os.File
}

// Acquire reserves the host for one real node (waiting up to timeout for
// another run's node to stop), removes what a killed run left behind
// (Sweep), and brings HostAddress up on a veth pair. Release undoes it.
func Acquire(ctx context.Context, timeout time.Duration) (*Host, error) {
	if err := Missing(""); err != nil {
		return nil, fmt.Errorf("realnode: %w", err)
	}
	lock, err := lockHost(ctx, timeout)
	if err != nil {
		return nil, err
	}
	h := &Host{Address: HostAddress, lock: lock}
	if err := Sweep(); err != nil {
		return nil, errors.Join(fmt.Errorf("realnode: sweeping a killed run's leftovers: %w", err), h.Release())
	}
	for _, args := range [][]string{
		{"link", "add", hostLink, "type", "veth", "peer", "name", hostPeer},
		{"addr", "add", HostAddress + "/32", "dev", hostLink},
		{"link", "set", hostPeer, "up"},
		{"link", "set", hostLink, "up"},
	} {
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			return nil, errors.Join(fmt.Errorf("realnode: ip %s: %w: %s", strings.Join(args, " "), err, out), h.Release())
		}
	}
	return h, nil
}

// Release removes the veth pair and frees the host for another node.
// Safe to call twice.
func (h *Host) Release() error {
	if h.lock == nil {
		return nil
	}
	err := removeLink(hostLink)
	_ = h.lock.Close()
	h.lock = nil
	return err
}

func lockHost(ctx context.Context, timeout time.Duration) (*os.File, error) {
	lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("realnode: opening %s: %w", lockPath, err)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(context.Context) (bool, error) {
		return syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil, nil
	})
	if err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("realnode: another real node runs on this host (%s stays locked): %w", lockPath, err)
	}
	return lock, nil
}

// Sweep removes what a real node of a run that was killed (SIGKILL: no Stop
// ran) leaves on the host; the caller holds the host's lock, so none of it
// belongs to a live node. The kubelet, containerd and kube-proxy died with
// the run (their parent-death signal), but the containerd shims and the
// containers outlive them, with their mounts, pod network namespaces, the
// CNI bridge, the kubepods cgroups, the iptables chains of the kubelet,
// kube-proxy and the bridge plugin, and the veth pair of HostAddress.
func Sweep() error {
	var errs []error
	errs = append(errs, killCgroup("kubepods"), killShimsMatching(isNodeSocket))
	errs = append(errs, unmountMatching(isNodeMount), removeOrphanNetns())
	links, _ := os.ReadDir("/sys/class/net")
	for _, l := range links {
		name := l.Name()
		if name == hostLink || (strings.HasPrefix(name, bridgePrefix) && isBridge(name)) {
			errs = append(errs, removeLink(name))
		}
	}
	// kube-proxy --cleanup refuses a chain another rule still jumps to; what
	// it leaves, removeIPTables takes, chain by chain.
	_ = cleanupKubeProxy("")
	errs = append(errs, removeIPTables(networkPrefix, true), removeCgroup("kubepods"))
	return errors.Join(errs...)
}

// isNodeSocket reports whether a command line names a node's containerd
// socket (<cluster dir>/node-<name>/containerd.sock).
func isNodeSocket(cmdline string) bool {
	for _, arg := range strings.Split(cmdline, "\x00") {
		if strings.HasSuffix(arg, "/containerd.sock") && strings.HasPrefix(filepath.Base(filepath.Dir(arg)), "node-") {
			return true
		}
	}
	return false
}

// isNodeMount reports whether a mount point lies in a node's directory.
func isNodeMount(point string) bool {
	for dir := point; dir != "/" && dir != "."; dir = filepath.Dir(dir) {
		if strings.HasPrefix(filepath.Base(dir), "node-") && strings.HasPrefix(filepath.Base(filepath.Dir(dir)), "imperator-") {
			return true
		}
	}
	return false
}

func isBridge(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name, "bridge"))
	return err == nil
}

func removeLink(name string) error {
	if _, err := os.Stat("/sys/class/net/" + name); err != nil {
		return nil
	}
	if out, err := exec.Command("ip", "link", "delete", name).CombinedOutput(); err != nil {
		return fmt.Errorf("deleting link %s: %w: %s", name, err, out)
	}
	return nil
}

// removeOrphanNetns removes the CNI network namespaces no process is in any
// more (their containers were killed; the bind mount kept them).
func removeOrphanNetns() error {
	inUse := map[uint64]bool{}
	procs, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	for _, p := range procs {
		var st syscall.Stat_t
		if syscall.Stat(p, &st) == nil {
			inUse[st.Ino] = true
		}
	}
	var errs []error
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		path := filepath.Join(netnsDir, e.Name())
		var st syscall.Stat_t
		if !strings.HasPrefix(e.Name(), "cni-") || syscall.Stat(path, &st) != nil || inUse[st.Ino] {
			continue
		}
		_ = syscall.Unmount(path, syscall.MNT_DETACH)
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
