package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// chartValueSet is one documented value set of a chart: its file under the
// chart's ci/ ("" for the defaults) and the kustomize base or overlay under
// deploy/ it stands for ("" when no overlay has its values).
type chartValueSet struct {
	chart, values, kustomize string
}

// name is how specs name the value set.
func (v chartValueSet) name() string {
	if v.values == "" {
		return v.chart + " with its default values"
	}
	return v.chart + " with ci/" + v.values
}

// chartValueSets are every chart's documented value sets. A file of a chart's
// ci/ missing here fails a spec, so none goes untested.
var chartValueSets = []chartValueSet{
	{chart: "imperator-hub", kustomize: "hub"},
	{chart: "imperator-hub", values: "ocm-installed-values.yaml", kustomize: "overlays/hub-ocm-installed"},
	{chart: "imperator-hub", values: "external-values.yaml", kustomize: "overlays/hub-example"},
	{chart: "imperator-hub", values: "all-values.yaml"},
	{chart: "imperator-spoke", values: "standalone-values.yaml", kustomize: "spoke"},
	{chart: "imperator-spoke", values: "join-values.yaml", kustomize: "overlays/spoke-example"},
	{chart: "imperator-spoke", values: "cert-manager-values.yaml", kustomize: "overlays/spoke-cert-manager"},
	{chart: "imperator-spoke", values: "all-values.yaml"},
	{chart: "imperator-spoke", values: "hosted-values.yaml", kustomize: "overlays/spoke-hosted"},
	{chart: "imperator-spoke", values: "hosted-member-values.yaml", kustomize: "overlays/spoke-hosted-member"},
	{chart: "imperator-spoke", values: "injection-policy-values.yaml", kustomize: "overlays/spoke-injection-policy"},
}

// chartDir is the directory of chart.
func chartDir(chart string) string {
	return filepath.Join(root, "deploy", "charts", chart)
}

// helmRun runs helm with args and returns its standard output; the error
// carries its standard error.
func helmRun(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, helm, args...)
	// No user configuration, cache or plugins of the machine's.
	home := GinkgoT().TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w: %s%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

// valuesArgs are helm's flags for the value set v.
func valuesArgs(v chartValueSet) []string {
	if v.values == "" {
		return nil
	}
	return []string{"-f", filepath.Join(chartDir(v.chart), "ci", v.values)}
}

// helmTemplate renders chart as the kustomize bases install it, into
// imperator-system with the Namespace itself (namespace.create=true), with
// the flags extra after those (which may set them otherwise), and decodes
// the objects.
func helmTemplate(ctx context.Context, chart string, extra ...string) ([]*unstructured.Unstructured, error) {
	return helmTemplateInto(ctx, chart, namespace, append([]string{"--set", "namespace.create=true"}, extra...)...)
}

// helmTemplateInto renders chart as `helm install -n ns` does, with the
// chart's defaults and the flags extra, and decodes the objects, for the
// harness's Kubernetes version: the charts' kubeVersion refuses the v1.20 a
// helm built from source assumes without a cluster.
func helmTemplateInto(ctx context.Context, chart, ns string, extra ...string) ([]*unstructured.Unstructured, error) {
	out, err := helmTemplateText(ctx, chart, ns, extra...)
	if err != nil {
		return nil, err
	}
	return decodeObjects([]byte(out), "helm template "+chart)
}

// helmTemplateText is what helmTemplateInto decodes.
func helmTemplateText(ctx context.Context, chart, ns string, extra ...string) (string, error) {
	return helmRun(ctx, append([]string{"template", chart, chartDir(chart), "--namespace", ns, "--kube-version", harness.K8sVersion}, extra...)...)
}

// helmInstallDryRun runs `helm install --dry-run=client` of chart against the
// test cluster with the flags extra and returns what it prints, NOTES
// included. --take-ownership: the other specs applied the namespace and CRDs
// without Helm's release annotations, which a real install would refuse to
// adopt; the dry run changes nothing.
func helmInstallDryRun(ctx context.Context, chart string, extra ...string) (string, error) {
	return helmRun(ctx, append([]string{"install", chart, chartDir(chart), "--dry-run=client", "--take-ownership",
		"--kubeconfig", cluster.KubeconfigPath, "--namespace", namespace}, extra...)...)
}

// kustomizeHash matches the suffix kustomize's generators give a ConfigMap's
// or Secret's name.
var kustomizeHash = regexp.MustCompile(`^(.+)-[a-z0-9]{10}$`)

// comparable returns objs keyed by kind/namespace/name, without what differs
// between the two installers by design: Helm's release labels and the
// part-of label (checked apart), the keep policy and checksum annotations of
// the chart, the hash suffix of kustomize's generated ConfigMaps and Secrets
// (the references to them included), the line breaks of its base64 and the
// whitespace of admission policies' CEL. A Service without a type gets
// ClusterIP, the API server's default, which the chart writes out.
func comparable(objs []*unstructured.Unstructured) map[string]map[string]any {
	GinkgoHelper()
	renamed := map[string]string{}
	for _, o := range objs {
		if k := o.GetKind(); k == "ConfigMap" || k == "Secret" {
			if m := kustomizeHash.FindStringSubmatch(o.GetName()); m != nil {
				renamed[o.GetName()] = m[1]
			}
		}
	}
	out := map[string]map[string]any{}
	for _, o := range objs {
		data, err := json.Marshal(o.Object)
		Expect(err).NotTo(HaveOccurred())
		for hashed, name := range renamed {
			data = bytes.ReplaceAll(data, []byte(`"`+hashed+`"`), []byte(`"`+name+`"`))
		}
		var obj map[string]any
		Expect(json.Unmarshal(data, &obj)).To(Succeed())
		u := &unstructured.Unstructured{Object: obj}
		u.SetLabels(without(u.GetLabels(), "helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/part-of"))
		u.SetAnnotations(without(u.GetAnnotations(), "helm.sh/resource-policy"))
		if annotations, found, _ := unstructured.NestedStringMap(obj, "spec", "template", "metadata", "annotations"); found {
			maps.DeleteFunc(annotations, func(k, _ string) bool { return strings.HasPrefix(k, "checksum/") })
			if len(annotations) == 0 {
				unstructured.RemoveNestedField(obj, "spec", "template", "metadata", "annotations")
			} else {
				Expect(unstructured.SetNestedStringMap(obj, annotations, "spec", "template", "metadata", "annotations")).To(Succeed())
			}
		}
		if u.GetKind() == "Secret" {
			// kustomize wraps base64 at 76 characters, Helm does not.
			data, _, _ := unstructured.NestedStringMap(obj, "data")
			for k, v := range data {
				data[k] = strings.Join(strings.Fields(v), "")
			}
			if data != nil {
				Expect(unstructured.SetNestedStringMap(obj, data, "data")).To(Succeed())
			}
		}
		if k := u.GetKind(); k == "ValidatingAdmissionPolicy" || k == "MutatingAdmissionPolicy" {
			// kustomize writes a folded scalar with more-indented lines
			// (an expression continued on the next line) back with an extra
			// blank line, so its CEL differs from Helm's in whitespace
			// between tokens, which CEL ignores.
			spaceCEL(obj)
		}
		if u.GetKind() == "Deployment" {
			// The tag: the kustomize bases say :latest (make images' tag,
			// which kustomize edit set image replaces), the charts their
			// appVersion, the last release, whose images exist (a spec
			// below checks the chart's).
			containers, _, _ := unstructured.NestedSlice(obj, "spec", "template", "spec", "containers")
			for _, c := range containers {
				c := c.(map[string]any)
				image, _ := c["image"].(string)
				if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
					c["image"] = image[:i]
				}
			}
			if containers != nil {
				Expect(unstructured.SetNestedSlice(obj, containers, "spec", "template", "spec", "containers")).To(Succeed())
			}
		}
		if u.GetKind() == "Service" {
			if _, found, _ := unstructured.NestedString(obj, "spec", "type"); !found {
				Expect(unstructured.SetNestedField(obj, "ClusterIP", "spec", "type")).To(Succeed())
			}
		}
		key := u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
		Expect(out).NotTo(HaveKey(key), "two objects %s", key)
		out[key] = obj
	}
	return out
}

// spaceCEL collapses the whitespace of every expression and
// messageExpression under obj to single spaces.
func spaceCEL(obj any) {
	switch o := obj.(type) {
	case map[string]any:
		for k, v := range o {
			if str, ok := v.(string); ok && (k == "expression" || k == "messageExpression") {
				o[k] = strings.Join(strings.Fields(str), " ")
				continue
			}
			spaceCEL(v)
		}
	case []any:
		for _, v := range o {
			spaceCEL(v)
		}
	}
}

// without returns m less keys, nil when nothing is left.
func without(m map[string]string, keys ...string) map[string]string {
	for _, k := range keys {
		delete(m, k)
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

var _ = Describe("The Helm charts", func() {
	It("have a spec entry for every documented value set of their ci/ directories", func() {
		for _, chart := range []string{"imperator-hub", "imperator-spoke"} {
			files, err := filepath.Glob(filepath.Join(chartDir(chart), "ci", "*.yaml"))
			Expect(err).NotTo(HaveOccurred())
			Expect(files).NotTo(BeEmpty())
			for _, f := range files {
				Expect(slices.ContainsFunc(chartValueSets, func(v chartValueSet) bool {
					return v.chart == chart && v.values == filepath.Base(f)
				})).To(BeTrue(), "deploy/charts/%s/ci/%s has no entry in chartValueSets", chart, filepath.Base(f))
			}
		}
	})

	It("read the generated CRDs, RBAC roles, webhook configurations and the admission policies of deploy/ as they are (make generate copies them)", func() {
		// Each directory of a chart's files/ and the files of deploy/ it
		// holds copies of, exactly.
		copies := []struct{ dir, sources string }{
			{"imperator-hub/files/crds", "hub/crd/*.yaml"},
			{"imperator-hub/files/crds/ocm", "hub/crd/ocm/*.yaml"},
			{"imperator-hub/files/rbac", "hub/rbac/*.yaml"},
			{"imperator-hub/files/monitoring", "monitoring/p*.yaml"},
			{"imperator-spoke/files/monitoring", "monitoring/p*.yaml"},
			{"imperator-spoke/files/crds", "spoke/crd/*.yaml"},
			{"imperator-spoke/files/rbac", "spoke/rbac/role.yaml"},
			{"imperator-spoke/files/webhook", "spoke/webhook/manifests.yaml"},
			{"imperator-spoke/files/policy", "spoke/policy/*.yaml"},
			{"imperator-spoke/files/policy/injection", "spoke/policy/injection/guest-*.yaml"},
		}
		for _, c := range copies {
			sources, err := filepath.Glob(filepath.Join(root, "deploy", c.sources))
			Expect(err).NotTo(HaveOccurred())
			want := map[string]string{}
			for _, src := range sources {
				data, err := os.ReadFile(src)
				Expect(err).NotTo(HaveOccurred())
				want[filepath.Base(src)] = string(data)
			}
			got := map[string]string{}
			entries, err := os.ReadDir(filepath.Join(root, "deploy", "charts", c.dir))
			if !os.IsNotExist(err) {
				Expect(err).NotTo(HaveOccurred())
			}
			for _, e := range entries {
				if e.IsDir() {
					continue
				}
				data, err := os.ReadFile(filepath.Join(root, "deploy", "charts", c.dir, e.Name()))
				Expect(err).NotTo(HaveOccurred())
				got[e.Name()] = string(data)
			}
			Expect(slices.Sorted(maps.Keys(got))).To(Equal(slices.Sorted(maps.Keys(want))),
				"deploy/charts/%s holds other files than deploy/%s: run make generate", c.dir, c.sources)
			for name, data := range want {
				Expect(got[name]).To(Equal(data), "deploy/charts/%s/%s differs from deploy/%s: run make generate", c.dir, name, c.sources)
			}
		}
	})

	DescribeTable("pass helm lint --strict",
		func(ctx context.Context, v chartValueSet) {
			_, err := helmRun(ctx, append([]string{"lint", "--strict", chartDir(v.chart)}, valuesArgs(v)...)...)
			Expect(err).NotTo(HaveOccurred())
		},
		entriesOf(func(v chartValueSet) bool { return true }),
	)

	DescribeTable("render objects that pass a server-side dry-run against a real API server (CRDs and namespaces applied first, cert-manager and Prometheus Operator objects left out)",
		func(ctx context.Context, v chartValueSet) {
			objs, err := helmTemplate(ctx, v.chart, valuesArgs(v)...)
			Expect(err).NotTo(HaveOccurred())
			for _, o := range objs {
				Expect(o.GetLabels()).To(HaveKeyWithValue("app.kubernetes.io/part-of", "imperator"), "%s %s", o.GetKind(), o.GetName())
				if o.GetKind() != "Namespace" && o.GetNamespace() == "" {
					Expect(clusterScoped).To(ContainElement(o.GetKind()), "%s %s has no namespace", o.GetKind(), o.GetName())
				}
			}
			_, err = apply(ctx, ofKind(objs, "CustomResourceDefinition", "Namespace"))
			Expect(err).NotTo(HaveOccurred())
			out, err := apply(ctx, notMonitoring(notCertManager(except(objs, "CustomResourceDefinition", "Namespace"))), "--dry-run=server")
			Expect(err).NotTo(HaveOccurred())
			Expect(out).To(ContainSubstring("(server dry run)"))
			Expect(out).NotTo(ContainSubstring("would violate PodSecurity"))
		},
		entriesOf(func(v chartValueSet) bool { return true }),
	)

	DescribeTable("render the same objects as the matching kustomize base or overlay: kinds, names, namespaces, CRDs, RBAC rules and bindings, webhook rules, container args and every other field",
		func(ctx context.Context, v chartValueSet) {
			// The overlay reads the CA and token the installer writes next to
			// it; they get what the value set gives the chart.
			deployCopy := filepath.Join(GinkgoT().TempDir(), "deploy")
			Expect(os.CopyFS(deployCopy, os.DirFS(filepath.Join(root, "deploy")))).To(Succeed())
			if v.values != "" {
				data, err := os.ReadFile(filepath.Join(chartDir(v.chart), "ci", v.values))
				Expect(err).NotTo(HaveOccurred())
				var values struct {
					Hub struct{ CA, JoinToken string } `json:"hub"`
				}
				Expect(yaml.Unmarshal(data, &values)).To(Succeed())
				if values.Hub.CA != "" {
					example := filepath.Join(deployCopy, v.kustomize)
					Expect(os.WriteFile(filepath.Join(example, "hub-ca.crt"), []byte(values.Hub.CA), 0o600)).To(Succeed())
					Expect(os.WriteFile(filepath.Join(example, "join-token"), []byte(values.Hub.JoinToken), 0o600)).To(Succeed())
				}
			}
			want, err := render(ctx, filepath.Join(deployCopy, v.kustomize))
			Expect(err).NotTo(HaveOccurred())
			got, err := helmTemplate(ctx, v.chart, valuesArgs(v)...)
			Expect(err).NotTo(HaveOccurred())
			// The chart's hooks (the spoke's post-delete `spoke uninstall`
			// Job and its roles) have no kustomize counterpart: kustomize
			// users run the command by hand (docs/uninstall.md).
			got = withoutHooks(got)

			wantObjs, gotObjs := comparable(want), comparable(got)
			// The chart's one object of its own: the ResourceQuota that
			// GKE wants before it admits the agent's system-cluster-critical
			// pods outside kube-system (priorityClassQuota). A kustomize
			// user on GKE adds it (docs/install notes in values.yaml).
			delete(gotObjs, "ResourceQuota/imperator-system/imperator-agent-priority")
			Expect(slices.Sorted(maps.Keys(gotObjs))).To(Equal(slices.Sorted(maps.Keys(wantObjs))),
				"the objects of %s and of deploy/%s", v.name(), v.kustomize)
			for key, w := range wantObjs {
				Expect(cmp.Diff(w, gotObjs[key])).To(BeEmpty(), "%s: deploy/%s (-) and %s (+) differ", key, v.kustomize, v.name())
			}
		},
		entriesOf(func(v chartValueSet) bool { return v.kustomize != "" }),
	)

	It("put every value that no overlay has where it belongs", func(ctx context.Context) {
		for _, chart := range []string{"imperator-hub", "imperator-spoke"} {
			valuesFile := filepath.Join(chartDir(chart), "ci", "all-values.yaml")
			data, err := os.ReadFile(valuesFile)
			Expect(err).NotTo(HaveOccurred())
			var values map[string]any
			Expect(yaml.Unmarshal(data, &values)).To(Succeed())
			objs, err := helmTemplate(ctx, chart, "-f", valuesFile)
			Expect(err).NotTo(HaveOccurred())
			deployments := ofKind(objs, "Deployment")
			Expect(deployments).To(HaveLen(1))
			d := deployments[0].Object
			pod := d["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
			container := pod["containers"].([]any)[0].(map[string]any)
			image := values["image"].(map[string]any)

			Expect(d["spec"]).To(HaveKeyWithValue("replicas", BeNumerically("==", values["replicas"])), chart)
			Expect(container).To(HaveKeyWithValue("image", fmt.Sprintf("%s:%s", image["repository"], image["tag"])), chart)
			Expect(container).To(HaveKeyWithValue("imagePullPolicy", image["pullPolicy"]), chart)
			Expect(container).To(HaveKeyWithValue("resources", values["resources"]), chart)
			for _, field := range []string{"imagePullSecrets", "nodeSelector", "tolerations", "affinity"} {
				Expect(pod).To(HaveKeyWithValue(field, values[field]), "%s: %s", chart, field)
			}
			args, _, _ := unstructured.NestedStringSlice(container, "args")
			for _, a := range values["extraArgs"].([]any) {
				Expect(args).To(ContainElement(a), chart)
			}
			Expect(args[len(args)-1]).To(Equal(values["extraArgs"].([]any)[0]), "%s: extra args come last, so that they override the chart's", chart)
			Expect(args).To(ContainElement("--zap-log-level="+values["logLevel"].(string)), "%s: logLevel", chart)
			Expect(pod).To(HaveKeyWithValue("securityContext", values["podSecurityContext"]), "%s: podSecurityContext", chart)
			Expect(container).To(HaveKeyWithValue("securityContext", values["securityContext"]), "%s: securityContext", chart)
			for name, value := range values["env"].(map[string]any) {
				Expect(container["env"]).To(ContainElement(map[string]any{"name": name, "value": value}), "%s: env", chart)
			}
			for _, e := range values["extraEnv"].([]any) {
				Expect(container["env"]).To(ContainElement(e), "%s: extraEnv", chart)
			}
			for _, v := range values["extraVolumes"].([]any) {
				Expect(pod["volumes"]).To(ContainElement(v), "%s: extraVolumes", chart)
			}
			for _, m := range values["extraVolumeMounts"].([]any) {
				Expect(container["volumeMounts"]).To(ContainElement(m), "%s: extraVolumeMounts", chart)
			}
			crds := ofKind(objs, "CustomResourceDefinition")
			Expect(crds).NotTo(BeEmpty(), chart)
			for _, crd := range crds {
				if crd.GetName() == "provisioningrequests.autoscaling.x-k8s.io" {
					continue // always kept: Cluster Autoscaler or Kueue may use it
				}
				Expect(crd.GetAnnotations()).NotTo(HaveKey("helm.sh/resource-policy"), "%s: crds.keep=false lets helm uninstall delete %s", chart, crd.GetName())
			}
		}

		// The conventions both charts share: labels on every object, the
		// ServiceAccount's name and annotations wherever it is named, the
		// pods' labels and annotations, a PDB for several replicas.
		for _, chart := range []string{"imperator-hub", "imperator-spoke"} {
			valuesFile := filepath.Join(chartDir(chart), "ci", "all-values.yaml")
			data, err := os.ReadFile(valuesFile)
			Expect(err).NotTo(HaveOccurred())
			var values struct {
				CommonLabels   map[string]string `json:"commonLabels"`
				PodLabels      map[string]string `json:"podLabels"`
				PodAnnotations map[string]string `json:"podAnnotations"`
				ServiceAccount struct {
					Name        string            `json:"name"`
					Annotations map[string]string `json:"annotations"`
				} `json:"serviceAccount"`
			}
			Expect(yaml.Unmarshal(data, &values)).To(Succeed())
			Expect(values.CommonLabels).NotTo(BeEmpty(), chart)
			Expect(values.ServiceAccount.Name).NotTo(BeEmpty(), chart)
			objs, err := helmTemplate(ctx, chart, "-f", valuesFile)
			Expect(err).NotTo(HaveOccurred())
			for _, o := range objs {
				for k, v := range values.CommonLabels {
					Expect(o.GetLabels()).To(HaveKeyWithValue(k, v), "%s: commonLabels on %s %s", chart, o.GetKind(), o.GetName())
				}
			}
			accounts := ofKind(withoutHooks(objs), "ServiceAccount")
			Expect(accounts).To(HaveLen(1), chart)
			Expect(accounts[0].GetName()).To(Equal(values.ServiceAccount.Name), chart)
			Expect(accounts[0].GetAnnotations()).To(Equal(values.ServiceAccount.Annotations), chart)
			template := ofKind(objs, "Deployment")[0].Object["spec"].(map[string]any)["template"].(map[string]any)
			Expect(template["spec"]).To(HaveKeyWithValue("serviceAccountName", values.ServiceAccount.Name), chart)
			for k, v := range values.PodLabels {
				Expect(template["metadata"]).To(HaveKeyWithValue("labels", HaveKeyWithValue(k, v)), chart)
			}
			for k, v := range values.PodAnnotations {
				Expect(template["metadata"]).To(HaveKeyWithValue("annotations", HaveKeyWithValue(k, v)), chart)
			}
			for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
				for _, b := range ofKind(withoutHooks(objs), kind) {
					subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
					for _, sub := range subjects {
						if sub.(map[string]any)["kind"] == "ServiceAccount" {
							Expect(sub).To(HaveKeyWithValue("name", values.ServiceAccount.Name), "%s: %s %s", chart, kind, b.GetName())
						}
					}
				}
			}
			Expect(ofKind(objs, "PodDisruptionBudget")).To(HaveLen(1), "%s: several replicas have a PodDisruptionBudget", chart)
		}

		// monitoring: the chart's own pods and its side's alerts, with the
		// labels Prometheus selects them by.
		for chart, names := range map[string][]any{"imperator-hub": {"imperator-hub"}, "imperator-spoke": {"imperator-spoke", "imperator-spoke-hosted"}} {
			objs, err := helmTemplate(ctx, chart, "-f", filepath.Join(chartDir(chart), "ci", "all-values.yaml"))
			Expect(err).NotTo(HaveOccurred())
			monitors := ofKind(objs, "PodMonitor")
			Expect(monitors).To(HaveLen(1), chart)
			Expect(monitors[0].GetLabels()).To(HaveKeyWithValue("release", "kube-prometheus-stack"), chart)
			values, _, _ := unstructured.NestedSlice(monitors[0].Object, "spec", "selector", "matchExpressions")
			Expect(values).To(ConsistOf(HaveKeyWithValue("values", Equal(names))), chart)
			rules := ofKind(objs, "PrometheusRule")
			Expect(rules).To(HaveLen(1), chart)
			groups, _, _ := unstructured.NestedSlice(rules[0].Object, "spec", "groups")
			Expect(groups).To(ConsistOf(HaveKeyWithValue("name", chart)), "%s: its own side's alerts only", chart)
			data, err := json.Marshal(groups)
			Expect(err).NotTo(HaveOccurred())
			Expect(string(data)).To(ContainSubstring("{{ $labels."), "%s: the alerts' templates reach Prometheus, not Helm", chart)
			objs, err = helmTemplate(ctx, chart, standalone(chart)...)
			Expect(err).NotTo(HaveOccurred())
			Expect(ofKind(objs, "PodMonitor", "PrometheusRule")).To(BeEmpty(), "%s: off by default (the CRDs may be missing)", chart)
		}

		hub, err := helmTemplate(ctx, "imperator-hub", "-f", filepath.Join(chartDir("imperator-hub"), "ci", "all-values.yaml"))
		Expect(err).NotTo(HaveOccurred())
		services := ofKind(hub, "Service")
		Expect(services).To(HaveLen(1))
		Expect(services[0].Object).To(HaveKeyWithValue("spec", HaveKeyWithValue("type", "NodePort")))
		Expect(services[0].Object).To(HaveKeyWithValue("spec", HaveKeyWithValue("externalTrafficPolicy", "Local")))
		Expect(services[0].Object).To(HaveKeyWithValue("spec", HaveKeyWithValue("ports", ContainElement(And(
			HaveKeyWithValue("port", BeNumerically("==", 443)), HaveKeyWithValue("nodePort", BeNumerically("==", 30443)))))))
		Expect(ofKind(hub, "Deployment")[0].Object).To(HaveKeyWithValue("spec", HaveKeyWithValue("template",
			HaveKeyWithValue("spec", HaveKeyWithValue("priorityClassName", "system-cluster-critical")))))
		Expect(services[0].GetAnnotations()).To(HaveKeyWithValue("example.com/owner", "platform"))
		deployment := ofKind(hub, "Deployment")[0].Object
		Expect(deployment["spec"].(map[string]any)["template"].(map[string]any)["spec"]).NotTo(HaveKey("topologySpreadConstraints"))

		spoke, err := helmTemplate(ctx, "imperator-spoke", "-f", filepath.Join(chartDir("imperator-spoke"), "ci", "all-values.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(ofKind(spoke, "Secret")).To(BeEmpty(), "hub.existingSecret: the chart makes no join Secret of its own")
		Expect(ofKind(spoke, "Issuer")).To(BeEmpty(), "webhook.certManager.issuerRef: the chart makes no Issuer of its own")
		certificates := ofKind(spoke, "Certificate")
		Expect(certificates).To(HaveLen(1))
		Expect(certificates[0].Object).To(HaveKeyWithValue("spec", HaveKeyWithValue("issuerRef",
			map[string]any{"kind": "ClusterIssuer", "name": "corporate-ca"})))
		pod := ofKind(spoke, "Deployment")[0].Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		Expect(pod).To(HaveKeyWithValue("priorityClassName", "system-node-critical"))
		quotas := ofKind(spoke, "ResourceQuota")
		Expect(quotas).To(HaveLen(1), "priorityClassQuota: the agent's priority class is admitted on GKE")
		Expect(quotas[0].Object).To(HaveKeyWithValue("spec", HaveKeyWithValue("scopeSelector", HaveKeyWithValue("matchExpressions",
			ContainElement(HaveKeyWithValue("values", ConsistOf("system-node-critical")))))))
		Expect(pod).To(HaveKeyWithValue("hostNetwork", true), "webhook.hostNetwork")
		Expect(pod).To(HaveKeyWithValue("dnsPolicy", "ClusterFirstWithHostNet"), "webhook.hostNetwork")
		Expect(ofKind(spoke, "Namespace")[0].GetLabels()).To(HaveKeyWithValue("pod-security.kubernetes.io/enforce", "privileged"),
			"webhook.hostNetwork: no Pod Security level below privileged admits it")
		spokeArgs, _, _ := unstructured.NestedStringSlice(pod["containers"].([]any)[0].(map[string]any), "args")
		Expect(spokeArgs).To(ContainElements("--webhook-port=10443", "--reservation-image=registry.example.com/mirror/pause:3.10"))
		Expect(pod["containers"].([]any)[0]).To(HaveKeyWithValue("ports", ContainElement(HaveKeyWithValue("containerPort", BeNumerically("==", 10443)))))
		for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
			for _, c := range ofKind(spoke, kind) {
				webhooks, _, _ := unstructured.NestedSlice(c.Object, "webhooks")
				Expect(webhooks).NotTo(BeEmpty())
				for _, w := range webhooks {
					Expect(w).To(HaveKeyWithValue("timeoutSeconds", BeNumerically("==", 10)), "webhook.timeoutSeconds: %s %s", kind, c.GetName())
				}
			}
		}
		var guestsOnly []byte
		for _, p := range ofKind(spoke, "ValidatingAdmissionPolicy") {
			if p.GetName() == "imperator-pool-guests-only" {
				guestsOnly, err = json.Marshal(p.Object)
				Expect(err).NotTo(HaveOccurred())
			}
		}
		Expect(string(guestsOnly)).To(ContainSubstring("'system:serviceaccount:imperator-system:imperator-agent'"),
			"serviceAccount.name: pool-guests-only lets the agent's own identity through")
		Expect(string(guestsOnly)).NotTo(ContainSubstring("imperator-system:imperator-spoke'"))
		Expect(pod["volumes"]).To(ContainElement(HaveKeyWithValue("secret", HaveKeyWithValue("secretName", "spoke-b-join"))))
		Expect(ofKind(spoke, "CustomResourceDefinition")).To(ContainElement(HaveField("Object", HaveKeyWithValue("metadata",
			HaveKeyWithValue("name", "provisioningrequests.autoscaling.x-k8s.io")))), "provisioningRequests.installCRD: the ProvisioningRequest CRD is installed")
		standaloneSpoke, err := helmTemplate(ctx, "imperator-spoke", standalone("imperator-spoke")...)
		Expect(err).NotTo(HaveOccurred())
		Expect(ofKind(standaloneSpoke, "CustomResourceDefinition")).NotTo(ContainElement(HaveField("Object", HaveKeyWithValue("metadata",
			HaveKeyWithValue("name", "provisioningrequests.autoscaling.x-k8s.io")))), "by default Cluster Autoscaler owns the ProvisioningRequest CRD")
	})

	It("run `spoke uninstall` as a post-delete hook of the in-cluster spoke, with roles of its own that go with it", func(ctx context.Context) {
		objs, err := helmTemplate(ctx, "imperator-spoke", standalone("imperator-spoke")...)
		Expect(err).NotTo(HaveOccurred())
		hooks := hooksOf(objs)
		Expect(hooks).To(HaveLen(6), "ServiceAccount, ClusterRole and binding, Role and binding, Job")
		for _, h := range hooks {
			Expect(h.GetAnnotations()).To(HaveKeyWithValue("helm.sh/hook", "post-delete"), "%s %s: after the agent is gone, which would put the node labels back", h.GetKind(), h.GetName())
			Expect(h.GetAnnotations()).To(HaveKeyWithValue("helm.sh/hook-delete-policy", "before-hook-creation,hook-succeeded"), "%s %s: gone once it succeeded", h.GetKind(), h.GetName())
			Expect(h.GetName()).To(Equal("imperator-spoke-uninstall"))
		}
		job := ofKind(hooks, "Job")[0].Object
		Expect(job).To(HaveKeyWithValue("spec", HaveKeyWithValue("activeDeadlineSeconds", BeNumerically("==", 180))))
		pod, _, _ := unstructured.NestedMap(job, "spec", "template", "spec")
		Expect(pod).To(HaveKeyWithValue("serviceAccountName", "imperator-spoke-uninstall"))
		Expect(pod).To(HaveKeyWithValue("securityContext", HaveKeyWithValue("runAsNonRoot", true)), "restricted, as the agent")
		container := pod["containers"].([]any)[0].(map[string]any)
		Expect(container["args"]).To(Equal([]any{"uninstall", "--namespace=imperator-system", "--timeout=120s"}))
		Expect(container["image"]).To(Equal(ofKind(objs, "Deployment")[0].Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["image"]),
			"the agent's own image: it has no shell, the binary is the tool")
		rules, _, _ := unstructured.NestedSlice(ofKind(hooks, "ClusterRole")[0].Object, "rules")
		Expect(rules).NotTo(ContainElement(HaveKeyWithValue("verbs", ContainElement(Or(Equal("*"), Equal("delete"), Equal("update"))))),
			"cluster-wide it only patches: nodes, MachineNodePools, guests")

		all, err := helmTemplate(ctx, "imperator-spoke", "-f", filepath.Join(chartDir("imperator-spoke"), "ci", "all-values.yaml"))
		Expect(err).NotTo(HaveOccurred())
		job = ofKind(hooksOf(all), "Job")[0].Object
		Expect(job).To(HaveKeyWithValue("spec", HaveKeyWithValue("activeDeadlineSeconds", BeNumerically("==", 360))), "uninstall.timeoutSeconds + 60")
		args, _, _ := unstructured.NestedSlice(job, "spec", "template", "spec", "containers")
		Expect(args[0]).To(HaveKeyWithValue("args", ContainElement("--timeout=300s")))
		Expect(args[0]).To(HaveKeyWithValue("image", "registry.example.com/imperator/spoke:v0.1.0"))

		for name, set := range map[string][]string{
			"uninstall.cleanup=false":                          {"--set", "hub.standalone=true", "--set", "uninstall.cleanup=false"},
			"a hosted agent (its cluster is not the members')": {"-f", filepath.Join(chartDir("imperator-spoke"), "ci", "hosted-values.yaml")},
			"a hosted member (no agent of its own)":            {"-f", filepath.Join(chartDir("imperator-spoke"), "ci", "hosted-member-values.yaml")},
		} {
			objs, err := helmTemplate(ctx, "imperator-spoke", set...)
			Expect(err).NotTo(HaveOccurred(), name)
			Expect(hooksOf(objs)).To(BeEmpty(), name)
		}
	})

	It("give the uninstall hook the roles `spoke uninstall` needs: under exactly them it releases a pool node, a MachineNodePool, a reservation and a waiting guest; without node patching it fails naming the node", func(ctx context.Context) {
		objs, err := helmTemplate(ctx, "imperator-spoke", standalone("imperator-spoke")...)
		Expect(err).NotTo(HaveOccurred())
		_, err = apply(ctx, ofKind(objs, "Namespace", "CustomResourceDefinition"))
		Expect(err).NotTo(HaveOccurred())
		_, err = cluster.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd/machinenodepools.imperator.tenzen-y.io")
		Expect(err).NotTo(HaveOccurred())
		hooks := hooksOf(objs)
		_, err = apply(ctx, ofKind(hooks, rbacKinds...))
		Expect(err).NotTo(HaveOccurred())
		kubeconfig, err := impersonatingKubeconfig(namespace, "imperator-spoke-uninstall")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx context.Context) {
			_, _ = cluster.Kubectl(ctx, "delete", "--ignore-not-found", "clusterrole,clusterrolebinding", "imperator-spoke-uninstall")
			_, _ = cluster.Kubectl(ctx, "-n", namespace, "delete", "--ignore-not-found", "serviceaccount,role,rolebinding", "imperator-spoke-uninstall")
		})

		const guestNS = "uninstall-tenant"
		poolKey := imperatorv1alpha1.Prefix + "compute-small"
		seed := func() {
			GinkgoHelper()
			Expect(cluster.AddNode(ctx, wrappers.MakeNode("uninstall-pool-node").
				Label(imperatorv1alpha1.NodePoolKey, "ready").Label(poolKey, "uninstall").
				Annotation(imperatorv1alpha1.MachineGroupKey, "uninstall").
				Taint(poolKey, "uninstall", "NoSchedule").Obj())).To(Succeed())
			manifest := fmt.Sprintf(`apiVersion: imperator.tenzen-y.io/v1alpha1
kind: MachineNodePool
metadata:
  name: uninstall-node-pool
  finalizers: [%[1]s]
spec:
  machineGroup: uninstall
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: compute-small-uninstall
  namespace: %[2]s
  labels: {imperator.tenzen-y.io/pod-role: reservation}
spec:
  replicas: 0
  selector: {matchLabels: {imperator.tenzen-y.io/pod-role: reservation}}
  template:
    metadata: {labels: {imperator.tenzen-y.io/pod-role: reservation}}
    spec: {containers: [{name: pause, image: registry.k8s.io/pause:3.10}]}
---
apiVersion: v1
kind: Namespace
metadata:
  name: %[3]s
---
apiVersion: v1
kind: Pod
metadata:
  name: waiting
  namespace: %[3]s
  labels: {imperator.tenzen-y.io/pod-role: guest}
spec:
  schedulingGates: [{name: %[4]s}]
  containers: [{name: main, image: registry.k8s.io/pause:3.10}]
`, imperatorv1alpha1.NodePoolFinalizer, namespace, guestNS, imperatorv1alpha1.SlotSchedulingGate)
			path := filepath.Join(GinkgoT().TempDir(), "seed.yaml")
			Expect(os.WriteFile(path, []byte(manifest), 0o600)).To(Succeed())
			_, err := cluster.Kubectl(ctx, "apply", "-f", path)
			Expect(err).NotTo(HaveOccurred())
		}
		DeferCleanup(func(ctx context.Context) {
			_, _ = cluster.Kubectl(ctx, "patch", "machinenodepool", "uninstall-node-pool", "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
			_, _ = cluster.Kubectl(ctx, "delete", "--ignore-not-found", "--wait=false", "machinenodepool/uninstall-node-pool", "node/uninstall-pool-node", "namespace/"+guestNS)
			_, _ = cluster.Kubectl(ctx, "-n", namespace, "delete", "--ignore-not-found", "statefulset/compute-small-uninstall")
		})
		run := func() (int, string) {
			cmd := exec.CommandContext(ctx, filepath.Join(binDir, "spoke"), "uninstall", "--kubeconfig="+kubeconfig, "--namespace="+namespace, "--timeout=60s")
			var output bytes.Buffer
			cmd.Stdout, cmd.Stderr = &output, &output
			err := cmd.Run()
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				return exit.ExitCode(), output.String()
			}
			Expect(err).NotTo(HaveOccurred())
			return 0, output.String()
		}

		// Negative control: the same roles without patching nodes.
		seed()
		_, err = apply(ctx, []*unstructured.Unstructured{withoutVerb(ofKind(hooks, "ClusterRole")[0], "nodes", "patch")})
		Expect(err).NotTo(HaveOccurred())
		code, out := run()
		Expect(code).To(Equal(1), out)
		Expect(out).To(ContainSubstring("releasing node uninstall-pool-node"))
		Expect(out).To(ContainSubstring("forbidden"))

		_, err = apply(ctx, ofKind(hooks, "ClusterRole"))
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() (int, error) {
			code, out := run()
			if code != 0 {
				return code, fmt.Errorf("spoke uninstall: %s", out)
			}
			return code, nil
		}).WithTimeout(30*time.Second).Should(Equal(0), "the roles the hook ships")
		node, err := cluster.Kubectl(ctx, "get", "node", "uninstall-pool-node", "-o", "json")
		Expect(err).NotTo(HaveOccurred())
		Expect(node).NotTo(ContainSubstring(`"` + imperatorv1alpha1.Prefix))
		finalizers, err := cluster.Kubectl(ctx, "get", "machinenodepool", "uninstall-node-pool", "-o", "jsonpath={.metadata.finalizers}")
		Expect(err).NotTo(HaveOccurred())
		Expect(finalizers).To(BeEmpty())
		sts, err := cluster.Kubectl(ctx, "-n", namespace, "get", "statefulset", "compute-small-uninstall", "--ignore-not-found", "-o", "jsonpath={.metadata.deletionTimestamp}{.metadata.name}")
		Expect(err).NotTo(HaveOccurred())
		Expect(sts).NotTo(Equal("compute-small-uninstall"), "the reservation is deleted")
		queue, err := cluster.Kubectl(ctx, "-n", guestNS, "get", "pod", "waiting", "-o", `jsonpath={.metadata.annotations.imperator\.tenzen-y\.io/queue}`)
		Expect(err).NotTo(HaveOccurred())
		Expect(queue).To(HavePrefix("Imperator was uninstalled from this cluster"))
		events, err := cluster.Kubectl(ctx, "-n", guestNS, "get", "events", "--field-selector", "reason=ImperatorUninstalled", "-o", "name")
		Expect(err).NotTo(HaveOccurred())
		Expect(events).NotTo(BeEmpty(), "the waiting guest's Warning event")
	})

	It("leave out the PodDisruptionBudget for one replica, the CRDs with crds.install=false, and refuse renaming objects", func(ctx context.Context) {
		for _, chart := range []string{"imperator-hub", "imperator-spoke"} {
			objs, err := helmTemplate(ctx, chart, append(standalone(chart), "--set", "replicas=1")...)
			Expect(err).NotTo(HaveOccurred())
			Expect(ofKind(objs, "PodDisruptionBudget")).To(BeEmpty(), "%s: minAvailable 1 of 1 replica would block every drain", chart)
			objs, err = helmTemplate(ctx, chart, standalone(chart)...)
			Expect(err).NotTo(HaveOccurred())
			Expect(ofKind(objs, "PodDisruptionBudget")).To(HaveLen(1), chart)
			Expect(ofKind(objs, "CustomResourceDefinition")).NotTo(BeEmpty(), chart)
			for _, crd := range ofKind(objs, "CustomResourceDefinition") {
				Expect(crd.GetAnnotations()).To(HaveKeyWithValue("helm.sh/resource-policy", "keep"), "%s: helm uninstall keeps %s", chart, crd.GetName())
			}
			objs, err = helmTemplate(ctx, chart, append(standalone(chart), "--set", "crds.install=false")...)
			Expect(err).NotTo(HaveOccurred())
			Expect(ofKind(objs, "CustomResourceDefinition")).To(BeEmpty(), chart)
			objs, err = helmTemplate(ctx, chart, append(standalone(chart), "--set", "serviceAccount.create=false")...)
			Expect(err).NotTo(HaveOccurred())
			Expect(ofKind(withoutHooks(objs), "ServiceAccount")).To(BeEmpty(), chart)
			// The chart sets these itself: env/extraEnv may not (in helm
			// template, what helm install runs first).
			_, err = helmTemplate(ctx, chart, append(standalone(chart), "--set", "env.POD_NAMESPACE=x")...)
			Expect(err).To(MatchError(ContainSubstring("env/extraEnv: POD_NAMESPACE is set by the chart itself")), chart)
			_, err = helmTemplate(ctx, chart, append(standalone(chart), "--set", "extraEnv[0].name=POD_NAMESPACE", "--set", "extraEnv[0].value=x")...)
			Expect(err).To(MatchError(ContainSubstring("env/extraEnv: POD_NAMESPACE is set by the chart itself")), chart)
			for _, key := range []string{"nameOverride", "fullnameOverride"} {
				_, err = helmTemplate(ctx, chart, append(standalone(chart), "--set", key+"=gpu")...)
				Expect(err).To(MatchError(ContainSubstring(key+`="gpu": the chart's object names cannot be changed`)), chart)
			}
			_, err = helmTemplate(ctx, chart, append(standalone(chart), "--set", "global.imageRegistry=r.example.com")...)
			Expect(err).NotTo(HaveOccurred(), "%s: a parent chart's global values are accepted", chart)
		}
	})

	It("leave the namespace to the installer by default (helm install --create-namespace), render it labelled with namespace.create=true, and restart the agent when the hub's address changes", func(ctx context.Context) {
		for _, chart := range []string{"imperator-hub", "imperator-spoke", "imperator-dispatcher"} {
			objs, err := helmTemplateInto(ctx, chart, "gpu-fleet", standalone(chart)...)
			Expect(err).NotTo(HaveOccurred())
			Expect(ofKind(objs, "Namespace")).To(BeEmpty(), chart)
			objs, err = helmTemplateInto(ctx, chart, "gpu-fleet", append(standalone(chart), "--set", "namespace.create=true")...)
			Expect(err).NotTo(HaveOccurred())
			namespaces := ofKind(objs, "Namespace")
			Expect(namespaces).To(HaveLen(1), chart)
			Expect(namespaces[0].GetName()).To(Equal("gpu-fleet"), chart)
			Expect(namespaces[0].GetLabels()).To(HaveKeyWithValue("pod-security.kubernetes.io/enforce", "restricted"), chart)
		}
		checksum := func(address string) string {
			GinkgoHelper()
			objs, err := helmTemplate(ctx, "imperator-spoke", "--set", "hub.address="+address, "--set", "hub.clusterName=spoke-a", "--set", "hub.ca=x")
			Expect(err).NotTo(HaveOccurred())
			sum, _, _ := unstructured.NestedString(ofKind(objs, "Deployment")[0].Object, "spec", "template", "metadata", "annotations", "checksum/hub")
			Expect(sum).NotTo(BeEmpty())
			return sum
		}
		Expect(checksum("hub-a.example.com:9443")).NotTo(Equal(checksum("hub-b.example.com:9443")))
	})

	DescribeTable("refuse a bad value with a message naming it, in helm lint and helm install",
		func(ctx context.Context, chart string, set []string, message string) {
			var args []string
			for _, s := range set {
				args = append(args, "--set", s)
			}
			_, err := helmRun(ctx, append([]string{"lint", chartDir(chart)}, args...)...)
			Expect(err).To(MatchError(ContainSubstring(message)), "helm lint")
			_, err = helmTemplate(ctx, chart, args...)
			Expect(err).To(MatchError(ContainSubstring(message)), "helm template (what helm install runs first)")
		},
		Entry("replicas that are not a number", "imperator-hub", []string{"replicas=two"}, "at '/replicas': got string, want integer"),
		Entry("a misspelt top-level key", "imperator-hub", []string{"replica=3"}, "additional properties 'replica' not allowed"),
		Entry("a misspelt nested key", "imperator-hub", []string{"service.typ=LoadBalancer"}, "at '/service': additional properties 'typ' not allowed"),
		Entry("a service type Kubernetes does not have", "imperator-hub", []string{"service.type=Ingress"}, "at '/service/type'"),
		Entry("an extra arg that is not a flag", "imperator-hub", []string{"extraArgs[0]=leader-elect"}, "at '/extraArgs/0'"),
		Entry("installCRD that is not a boolean", "imperator-spoke", []string{"hub.standalone=true", "provisioningRequests.installCRD=yes"},
			"at '/provisioningRequests/installCRD': got string, want boolean"),
		Entry("a misspelt toleration field", "imperator-spoke", []string{"tolerations[0].key=a", "tolerations[0].opertor=Exists"}, "additional properties 'opertor' not allowed"),
		Entry("a hub address without a cluster name", "imperator-spoke", []string{"hub.address=hub.example.com:9443", "hub.ca=x"}, "at '/hub/clusterName'"),
		Entry("a hub address without the hub's CA", "imperator-spoke", []string{"hub.address=hub.example.com:9443", "hub.clusterName=spoke-a"}, "at '/hub/ca'"),
		Entry("a hub address without a port", "imperator-spoke", []string{"hub.address=hub.example.com", "hub.clusterName=spoke-a", "hub.ca=x"}, "at '/hub/address'"),
		Entry("a cluster name that is not a DNS label", "imperator-spoke", []string{"hub.address=h:9443", "hub.clusterName=Spoke_A", "hub.ca=x"}, "at '/hub/clusterName'"),
		Entry("a cert-manager issuer without its kind", "imperator-spoke", []string{"webhook.certManager.enabled=true", "webhook.certManager.issuerRef.name=ca"}, "missing property 'kind'"),
		Entry("a hosted mode the agent does not have", "imperator-spoke", []string{"hosted.mode=edge"}, "at '/hosted/mode'"),
		Entry("a hosted agent without the URL its members call", "imperator-spoke", []string{"hosted.mode=management"}, "at '/hosted/webhookURL'"),
		Entry("a hosted agent's webhook URL without TLS", "imperator-spoke", []string{"hosted.mode=management", "hosted.webhookURL=http://webhooks.example.com"}, "at '/hosted/webhookURL'"),
		Entry("a hosted agent given one member's join token", "imperator-spoke", []string{"hosted.mode=management", "hosted.webhookURL=https://w.example.com", "hub.address=h:9443", "hub.ca=x", "hub.joinToken=a.b"}, "at '/hub/joinToken'"),
		Entry("a member given a hub to join", "imperator-spoke", []string{"hosted.mode=member", "hub.address=h:9443", "hub.clusterName=a", "hub.ca=x"}, "at '/hub/address'"),
		Entry("a hosted agent's flag without hosted mode", "imperator-spoke", []string{"hosted.webhookURL=https://w.example.com"}, "at '/hosted/webhookURL'"),
		Entry("a spoke without hub.address nor hub.standalone=true (an upgrade given only a new image tag would detach it)", "imperator-spoke", []string{"image.tag=v0.2.0"}, "at '/hub/standalone': value must be true"),
		Entry("a spoke without hub.address nor hub.standalone=true names the address too", "imperator-spoke", []string{"hub.standalone=false"}, "at '/hub/address': minLength: got 0, want 1"),
		Entry("a stand-alone spoke given a hub address", "imperator-spoke", []string{"hub.standalone=true", "hub.address=h:9443", "hub.clusterName=a", "hub.ca=x"}, "at '/hub/address': maxLength"),
		Entry("a pod label that replaces the selectors' name", "imperator-hub", []string{"podLabels.app\\.kubernetes\\.io/name=x"}, "at '/podLabels'"),
		Entry("a ServiceAccount name that is not a DNS name", "imperator-hub", []string{"serviceAccount.name=Hub_SA"}, "at '/serviceAccount/name'"),
		Entry("a node port outside the NodePort range", "imperator-hub", []string{"service.nodePort=80"}, "at '/service/nodePort'"),
		Entry("a source range that is not a CIDR", "imperator-hub", []string{"service.loadBalancerSourceRanges[0]=10.0.0.1"}, "at '/service/loadBalancerSourceRanges/0'"),
		Entry("an external traffic policy Kubernetes does not have", "imperator-hub", []string{"service.externalTrafficPolicy=Nearest"}, "at '/service/externalTrafficPolicy'"),
		Entry("a PodDisruptionBudget switch that is not a boolean", "imperator-hub", []string{"podDisruptionBudget.enabled=maybe"}, "at '/podDisruptionBudget/enabled'"),
		Entry("crds.install that is not a boolean", "imperator-hub", []string{"crds.install=no"}, "at '/crds/install'"),
		Entry("a webhook timeout above the API server's 30 s", "imperator-spoke", []string{"hub.standalone=true", "webhook.timeoutSeconds=60"}, "at '/webhook/timeoutSeconds'"),
		Entry("a privileged webhook port (the agent runs as non-root)", "imperator-spoke", []string{"hub.standalone=true", "webhook.port=443"}, "at '/webhook/port'"),
		Entry("a reservation image that is not an image reference", "imperator-spoke", []string{"hub.standalone=true", "reservation.image=pause 3.10"}, "at '/reservation/image'"),
		Entry("a misspelt serviceAccount key", "imperator-spoke", []string{"hub.standalone=true", "serviceAccount.annotation.a=b"}, "at '/serviceAccount': additional properties 'annotation' not allowed"),
		Entry("a log level zap does not have", "imperator-hub", []string{"logLevel=verbose"}, "at '/logLevel'"),
		Entry("an extraEnv entry without a name", "imperator-hub", []string{"extraEnv[0].value=x"}, "at '/extraEnv/0': missing property 'name'"),
		Entry("a volume mount without a path", "imperator-hub", []string{"extraVolumeMounts[0].name=ca"}, "at '/extraVolumeMounts/0': missing property 'mountPath'"),
		Entry("crds.keep that is not a boolean", "imperator-spoke", []string{"hub.standalone=true", "crds.keep=maybe"}, "at '/crds/keep'"),
		Entry("an uninstall hook timeout below 10 s", "imperator-spoke", []string{"hub.standalone=true", "uninstall.timeoutSeconds=1"}, "at '/uninstall/timeoutSeconds'"),
		Entry("a namespaceOverride that is not a namespace name", "imperator-spoke", []string{"hub.standalone=true", "namespaceOverride=GPU_Fleet"}, "at '/namespaceOverride'"),
		Entry("a namespaceOverride that is not a string", "imperator-hub", []string{"namespaceOverride.name=gpu"}, "at '/namespaceOverride': got object, want string"),
		Entry("a hosted agent with a cert-manager certificate", "imperator-spoke", []string{"hosted.mode=management", "hosted.webhookURL=https://w.example.com", "webhook.certManager.enabled=true"}, "at '/webhook/certManager/enabled'"),
	)

	It("tag the images with the chart's appVersion unless image.tag is set, and refuse Kubernetes before 1.30 (the admission policies)", func(ctx context.Context) {
		for _, chart := range []string{"imperator-hub", "imperator-spoke"} {
			data, err := os.ReadFile(filepath.Join(chartDir(chart), "Chart.yaml"))
			Expect(err).NotTo(HaveOccurred())
			var meta struct{ AppVersion, KubeVersion string }
			Expect(yaml.Unmarshal(data, &meta)).To(Succeed())
			Expect(meta.AppVersion).NotTo(BeEmpty(), chart)
			Expect(meta.KubeVersion).To(Equal(">=1.30.0-0"), chart)
			for tag, want := range map[string]string{"": meta.AppVersion, "v9.8.7": "v9.8.7"} {
				objs, err := helmTemplate(ctx, chart, append(standalone(chart), "--set", "image.tag="+tag)...)
				Expect(err).NotTo(HaveOccurred())
				image, _, _ := unstructured.NestedSlice(ofKind(objs, "Deployment")[0].Object, "spec", "template", "spec", "containers")
				Expect(image).To(ContainElement(HaveKeyWithValue("image", HaveSuffix(":"+want))), "%s with image.tag=%q", chart, tag)
			}
			_, err = helmRun(ctx, append([]string{"template", chart, chartDir(chart), "--kube-version", "1.29.9"}, standalone(chart)...)...)
			Expect(err).To(MatchError(ContainSubstring("chart requires kubeVersion: >=1.30.0-0")), chart)
		}
	})

	It("print the next command after install: the hub how to join a spoke, the spoke how to check the join", func(ctx context.Context) {
		out, err := helmInstallDryRun(ctx, "imperator-hub", "-f", filepath.Join(chartDir("imperator-hub"), "ci", "external-values.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("/hub token create --cluster"))
		Expect(out).To(ContainSubstring("helm install imperator-spoke deploy/charts/imperator-spoke"))
		Expect(out).To(ContainSubstring("--set hub.address=hub.example.com:9443"))

		out, err = helmInstallDryRun(ctx, "imperator-hub")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("spokes in other clusters cannot reach this hub"))

		out, err = helmInstallDryRun(ctx, "imperator-spoke", "-f", filepath.Join(chartDir("imperator-spoke"), "ci", "join-values.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("kubectl get managedcluster spoke-a"))

		By("the dispatcher: the hub's client-cert command runs in the hub's namespace, which its address names or the reader fills in")
		for address, want := range map[string]string{
			"":                            "kubectl -n " + namespace + " exec deploy/imperator-hub",
			"imperator-hub.hubs.svc:9443": "kubectl -n hubs exec deploy/imperator-hub",
			"imperator-hub.hubs.svc.cluster.local:9443": "kubectl -n hubs exec deploy/imperator-hub",
			"hub.example.com:9443":                      "kubectl -n HUB_NAMESPACE exec deploy/imperator-hub",
		} {
			args := []string{}
			if address != "" {
				args = append(args, "--set", "hub.address="+address)
			}
			out, err = helmInstallDryRun(ctx, "imperator-dispatcher", args...)
			Expect(err).NotTo(HaveOccurred())
			Expect(out).To(ContainSubstring(want), "hub.address=%q", address)
		}
	})
})

// clusterScoped are the kinds the charts render without a namespace.
var clusterScoped = []string{"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "PriorityClass",
	"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
	"MutatingAdmissionPolicy"}

// standalone are the flags that let chart render without a hub: the spoke
// refuses an empty hub.address unless hub.standalone=true says so.
func standalone(chart string) []string {
	if chart == "imperator-spoke" {
		return []string{"--set", "hub.standalone=true"}
	}
	return nil
}

// entriesOf returns a table entry for each value set that keep accepts.
func entriesOf(keep func(chartValueSet) bool) []TableEntry {
	var entries []TableEntry
	for _, v := range chartValueSets {
		if keep(v) {
			entries = append(entries, Entry(v.name(), v))
		}
	}
	return entries
}

// hooksOf returns the Helm hooks among objs (helm.sh/hook annotated), and
// withoutHooks the rest.
func hooksOf(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if _, ok := o.GetAnnotations()["helm.sh/hook"]; ok {
			out = append(out, o)
		}
	}
	return out
}

func withoutHooks(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if _, ok := o.GetAnnotations()["helm.sh/hook"]; !ok {
			out = append(out, o)
		}
	}
	return out
}

// notMonitoring leaves out the Prometheus Operator's objects, whose CRDs the
// test cluster does not have.
func notMonitoring(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GroupVersionKind().Group != "monitoring.coreos.com" {
			out = append(out, o)
		}
	}
	return out
}
