package realnode_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/realnode"
)

// TestRealNodeRunsAPod starts a cluster with one real node, runs a pod of an
// image imported with `ctr images import`, reads its logs through the API
// server, and checks that stopping the cluster leaves no bridge, iptables
// chain, mount or cgroup of the node on the host.
func TestRealNodeRunsAPod(t *testing.T) {
	if err := realnode.Missing(""); err != nil {
		t.Skipf("no real node here: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	before := hostState(t)

	c, err := harness.Start(ctx, harness.Options{Name: "realnode"})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = c.Stop()
		}
	}()
	start := time.Now()
	node, err := realnode.Start(ctx, c, realnode.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s Ready after %s", node.Name, time.Since(start).Round(100*time.Millisecond))

	if _, err := c.Kubernetes().CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName: node.Name,
			Containers: []corev1.Container{{
				Name:            "hello",
				Image:           realnode.PauseImage,
				ImagePullPolicy: corev1.PullNever,
				Args:            []string{"hello", "from", "a", "real", "node"},
			}},
			AutomountServiceAccountToken: new(bool),
		},
	}
	start = time.Now()
	if _, err := c.Kubernetes().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var podIP string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := c.Kubernetes().CoreV1().Pods("default").Get(ctx, "hello", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		podIP = p.Status.PodIP
		return p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("pod hello is not Running: %v\n%s", err, node.Logs(40))
	}
	t.Logf("pod Running after %s with IP %s", time.Since(start).Round(100*time.Millisecond), podIP)
	if !strings.HasPrefix(podIP, "10.89.0.") {
		t.Errorf("pod IP %q is not on the node's bridge subnet 10.89.0.0/24", podIP)
	}
	var logs []byte
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		logs, err = c.Kubernetes().CoreV1().Pods("default").GetLogs("hello", &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Logf("reading logs: %v", err)
		}
		return err == nil && strings.Contains(string(logs), "hello from a real node"), nil
	})
	if err != nil {
		t.Fatalf("logs of pod hello: %q, %v\n%s%s", logs, err, node.Logs(40), c.Logs(20))
	}

	stopped = true
	if err := c.Stop(); err != nil {
		t.Errorf("stopping the cluster: %v", err)
	}
	after := hostState(t)
	for what, was := range before {
		if after[what] != was {
			t.Errorf("%s differs after the node stopped:\nbefore:\n%s\nafter:\n%s", what, was, after[what])
		}
	}
}

// hostState is what a real node may change on the host: links, iptables
// rules, mounts of a kubelet or containerd, network namespaces, kubepods
// cgroups.
func hostState(t *testing.T) map[string]string {
	t.Helper()
	run := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v: %s", name, args, err, out)
		}
		return string(out)
	}
	state := map[string]string{"ip link": run("ip", "-o", "link", "show")}
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
	_, err := os.Stat("/sys/fs/cgroup/memory/kubepods")
	state["kubepods cgroup"] = map[bool]string{true: "absent", false: "present"}[os.IsNotExist(err)]
	return state
}

// TestAcquireSweepsAKilledRun plants what a SIGKILLed run leaves in the
// host's network namespace (a node's bridge, the bridge plugin's
// masquerading chain with its jump, the kubelet's chain, a kube-proxy
// chain, the API server's veth pair) and checks that Acquire removes all of
// it and Release leaves the host as it was.
func TestAcquireSweepsAKilledRun(t *testing.T) {
	if err := realnode.Missing(""); err != nil {
		t.Skipf("no real node here: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// What an earlier failed run of this test planted goes first.
	if host, err := realnode.Acquire(ctx, time.Minute); err != nil {
		t.Fatal(err)
	} else if err := host.Release(); err != nil {
		t.Fatal(err)
	}
	before := hostState(t)
	comment := `name: "imperator-killed-node" id: "0123"`
	plant := [][]string{
		{"ip", "link", "add", "imp99999", "type", "bridge"},
		{"ip", "link", "add", "impapi0", "type", "veth", "peer", "name", "impapi1"},
		{"iptables", "-w", "-t", "nat", "-N", "CNI-killed0123"},
		{"iptables", "-w", "-t", "nat", "-A", "CNI-killed0123", "-d", "10.89.0.0/24", "-m", "comment", "--comment", comment, "-j", "ACCEPT"},
		{"iptables", "-w", "-t", "nat", "-A", "POSTROUTING", "-s", "10.89.0.9/32", "-m", "comment", "--comment", comment, "-j", "CNI-killed0123"},
		{"iptables", "-w", "-t", "filter", "-N", "KUBE-FIREWALL"},
		{"iptables", "-w", "-t", "filter", "-I", "INPUT", "-j", "KUBE-FIREWALL"},
		{"iptables", "-w", "-t", "nat", "-N", "KUBE-SERVICES"},
		{"iptables", "-w", "-t", "nat", "-I", "OUTPUT", "-j", "KUBE-SERVICES"},
	}
	for _, args := range plant {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
	}
	host, err := realnode.Acquire(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Release(); err != nil {
		t.Error(err)
	}
	after := hostState(t)
	for what, was := range before {
		if after[what] != was {
			t.Errorf("%s differs after the sweep:\nbefore:\n%s\nafter:\n%s", what, was, after[what])
		}
	}
}
