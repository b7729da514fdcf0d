package realnode

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/imperator-federation/imperator/test/util/harness"
)

// kubeProxyUser is kube-proxy's identity, bound to system:node-proxier.
const kubeProxyUser = "system:kube-proxy"

// kubeProxyConfig is kube-proxy's configuration: iptables mode on the
// node's pod subnet, its ports on loopback, and no host-wide setting
// changed: conntrack sizes and timeouts are left as they are (0), and
// NodePorts are served on the node's InternalIP only, not on localhost (that
// needs route_localnet on every interface).
func (n *Node) kubeProxyConfig(healthzPort, metricsPort int) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: %[1]q
hostnameOverride: %[2]q
clusterCIDR: %[3]q
nodePortAddresses: [primary]
healthzBindAddress: 127.0.0.1:%[4]d
metricsBindAddress: 127.0.0.1:%[5]d
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
iptables:
  localhostNodePorts: false
  syncPeriod: 30s
  minSyncPeriod: 0s
`, n.path("kube-proxy.kubeconfig"), n.Name, n.PodSubnet, healthzPort, metricsPort)
}

// startKubeProxy starts kube-proxy for the node, as system:kube-proxy.
func (n *Node) startKubeProxy(ctx context.Context) error {
	cert, key, err := n.cluster.CA.IssueClient(kubeProxyUser, nil, certLife)
	if err != nil {
		return err
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "imperator-realnode:kube-proxy"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-proxier"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: kubeProxyUser}},
	}
	if _, err := n.cluster.Kubernetes().RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("binding %s to system:node-proxier: %w", kubeProxyUser, err)
	}
	if err := n.writeClientKubeconfig("kube-proxy", cert, key); err != nil {
		return err
	}
	ports, err := harness.FreePorts(2)
	if err != nil {
		return err
	}
	if err := writeFile(n.path("kube-proxy.yaml"), n.kubeProxyConfig(ports[0], ports[1])); err != nil {
		return err
	}
	p, err := harness.StartProcess("kube-proxy", filepath.Join(n.binDir, "kube-proxy"), []string{"--config=" + n.path("kube-proxy.yaml"), "--v=1"}, n.Dir)
	if err != nil {
		return err
	}
	n.setProcess(&n.kubeProxy, p)
	return nil
}

// cleanupKubeProxy removes every iptables rule and chain kube-proxy made
// (`kube-proxy --cleanup`), when the binary is there.
func cleanupKubeProxy(binDir string) error {
	if binDir == "" {
		binDir = harness.BinDir()
	}
	bin := filepath.Join(binDir, "kube-proxy")
	if _, err := exec.LookPath(bin); err != nil {
		return nil
	}
	if out, err := exec.Command(bin, "--cleanup").CombinedOutput(); err != nil {
		return fmt.Errorf("kube-proxy --cleanup: %w: %s", err, out)
	}
	return nil
}
