package deploy_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

var _ = Describe("Installing with Helm as the README says", func() {
	It("installs the hub and a joining agent on fresh clusters whose rollouts complete (kwok nodes), upgrades with the same values without a rollout, and uninstalls leaving the namespace and CRDs", func(ctx context.Context) {
		// Clusters of their own: the suite's cluster has the namespace and
		// CRDs applied without Helm's ownership, which an install refuses.
		clusters, err := harness.StartN(ctx, "helm-hub", "helm-spoke")
		Expect(err).NotTo(HaveOccurred())
		for _, c := range clusters {
			DeferCleanup(func() { Expect(c.Stop()).To(Succeed()) })
			Expect(c.AddNode(ctx, wrappers.MakeNode(c.Name+"-node").Obj())).To(Succeed())
		}
		hubCluster, spokeCluster := clusters[0], clusters[1]

		dir := GinkgoT().TempDir()
		caFile, tokenFile := filepath.Join(dir, "hub-ca.crt"), filepath.Join(dir, "join-token")
		Expect(os.WriteFile(caFile, []byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"), 0o600)).To(Succeed())
		Expect(os.WriteFile(tokenFile, []byte("abcdef.0123456789abcdef\n"), 0o600)).To(Succeed())

		// -n imperator-system --create-namespace: the release and its
		// objects in one namespace, which Helm makes.
		hubArgs := []string{"imperator-hub", chartDir("imperator-hub"), "--kubeconfig", hubCluster.KubeconfigPath,
			"--namespace", namespace, "--create-namespace",
			"-f", filepath.Join(chartDir("imperator-hub"), "ci", "external-values.yaml"),
			"--set", "image.repository=registry.example.com/imperator/hub", "--set", "image.tag=v0.1.0"}
		spokeArgs := []string{"imperator-spoke", chartDir("imperator-spoke"), "--kubeconfig", spokeCluster.KubeconfigPath,
			"--namespace", namespace, "--create-namespace",
			"--set", "hub.address=hub.example.com:9443", "--set", "hub.clusterName=spoke-a",
			"--set-file", "hub.ca=" + caFile, "--set-file", "hub.joinToken=" + tokenFile,
			"--set", "image.repository=registry.example.com/imperator/spoke", "--set", "image.tag=v0.1.0"}

		rollout := func(c *harness.Cluster, deployment string) {
			GinkgoHelper()
			out, err := c.Kubectl(ctx, "-n", namespace, "rollout", "status", "deploy/"+deployment, "--timeout=120s")
			Expect(err).NotTo(HaveOccurred())
			Expect(out).To(ContainSubstring("successfully rolled out"))
		}
		generation := func(c *harness.Cluster, deployment string) string {
			GinkgoHelper()
			out, err := c.Kubectl(ctx, "-n", namespace, "get", "deploy", deployment, "-o", "jsonpath={.metadata.generation}")
			Expect(err).NotTo(HaveOccurred())
			return out
		}

		out, err := helmRun(ctx, append([]string{"install"}, hubArgs...)...)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("STATUS: deployed"))
		rollout(hubCluster, "imperator-hub")
		out, err = hubCluster.Kubectl(ctx, "-n", namespace, "get", "service", "imperator-hub", "-o", "jsonpath={.spec.type}")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(Equal("LoadBalancer"))

		out, err = helmRun(ctx, append([]string{"install"}, spokeArgs...)...)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("kubectl get managedcluster spoke-a"))
		rollout(spokeCluster, "imperator-spoke")
		token, err := spokeCluster.Kubectl(ctx, "-n", namespace, "get", "secret", "imperator-hub-join", "-o", "jsonpath={.data.token}")
		Expect(err).NotTo(HaveOccurred())
		Expect(token).To(Equal("YWJjZGVmLjAxMjM0NTY3ODlhYmNkZWYK"), "the join token file, base64")

		// The same values again: nothing changes, so no rollout.
		before := generation(spokeCluster, "imperator-spoke")
		_, err = helmRun(ctx, append([]string{"upgrade"}, spokeArgs...)...)
		Expect(err).NotTo(HaveOccurred())
		Expect(generation(spokeCluster, "imperator-spoke")).To(Equal(before))
		// A new hub address restarts the agent with it.
		_, err = helmRun(ctx, append(append([]string{"upgrade"}, spokeArgs...), "--set", "hub.address=hub2.example.com:9443")...)
		Expect(err).NotTo(HaveOccurred())
		Expect(generation(spokeCluster, "imperator-spoke")).NotTo(Equal(before))
		rollout(spokeCluster, "imperator-spoke")
		// An upgrade given only a new image tag (the install's hub values
		// forgotten) is refused, and the spoke stays joined.
		_, err = helmRun(ctx, "upgrade", "imperator-spoke", chartDir("imperator-spoke"), "--kubeconfig", spokeCluster.KubeconfigPath,
			"--namespace", namespace, "--set", "image.tag=v0.2.0")
		Expect(err).To(MatchError(ContainSubstring("at '/hub/standalone': value must be true")))
		address, err := spokeCluster.Kubectl(ctx, "-n", namespace, "get", "configmap", "imperator-hub", "-o", "jsonpath={.data.address}")
		Expect(err).NotTo(HaveOccurred())
		Expect(address).To(Equal("hub2.example.com:9443"))
		_, err = spokeCluster.Kubectl(ctx, "-n", namespace, "get", "secret", "imperator-hub-join")
		Expect(err).NotTo(HaveOccurred(), "the join Secret is kept")

		for _, c := range []struct {
			cluster               *harness.Cluster
			release, crd, removed string
		}{
			{hubCluster, "imperator-hub", "clusterinventories.imperator.tenzen-y.io", "deploy/imperator-hub"},
			{spokeCluster, "imperator-spoke", "machines.imperator.tenzen-y.io", "deploy/imperator-spoke"},
		} {
			// --no-hooks: kwok does not run the spoke's post-delete Job
			// (registry.example.com's image); the install journey
			// (test/install) runs it on a real node.
			_, err = helmRun(ctx, "uninstall", c.release, "--kubeconfig", c.cluster.KubeconfigPath, "--namespace", namespace, "--no-hooks")
			Expect(err).NotTo(HaveOccurred())
			_, err = c.cluster.Kubectl(ctx, "get", "namespace", namespace)
			Expect(err).NotTo(HaveOccurred(), "%s: the namespace is kept", c.release)
			_, err = c.cluster.Kubectl(ctx, "get", "crd", c.crd)
			Expect(err).NotTo(HaveOccurred(), "%s: the CRD is kept", c.release)
			Eventually(func() string {
				out, _ := c.cluster.Kubectl(ctx, "-n", namespace, "get", c.removed, "--ignore-not-found", "-o", "name")
				return strings.TrimSpace(out)
			}).WithTimeout(time.Minute).Should(BeEmpty(), "%s: the Deployment goes", c.release)
		}
		// Installing again takes the kept namespace and CRDs back.
		_, err = helmRun(ctx, append([]string{"install"}, hubArgs...)...)
		Expect(err).NotTo(HaveOccurred())
		rollout(hubCluster, "imperator-hub")
	}, NodeTimeout(8*time.Minute))
})
