package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/repo"
)

// The hub↔agent version skew policy as a user sees it (issue 38): a hub
// replica of release v0.2.0 (the hub binary built with that version, run
// as a process beside the suite's hub) and a spoke whose agent says
// v0.3.0, newer than its hub. The replica logs the skew and imperatorctl
// flags it in clusters, -o wide and describe cluster.
var _ = Describe("Version skew between the hub and an agent", Ordered, func() {
	const (
		name       = "skewed"
		hubRelease = "v0.2.0"
		agent      = "v0.3.0"
	)
	var (
		proc *harness.Process
		conf string
	)

	BeforeAll(func(ctx context.Context) {
		buildImperatorctl()
		dir := GinkgoT().TempDir()

		By("building the hub as release " + hubRelease)
		binDir, err := repo.BinariesOfVersion(ctx, dir, hubRelease, "hub")
		Expect(err).NotTo(HaveOccurred())
		bin := filepath.Join(binDir, "hub")

		By("running it as another replica of the suite's hub")
		kubeconfig := filepath.Join(dir, "hub.kubeconfig")
		Expect(clientcmd.WriteToFile(kubeconfigOf(), kubeconfig)).To(Succeed())
		addr := freeAddress()
		proc, err = harness.StartProcess("hub-"+hubRelease, bin, []string{
			"--kubeconfig=" + kubeconfig, "--namespace=" + hubNamespace, "--listen-address=" + addr,
			"--health-probe-bind-address=0", "--metrics-bind-address=0",
		}, dir)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() error { return proc.Stop() })
		conf = filepath.Join(credsDir, "release-hub.yaml")
		Expect(os.WriteFile(conf, []byte(fmt.Sprintf(`current-context: test
contexts:
- name: test
  hub: %s
  certificate-authority: hub-ca.crt
  client-certificate: admin.crt
  client-key: admin.key
`, addr)), 0o600)).To(Succeed())
		Eventually(func() string { return ctl(conf, "version").stdout }, 60*time.Second, 250*time.Millisecond).
			Should(ContainSubstring(hubRelease), "the replica serves and says its release; log:\n%s", proc.Tail(20))

		By("a spoke with agent " + agent + " joining and reporting to it")
		sim, err := joinSpokeVia(ctx, addr, name)
		Expect(err).NotTo(HaveOccurred())
		sim.version = agent
		Expect(sim.start(gpuMachine("team-z", 2, 0))).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(sim.stop()).To(Succeed())
			Expect(client.IgnoreNotFound(hubClient.Delete(ctx, &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}))).To(Succeed())
			Eventually(func() bool { _, ok := hub.Cluster(name); return ok }, 30*time.Second, 100*time.Millisecond).Should(BeFalse(), "the suite's hub forgot the cluster")
		})
	}, NodeTimeout(5*time.Minute))

	It("flags the agent in imperatorctl clusters and describe cluster, and logs it", func() {
		const why = "agent v0.3.0 is newer than hub v0.2.0; upgrade the hub first"
		Eventually(func(g Gomega) {
			r := ctl(conf, "clusters", name)
			g.Expect(r.code).To(Equal(0), r.stderr)
			g.Expect(r.stdout).To(ContainSubstring(agent + " (unsupported skew)"))
		}, 30*time.Second, 250*time.Millisecond).Should(Succeed())

		r := ctl(conf, "clusters", name, "-o", "wide")
		Expect(r.stdout).To(ContainSubstring("unsupported version skew: " + why))
		r = ctl(conf, "clusters", name, "-o", "jsonpath={.versionSkew}")
		Expect(r.stdout).To(HavePrefix(why))
		r = ctl(conf, "describe", "cluster", name)
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).To(MatchRegexp(`Version skew:\s+unsupported: ` + why))

		log, err := os.ReadFile(proc.LogPath())
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.ReplaceAll(string(log), `\"`, `"`)).To(ContainSubstring("Unsupported version skew between hub and agent: " + why))
	})
})

// kubeconfigOf is a kubeconfig of the suite's hub cluster with the admin
// credentials the suite's client uses.
func kubeconfigOf() clientcmdapi.Config {
	cfg := hubClientConfig
	return clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"hub": {Server: cfg.Host, CertificateAuthorityData: cfg.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"admin": {ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}},
		Contexts:       map[string]*clientcmdapi.Context{"hub": {Cluster: "hub", AuthInfo: "admin"}},
		CurrentContext: "hub",
	}
}

// freeAddress is a loopback address with a port nobody listens on now.
func freeAddress() string {
	GinkgoHelper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	addr := l.Addr().String()
	Expect(l.Close()).To(Succeed())
	return addr
}
