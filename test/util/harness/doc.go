// Package harness starts real Kubernetes clusters as local processes — etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler and kwok — on free
// loopback ports, for the integration and e2e suites and for the local demo
// fleet. Nodes are simulated by kwok: they carry whatever capacity (including
// nvidia.com/gpu) and labels a test gives them, become Ready, and run the pods
// the real scheduler binds to them; a deleted pod disappears at its
// deletionTimestamp, after its grace period, as with a kubelet.
//
// The harness starts the binaries itself rather than through kwokctl: it needs
// to bind every port to 127.0.0.1, choose the ports (kwokctl picks its own and
// two concurrent creates can collide), fail as soon as a process exits, and
// stop exactly what it started in the right order; all of that is a few lines
// here and a set of workarounds around kwokctl.
//
// The binaries come from `make k8s-bin` (hack/k8s-bin.sh), found through
// $IMPERATOR_K8S_BIN or the default cache directory.
package harness
