package realnode

import (
	"fmt"
	"os"
	"path/filepath"
)

// containerdConfig is containerd's configuration: its own root, state and
// socket under the node's directory, runc with cgroupfs, the locally imported
// sandbox image, and the node's own CNI configuration directory.
// restrict_oom_score_adj is required here: root lacks CAP_SYS_RESOURCE, and
// runc fails ("can't get final child's PID from pipe: EOF") when it sets a
// negative oom_score_adj.
func (n *Node) containerdConfig() string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = %[3]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[4]q
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[5]q
    conf_dir = %[6]q
`, n.path("containerd", "root"), n.path("containerd", "state"), n.Socket, PauseImage, cniBinDir, n.path("cni", "net.d"))
}

// cniConfig is a bridge network on the node's own bridge and subnet, with
// masquerading so that pods reach the host's addresses and beyond.
func (n *Node) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": %[1]q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": %[2]q,
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %[3]q,
        "ranges": [[{"subnet": %[4]q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "loopback"}
  ]
}
`, n.network, n.Bridge, n.path("cni", "ipam"), n.PodSubnet)
}

// kubeletConfig is the kubelet's configuration for this machine: cgroupfs on
// cgroup v1, swap allowed, its own ports (no read-only port), eviction and
// image garbage collection that never act on a busy CI disk, and x509
// authentication by the cluster CA (the API server's kubelet client
// certificate) so that logs, exec and port-forward work.
func (n *Node) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%[1]s
port: %[2]d
healthzBindAddress: 127.0.0.1
healthzPort: %[3]d
readOnlyPort: 0
podLogsDir: %[4]q
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: %[5]q
authorization:
  mode: AlwaysAllow
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
syncFrequency: 10s
nodeStatusUpdateFrequency: 5s
fileCheckFrequency: 5s
`, n.Socket, n.port, n.healthzPort, n.path("pod-logs"), filepath.Join(n.cluster.Dir, "ca.crt"))
}

func writeFile(path, data string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(data), 0o600)
}
