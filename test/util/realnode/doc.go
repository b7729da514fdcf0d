// Package realnode starts, for a harness cluster, one real node next to its
// kwok nodes: containerd with its own root, state and socket under the
// node's directory, runc, a bridge CNI network of its own, and a kubelet
// (built by hack/k8s-bin.sh) registered with the cluster's API server. Pods
// bound to it run as real containers; images come from tarballs imported
// with `ctr -n k8s.io images import`, never from a registry.
//
// The node stops with its cluster (harness.Cluster.OnStop), also when its
// start fails, and leaves nothing on the host: its pods are deleted first so
// that the kubelet tears their networks down, then every remaining container
// process, shim, mount under the node's directory, pod network namespace,
// the bridge, the kubelet's cgroups and iptables chains are removed
// (cleanup.go). containerd, runc and the CNI plugins come from Debian's
// packages (hack/realnode/install-deps.sh); running one needs root.
//
// A node started with a Host (Acquire) is a full one: its cluster's API
// server listens on the Host's address, reachable from pods, and kube-proxy
// runs beside the kubelet, so that Services work both ways (pods to the API
// server and to each other, the API server to webhook Services, NodePorts).
//
// One real node runs on a host at a time: the kubelet's kubepods cgroups and
// kube-proxy's and the kubelet's iptables chains are host-wide. Acquire
// sweeps what a killed run left before a node starts (host.go).
package realnode
