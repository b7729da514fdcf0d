package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// releaseNamespace is where the specs below install the charts: any
// namespace but imperator-system, which the kustomize bases and the
// generated files of the charts name.
const releaseNamespace = "gpu-fleet"

// previousChartRef is the commit of the charts that put every object into
// imperator-system whatever the release's namespace (v0.1.0's), as the
// install journey (test/install) upgrades from.
const previousChartRef = "37f21f4"

// namespaceValueSets are the value sets rendered into releaseNamespace: the
// documented ones of chartValueSets and the dispatcher's.
func namespaceValueSets() []chartValueSet {
	return append(slices.Clone(chartValueSets),
		chartValueSet{chart: "imperator-dispatcher"}, chartValueSet{chart: "imperator-dispatcher", values: "all-values.yaml"})
}

// withoutAlertText returns obj as JSON without the annotations of a
// PrometheusRule's alerts: their descriptions are documentation for the
// person paged, and the hub's tell how to look at an agent, whose namespace
// on its own cluster the hub's chart does not know.
func withoutAlertText(obj *unstructured.Unstructured) string {
	GinkgoHelper()
	o := obj.DeepCopy()
	if o.GetKind() == "PrometheusRule" {
		groups, _, _ := unstructured.NestedSlice(o.Object, "spec", "groups")
		for _, g := range groups {
			rules, _ := g.(map[string]any)["rules"].([]any)
			for _, r := range rules {
				delete(r.(map[string]any), "annotations")
			}
		}
		Expect(unstructured.SetNestedSlice(o.Object, groups, "spec", "groups")).To(Succeed())
	}
	data, err := json.Marshal(o.Object)
	Expect(err).NotTo(HaveOccurred())
	return string(data)
}

var _ = Describe("The charts' namespace is the release's (helm install -n)", func() {
	It("render every namespaced object of every value set into the release's namespace, with no imperator-system left and no Namespace of their own unless namespace.create", func(ctx context.Context) {
		for _, v := range namespaceValueSets() {
			args := valuesArgs(v)
			if v.chart == "imperator-spoke" && v.values == "" {
				args = standalone(v.chart)
			}
			objs, err := helmTemplateInto(ctx, v.chart, releaseNamespace, args...)
			Expect(err).NotTo(HaveOccurred(), v.name())
			values := ""
			if v.values != "" {
				data, err := os.ReadFile(filepath.Join(chartDir(v.chart), "ci", v.values))
				Expect(err).NotTo(HaveOccurred())
				values = string(data)
			}
			for _, o := range objs {
				what := v.name() + ": " + o.GetKind() + " " + o.GetName()
				switch {
				case o.GetKind() == "Namespace":
					Expect(o.GetName()).To(Equal(releaseNamespace), what)
					Expect(values).To(MatchRegexp(`(?m)^namespace:\n  create: true`), "%s: rendered without namespace.create", what)
				case slices.Contains(clusterScoped, o.GetKind()):
					Expect(o.GetNamespace()).To(BeEmpty(), what)
				default:
					Expect(o.GetNamespace()).To(Equal(releaseNamespace), what)
				}
				// A value set that names imperator-system itself (the
				// hub's serving hosts of ci/external-values.yaml) keeps it.
				if !strings.Contains(values, "imperator-system") {
					Expect(withoutAlertText(o)).NotTo(ContainSubstring("imperator-system"), what)
				}
			}
		}
	})

	It("write the release's namespace into the generated RBAC, webhook configurations, admission policies, certificates, the hook and the binaries' flags", func(ctx context.Context) {
		spoke, err := helmTemplateInto(ctx, "imperator-spoke", releaseNamespace, "-f", filepath.Join(chartDir("imperator-spoke"), "ci", "cert-manager-values.yaml"))
		Expect(err).NotTo(HaveOccurred())
		byKey := map[string]*unstructured.Unstructured{}
		for _, o := range spoke {
			byKey[o.GetKind()+"/"+o.GetName()] = o
		}
		Expect(byKey).To(HaveKey("Role/imperator-spoke"))
		Expect(byKey["Role/imperator-spoke"].GetNamespace()).To(Equal(releaseNamespace), "the generated Role")
		for _, binding := range []string{"RoleBinding/imperator-spoke", "ClusterRoleBinding/imperator-spoke"} {
			subjects, _, _ := unstructured.NestedSlice(byKey[binding].Object, "subjects")
			Expect(subjects).To(ConsistOf(HaveKeyWithValue("namespace", releaseNamespace)), binding)
		}
		for _, key := range []string{"MutatingWebhookConfiguration/imperator-pod-injector", "ValidatingWebhookConfiguration/imperator-machine-validator"} {
			Expect(byKey).To(HaveKey(key))
			Expect(byKey[key].GetAnnotations()).To(HaveKeyWithValue("cert-manager.io/inject-ca-from", releaseNamespace+"/imperator-webhook"), key)
			webhooks, _, _ := unstructured.NestedSlice(byKey[key].Object, "webhooks")
			Expect(webhooks).NotTo(BeEmpty(), key)
			for _, w := range webhooks {
				service, _, _ := unstructured.NestedString(w.(map[string]any), "clientConfig", "service", "namespace")
				Expect(service).To(Equal(releaseNamespace), "%s: the agent's Service", key)
			}
		}
		injector, _, _ := unstructured.NestedSlice(byKey["MutatingWebhookConfiguration/imperator-pod-injector"].Object, "webhooks")
		Expect(injector[0]).To(HaveKeyWithValue("namespaceSelector", HaveKeyWithValue("matchExpressions", ContainElement(And(
			HaveKeyWithValue("key", "kubernetes.io/metadata.name"), HaveKeyWithValue("operator", "NotIn"),
			HaveKeyWithValue("values", ConsistOf("kube-system", releaseNamespace)))))), "the injector leaves the agent's namespace alone")
		guestsOnly := withoutAlertText(byKey["ValidatingAdmissionPolicy/imperator-pool-guests-only"])
		Expect(guestsOnly).To(ContainSubstring("'system:serviceaccount:" + releaseNamespace + ":imperator-spoke'"))
		Expect(guestsOnly).To(ContainSubstring("namespaceObject.metadata.name == '"+releaseNamespace+"'"), "reservations live in the agent's namespace")
		dnsNames, _, _ := unstructured.NestedStringSlice(byKey["Certificate/imperator-webhook"].Object, "spec", "dnsNames")
		Expect(dnsNames).To(Equal([]string{"imperator-webhook." + releaseNamespace + ".svc", "imperator-webhook." + releaseNamespace + ".svc.cluster.local"}))
		hookArgs, _, _ := unstructured.NestedSlice(byKey["Job/imperator-spoke-uninstall"].Object, "spec", "template", "spec", "containers")
		Expect(hookArgs[0]).To(HaveKeyWithValue("args", ContainElement("--namespace="+releaseNamespace)), "spoke uninstall")
		containers, _, _ := unstructured.NestedSlice(byKey["Deployment/imperator-spoke"].Object, "spec", "template", "spec", "containers")
		Expect(containers[0]).To(HaveKeyWithValue("env", ContainElement(And(HaveKeyWithValue("name", "POD_NAMESPACE"),
			HaveKeyWithValue("valueFrom", HaveKeyWithValue("fieldRef", HaveKeyWithValue("fieldPath", "metadata.namespace")))))),
			"the agent takes its namespace from the downward API")

		withPolicy, err := helmTemplateInto(ctx, "imperator-spoke", releaseNamespace, "--set", "hub.standalone=true", "--set", "injection.mode=policy")
		Expect(err).NotTo(HaveOccurred())
		policies := ofKind(withPolicy, "MutatingAdmissionPolicy", "ValidatingAdmissionPolicy")
		Expect(policies).NotTo(BeEmpty())
		for _, p := range policies {
			if strings.HasPrefix(p.GetName(), "imperator-guest-") {
				Expect(withoutAlertText(p)).To(ContainSubstring("['kube-system', '"+releaseNamespace+"']"), "%s leaves the agent's namespace alone", p.GetName())
			}
		}

		dispatcher, err := helmTemplateInto(ctx, "imperator-dispatcher", releaseNamespace)
		Expect(err).NotTo(HaveOccurred())
		dc, _, _ := unstructured.NestedSlice(ofKind(dispatcher, "Deployment")[0].Object, "spec", "template", "spec", "containers")
		Expect(dc[0]).To(HaveKeyWithValue("args", ContainElement("--hub-address=imperator-hub."+releaseNamespace+".svc:9443")),
			"the hub's Service in the same namespace")
	})

	It("render with namespaceOverride=imperator-system, whatever the release's namespace, what the kustomize bases and the previous charts install", func(ctx context.Context) {
		for _, chart := range []string{"imperator-hub", "imperator-spoke", "imperator-dispatcher"} {
			want, err := helmTemplate(ctx, chart, standalone(chart)...)
			Expect(err).NotTo(HaveOccurred())
			got, err := helmTemplateInto(ctx, chart, "default", append(standalone(chart), "--set", "namespaceOverride=imperator-system", "--set", "namespace.create=true")...)
			Expect(err).NotTo(HaveOccurred())
			Expect(comparable(got)).To(Equal(comparable(want)), chart)
		}
	})

	It("refuse a shared namespace (default, kube-*) and a namespace that is not a name, which would be written into CEL, naming the way out", func(ctx context.Context) {
		for _, chart := range []string{"imperator-hub", "imperator-spoke", "imperator-dispatcher"} {
			for _, ns := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
				_, err := helmTemplateText(ctx, chart, ns, standalone(chart)...)
				Expect(err).To(MatchError(ContainSubstring(`namespace "`+ns+`" is shared`)), "%s -n %s", chart, ns)
				Expect(err).To(MatchError(ContainSubstring("-n imperator-system --create-namespace")), "%s -n %s", chart, ns)
			}
			for _, ns := range []string{"x' || true || 'y", `x"y`, "Upper", strings.Repeat("a", 64)} {
				_, err := helmTemplateText(ctx, chart, ns, standalone(chart)...)
				Expect(err).To(MatchError(ContainSubstring("is not a namespace name")), "%s -n %q", chart, ns)
			}
			By("namespaceOverride is checked the same way, and rescues a release recorded in default")
			_, err := helmTemplateText(ctx, chart, "gpu-fleet", append(standalone(chart), "--set", "namespaceOverride=kube-system")...)
			Expect(err).To(MatchError(ContainSubstring(`namespace "kube-system" is shared`)), chart)
			_, err = helmTemplateText(ctx, chart, "default", append(standalone(chart), "--set", "namespaceOverride=imperator-system")...)
			Expect(err).NotTo(HaveOccurred(), chart)
		}
	})

	It("install the agent into a namespace of the user's (-n gpu-fleet --create-namespace) whose admission policies let the agent itself through and still refuse a tenant; refuse to move a previous chart's release out of imperator-system", func(ctx context.Context) {
		clusters, err := harness.StartN(ctx, "helm-namespace")
		Expect(err).NotTo(HaveOccurred())
		c := clusters[0]
		DeferCleanup(func() { Expect(c.Stop()).To(Succeed()) })
		Expect(c.AddNode(ctx, wrappers.MakeNode(c.Name+"-node").Obj())).To(Succeed())

		By("helm install -n gpu-fleet --create-namespace, as Helm charts are installed")
		out, err := helmRun(ctx, "install", "imperator-spoke", chartDir("imperator-spoke"), "--kubeconfig", c.KubeconfigPath,
			"--namespace", releaseNamespace, "--create-namespace", "--set", "hub.standalone=true",
			"--set", "image.repository=registry.example.com/imperator/spoke", "--set", "image.tag=v0.1.0")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("STATUS: deployed"))
		Expect(out).To(ContainSubstring("kubectl -n " + releaseNamespace + " rollout status deploy/imperator-spoke"))
		out, err = c.Kubectl(ctx, "-n", releaseNamespace, "rollout", "status", "deploy/imperator-spoke", "--timeout=120s")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("successfully rolled out"))
		_, err = c.Kubectl(ctx, "get", "namespace", "imperator-system")
		Expect(err).To(MatchError(ContainSubstring("not found")), "nothing goes into imperator-system")

		By("a reservation pod tolerating the pool taint is admitted in the agent's namespace, and refused in imperator-system and a tenant's")
		_, err = c.Kubectl(ctx, "create", "namespace", "team-a")
		Expect(err).NotTo(HaveOccurred())
		_, err = c.Kubectl(ctx, "create", "namespace", "imperator-system")
		Expect(err).NotTo(HaveOccurred())
		reservation := func(ns string) string {
			return `apiVersion: v1
kind: Pod
metadata:
  name: compute-xlarge-team-a-0
  namespace: ` + ns + `
  labels:
    imperator.tenzen-y.io/pod-role: reservation
spec:
  tolerations:
  - key: imperator.tenzen-y.io/node-pool
    operator: Exists
    effect: NoSchedule
  containers:
  - name: pause
    image: registry.k8s.io/pause:3.10
`
		}
		refused := "only Imperator guests may use machine pool nodes"
		Eventually(func(g Gomega) {
			// The API server loads new policies within a second or so.
			_, err := kubectlStdin(ctx, c, reservation("team-a"), "create", "--dry-run=server", "-f", "-")
			g.Expect(err).To(MatchError(ContainSubstring(refused)), "a tenant's reservation pod")
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		_, err = kubectlStdin(ctx, c, reservation("imperator-system"), "create", "--dry-run=server", "-f", "-")
		Expect(err).To(MatchError(ContainSubstring(refused)), "imperator-system is nobody's namespace here")
		_, err = kubectlStdin(ctx, c, reservation(releaseNamespace), "create", "--dry-run=server", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), "the agent's reservations")

		By("only the agent's identity, system:serviceaccount:gpu-fleet:imperator-spoke, relabels a tenant's pod")
		_, err = kubectlStdin(ctx, c, `apiVersion: v1
kind: Pod
metadata:
  name: tenant
  namespace: team-a
spec:
  containers:
  - name: pause
    image: registry.k8s.io/pause:3.10
`, "create", "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		relabel := []string{"-n", "team-a", "label", "pod", "tenant", "imperator.tenzen-y.io/pod-role=guest", "--dry-run=server"}
		_, err = c.Kubectl(ctx, relabel...)
		Expect(err).To(MatchError(ContainSubstring("only the Imperator agent changes the label imperator.tenzen-y.io/pod-role")), "the cluster's admin is not the agent")
		_, err = c.Kubectl(ctx, append(relabel, "--as=system:serviceaccount:"+releaseNamespace+":imperator-spoke")...)
		Expect(err).NotTo(HaveOccurred(), "the agent, under the chart's RBAC in gpu-fleet")

		By("the chart of v0.1.0 installed without -n: Helm recorded the release in default, its objects went to imperator-system")
		previous := previousChart(ctx, "imperator-hub")
		_, err = helmRun(ctx, "install", "imperator-hub", previous, "--kubeconfig", c.KubeconfigPath, "--namespace", "default",
			"--set", "namespace.create=false", "--set", "image.repository=registry.example.com/imperator/hub", "--set", "image.tag=v0.1.0")
		Expect(err).NotTo(HaveOccurred())
		_, err = c.Kubectl(ctx, "-n", "imperator-system", "get", "deploy", "imperator-hub")
		Expect(err).NotTo(HaveOccurred())

		By("helm upgrade with this chart refuses to move them into default, naming namespaceOverride")
		upgrade := []string{"upgrade", "imperator-hub", chartDir("imperator-hub"), "--kubeconfig", c.KubeconfigPath, "--namespace", "default", "--reset-then-reuse-values"}
		_, err = helmRun(ctx, upgrade...)
		Expect(err).To(MatchError(ContainSubstring("objects of this release live in imperator-system (Deployment imperator-hub of release default/imperator-hub): pass --set namespaceOverride=imperator-system (docs/upgrading.md)")))
		out, err = c.Kubectl(ctx, "-n", "default", "get", "deploy,roles,rolebindings,serviceaccounts", "-o", "name")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).NotTo(ContainSubstring("imperator"), "nothing of the hub in default")

		By("with namespaceOverride=imperator-system the upgrade keeps them where they are")
		_, err = helmRun(ctx, append(upgrade, "--set", "namespaceOverride=imperator-system")...)
		Expect(err).NotTo(HaveOccurred())
		out, err = c.Kubectl(ctx, "-n", "imperator-system", "get", "deploy", "imperator-hub", "-o", "jsonpath={.metadata.annotations.meta\\.helm\\.sh/release-namespace}")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(Equal("default"))
		out, err = c.Kubectl(ctx, "-n", "default", "get", "deploy,roles,rolebindings,serviceaccounts", "-o", "name")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).NotTo(ContainSubstring("imperator"), "nothing of the hub in default")
		// The agent's release, in its own namespace, is not one of those.
		_, err = helmRun(ctx, "upgrade", "imperator-spoke", chartDir("imperator-spoke"), "--kubeconfig", c.KubeconfigPath,
			"--namespace", releaseNamespace, "--reuse-values")
		Expect(err).NotTo(HaveOccurred())
	}, NodeTimeout(6*time.Minute))
})

// kubectlStdin runs kubectl against c with manifest on its standard input.
func kubectlStdin(ctx context.Context, c *harness.Cluster, manifest string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(harness.BinDir(), "kubectl"), append([]string{"--kubeconfig", c.KubeconfigPath}, args...)...)
	cmd.Stdin = strings.NewReader(manifest)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %v: %w: %s", args, err, out)
	}
	return string(out), nil
}

// previousChart extracts chart of previousChartRef (git archive) and
// returns its directory.
func previousChart(ctx context.Context, chart string) string {
	GinkgoHelper()
	dir := GinkgoT().TempDir()
	archive := exec.CommandContext(ctx, "git", "-C", root, "archive", previousChartRef, "deploy/charts/"+chart)
	extract := exec.CommandContext(ctx, "tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	Expect(err).NotTo(HaveOccurred())
	extract.Stdin = pipe
	Expect(extract.Start()).To(Succeed())
	Expect(archive.Run()).To(Succeed(), "git archive %s deploy/charts/%s", previousChartRef, chart)
	Expect(extract.Wait()).To(Succeed())
	return filepath.Join(dir, "deploy", "charts", chart)
}
